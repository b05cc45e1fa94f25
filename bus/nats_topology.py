"""The bus's topology calls: streams, KV buckets, the weights object store, durable consumers.

Consumes declarative `bus.subjects.StreamSpec`/`ConsumerSpec` lists and the bus's settings;
produces them on the server, created or updated in place, with the configured replicas, and
waits for a leader where replicated. A mixin of `bus.nats_bus.Bus` (it uses `self.js` and
`self.settings`); it publishes nothing and holds no domain logic.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import nats.js.errors
from nats.js import api

from bus import subjects
from bus.errors import BusError
from bus.nats_retry import REPLICAS_REFUSED, STORAGE_EXHAUSTED, retry

MAX_WAITING_PULLS = 4096
"""Pull requests a durable consumer keeps waiting on the server: one per instance of the kind
reading it. The server's default, 512, refused the 513th instance's requests (409 Exceeded
MaxWaiting; bench/scale/scale.py at 1,000 actors). It cannot be changed on an existing durable."""


class StreamTopology:
    """Creates what the run's streams, buckets and consumers need on the server."""

    js: "nats.js.JetStreamContext"
    settings: Any
    "The bus's `bus.nats_bus.BusSettings` (replicas, ack wait, limits, url)."

    async def ensure_topology(self, specs: list[subjects.StreamSpec]) -> None:
        """Create or update every stream, KV bucket and the weights object store.

        Raises BusError naming the stream and its config key when the server cannot reserve
        a stream's size cap.
        """
        replicas = self.settings.replicas
        try:
            for spec in specs:
                try:
                    await self._ensure_stream(spec)
                except nats.js.errors.APIError as exc:
                    if exc.err_code != STORAGE_EXHAUSTED:
                        raise
                    raise BusError(_no_room(spec, specs)) from exc
            for bucket, max_age in (
                (subjects.BUCKET_POLICY, 0.0),
                (subjects.BUCKET_ACTORS, 3600.0),
                (subjects.BUCKET_RUN, 0.0),
            ):
                await self._replicate(subjects.kv_stream(bucket))
                await self.js.create_key_value(
                    api.KeyValueConfig(bucket=bucket, history=1, ttl=max_age or None,
                                       storage=api.StorageType.FILE, replicas=replicas)
                )
            await self._replicate(subjects.object_stream(subjects.BUCKET_WEIGHTS))
            await self.js.create_object_store(
                subjects.BUCKET_WEIGHTS,
                api.ObjectStoreConfig(storage=api.StorageType.FILE, replicas=replicas),
            )
        except nats.js.errors.APIError as exc:
            if exc.err_code not in REPLICAS_REFUSED:
                raise
            raise BusError(_too_few_nodes(self.settings, str(exc.description))) from exc
        if replicas > 1:  # ready means usable: each replicated stream has elected a leader
            for name in [s.name for s in specs] + [
                    subjects.kv_stream(b) for b in (subjects.BUCKET_POLICY, subjects.BUCKET_ACTORS,
                                                    subjects.BUCKET_RUN)] + [
                    subjects.object_stream(subjects.BUCKET_WEIGHTS)]:
                await retry(partial(self._led, name), what=f"no leader for stream {name}",
                            deadline_s=self.settings.publish_deadline_s, first_delay_s=0.05,
                            max_delay_s=0.25)

    async def _led(self, stream: str) -> None:
        info = await self.js.stream_info(stream)
        if info.cluster is not None and not info.cluster.leader:
            raise TimeoutError(f"stream {stream} has no leader yet")

    async def _replicate(self, stream: str) -> None:
        """Give an existing bucket's stream the configured replicas (a bucket made before
        `[bus] replicas` changed): creating it again with other replicas is refused."""
        try:
            info = await self.js.stream_info(stream)
        except nats.js.errors.NotFoundError:
            return
        if (info.config.num_replicas or 1) != self.settings.replicas:
            info.config.num_replicas = self.settings.replicas
            await self.js.update_stream(info.config)

    async def _ensure_stream(self, spec: subjects.StreamSpec) -> None:
        config = api.StreamConfig(
            name=spec.name,
            subjects=list(spec.subjects),
            retention=(api.RetentionPolicy.WORK_QUEUE if spec.retention == "workqueue"
                       else api.RetentionPolicy.LIMITS),
            storage=api.StorageType.FILE,
            max_age=spec.max_age_s or None,
            max_bytes=spec.max_bytes,
            discard=api.DiscardPolicy.NEW if spec.discard_new else api.DiscardPolicy.OLD,
            duplicate_window=self.settings.duplicate_window_s,
            max_msgs_per_subject=spec.max_msgs_per_subject,
            num_replicas=self.settings.replicas,
        )
        try:
            await self.js.add_stream(config)
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code in REPLICAS_REFUSED:
                raise
            await self.js.update_stream(config)

    async def ensure_consumer(self, spec: subjects.ConsumerSpec, *, ack_wait_s: float | None = None,
                              max_deliver: int | None = None) -> None:
        """Create the durable pull consumer if it does not exist yet."""
        config = api.ConsumerConfig(
            durable_name=spec.durable,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=ack_wait_s or self.settings.ack_wait_s,
            max_deliver=max_deliver or self.settings.max_deliver,
            filter_subject=spec.filter_subject,
            max_ack_pending=self.settings.max_ack_pending,
            max_waiting=MAX_WAITING_PULLS,
        )
        try:
            await self.js.consumer_info(spec.stream, spec.durable)
        except nats.js.errors.NotFoundError:
            await self.js.add_consumer(spec.stream, config)
        if self.settings.replicas > 1:  # a replicated consumer serves once it has a leader
            await retry(partial(self._consumer_led, spec), what=f"no leader for {spec.durable}",
                        deadline_s=self.settings.publish_deadline_s, first_delay_s=0.05,
                        max_delay_s=0.25)

    async def _consumer_led(self, spec: subjects.ConsumerSpec) -> None:
        info = await self.js.consumer_info(spec.stream, spec.durable)
        if info.cluster is not None and not info.cluster.leader:
            raise TimeoutError(f"consumer {spec.durable} has no leader yet")


def _too_few_nodes(settings: Any, said: str) -> str:
    return (f"the NATS server at {settings.url} cannot keep {settings.replicas} replicas of"
            f" each stream ({said}): [bus] replicas = {settings.replicas} needs a JetStream"
            f" cluster of at least {settings.replicas} nodes, all up. Start one (`[bus]"
            f" embedded_nodes = 3` for a local cluster, or docker-compose.cluster.yml) and"
            f" list every node in [bus] url / WHET_NATS_URL, comma separated; or set"
            f" [bus] replicas = 1 for a single server")


def _no_room(spec: subjects.StreamSpec, specs: list[subjects.StreamSpec]) -> str:
    mb = 1024 * 1024
    capped = [s for s in specs if s.max_bytes > 0]
    total = sum(s.max_bytes for s in capped) // mb
    keys = sorted({s.cap_key for s in capped if s.cap_key})
    return (f"the NATS server cannot reserve {spec.max_bytes // mb} MB for stream {spec.name}"
            f" ({spec.cap_key or 'max_bytes'}): JetStream reserves every stream's size cap"
            f" up front, these streams ask for {total} MB together, and the server's file"
            f" store (by default 75% of the free disk where it stores) has less room left."
            f" Lower {', '.join(keys) or 'the caps'}, or free disk for the server")
