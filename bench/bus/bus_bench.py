"""Benchmark: whetstone's bus layer against raw nats-py doing the same work, in one run.

Consumes nothing; starts its own nats-server (file storage) and prints, for 1 KB and 26 KB
messages, JetStream publish-with-ack throughput and pull-consume-with-ack throughput for
both, and the ratio bus/raw (target >= 0.9). Each side is measured on a fresh stream, the
sides alternate (which goes first alternates too), and the medians of the repeats are
reported: of each side's rate, and of the ratios of the pairs measured one after the other
(on a loaded machine the load drifts between repeats; a pair shares it).

    python bench/bus/bus_bench.py [--repeats 5] [--small 20000] [--large 4000]
    python bench/bus/bus_bench.py --sync [--repeats 3] [--sync-n 2000] [--dir D]

What each side does:
- publish, raw: `js.publish_async` of pre-encoded bytes with a Nats-Msg-Id, then await all.
- publish, bus: `Bus.publish_many` of message objects (encoding included).
- consume, raw: `pull_subscribe` + `fetch(100)` + `msg.ack()`, no decoding.
- consume, raw cb: what the bus does underneath, bare: pull requests of 100 answered to a
  callback that acks, no decoding. nats-py's `fetch` starts two tasks per message, so this is
  the stronger baseline; its ratio is printed too (`vs cb`).
- consume, bus: `bus.consumer.consume` (decoding, dedupe, bookkeeping, workers) with a no-op
  handler, timed from when it reports started (as raw is timed from its subscription).

With `--sync` it measures instead what durability costs: two servers side by side, one
with JetStream's default sync interval ("2m": flush to disk every two minutes) and one with
"always" (an fsync per write), each checked on its /varz. With 1 KB messages, on each:
sequential `js.publish` (each waits for its ack), `publish_async` then await all, and
`fetch(100)` with `ack` (what the bus's consumers do) or `ack_sync` (the ack confirmed) of
what each publish stored; the servers alternate, the median of the repeats is reported with
the ratio always/default. The stores live under `--dir` (default: the system
temp folder), which must be a real disk: on tmpfs an fsync costs nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import urllib.request
from functools import partial
from pathlib import Path

import anyio
import nats
from nats.js import api

from bus import subjects
from bus.codec import encode, pack_f32, pack_ids
from bus.consumer import consume
from bus.messages import Attempt, Message, ScaleTarget, Task, Turn, Verifier
from bus.nats_bus import Bus, BusSettings, Identity
from runtime.broker.embedded import EmbeddedServer


def one_kb(i: int) -> ScaleTarget:
    return ScaleTarget(kind="x" * 1000, count=i, requested_at=float(i))


def rollout(i: int) -> Attempt:
    task = Task(task_id="t", env="e", env_version="1", domain="d", prompt="p" * 200,
                verifier=Verifier(kind="python_io"))
    turn = Turn(prompt_ids=pack_ids(range(300)), completion_ids=pack_ids(range(1200)),
                logprobs=pack_f32([-0.1] * 1200), completion="c" * 9000, policy_version=i)
    return Attempt(attempt_id=f"a{i}", group_id="g", index=0, group_size=1, task=task,
                   turns=[turn], policy_version=i)


STREAM, SUBJECT, DURABLE = "BENCH", "bench.msgs", "bench"


async def fresh_stream(nc, replicas: int = 1) -> None:
    js = nc.jetstream()
    try:
        await js.delete_stream(STREAM)
    except nats.js.errors.NotFoundError:
        pass
    await js.add_stream(api.StreamConfig(name=STREAM, subjects=[SUBJECT],
                                         retention=api.RetentionPolicy.WORK_QUEUE,
                                         storage=api.StorageType.FILE, duplicate_window=600,
                                         num_replicas=replicas))


async def raw_publish(nc, payloads: list[bytes]) -> float:
    js = nc.jetstream()
    start = time.perf_counter()
    futures = [await js.publish_async(SUBJECT, p, headers={"Nats-Msg-Id": f"m{i}"})
               for i, p in enumerate(payloads)]
    for f in futures:
        await f
    return len(payloads) / (time.perf_counter() - start)


async def sync_publish(nc, payloads: list[bytes]) -> float:
    js = nc.jetstream()
    start = time.perf_counter()
    for i, p in enumerate(payloads):
        await js.publish(SUBJECT, p, headers={"Nats-Msg-Id": f"m{i}"})
    return len(payloads) / (time.perf_counter() - start)


async def bus_publish(bus: Bus, msgs: list[Message]) -> float:
    start = time.perf_counter()
    await bus.publish_many(SUBJECT, [(f"m{i}", m) for i, m in enumerate(msgs)])
    return len(msgs) / (time.perf_counter() - start)


async def raw_consume(nc, n: int, confirmed: bool = False) -> float:
    js = nc.jetstream()
    sub = await js.pull_subscribe(SUBJECT, durable=DURABLE, stream=STREAM,
                                  config=api.ConsumerConfig(ack_policy=api.AckPolicy.EXPLICIT,
                                                            max_ack_pending=4096))
    got, start = 0, time.perf_counter()
    while got < n:
        for msg in await sub.fetch(100, timeout=5):
            await (msg.ack_sync() if confirmed else msg.ack())
            got += 1
    rate = n / (time.perf_counter() - start)
    await sub.unsubscribe()
    return rate


async def raw_callback_consume(nc, n: int) -> float:
    js = nc.jetstream()
    await js.add_consumer(STREAM, api.ConsumerConfig(durable_name=DURABLE, max_ack_pending=4096,
                                                     ack_policy=api.AckPolicy.EXPLICIT))
    inbox, got, left = nc.new_inbox(), 0, 0
    ended = anyio.Event()

    async def on_msg(msg) -> None:
        nonlocal got, left
        if msg.headers and msg.headers.get("Status"):  # the request expired
            ended.set()
            return
        await msg.ack()
        got, left = got + 1, left - 1
        if left == 0:
            ended.set()

    sub = await nc.subscribe(inbox, cb=on_msg)
    start = time.perf_counter()
    while got < n:
        ended, left = anyio.Event(), 100
        await nc.publish(subjects.next_messages(STREAM, DURABLE),
                         json.dumps({"batch": 100, "expires": 1_000_000_000}).encode(), reply=inbox)
        await ended.wait()
    rate = n / (time.perf_counter() - start)
    await sub.unsubscribe()
    return rate


async def bus_consume(bus: Bus, cls: type, n: int) -> float:
    got = 0
    finished = anyio.Event()

    async def handle(msg, delivery) -> None:
        nonlocal got
        got += 1
        if got == n:
            finished.set()

    spec = subjects.ConsumerSpec(STREAM, DURABLE, SUBJECT)
    bus.stopping = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(partial(consume, bus, spec, cls, handle, max_in_flight=100, drain_s=1))
        start = time.perf_counter()
        await finished.wait()
        rate = n / (time.perf_counter() - start)
        bus.stopping.set()
    return rate


async def measure(bus: Bus, nc, make, n: int, repeats: int) -> dict[str, float]:
    msgs = [make(i) for i in range(n)]
    payloads = [encode(m) for m in msgs]
    runs: dict[str, list[float]] = {k: [] for k in ("raw_pub", "bus_pub", "raw_con", "bus_con",
                                                    "cb_con")}

    async def raw() -> None:
        await fresh_stream(nc)
        runs["raw_pub"].append(await raw_publish(nc, payloads))
        runs["raw_con"].append(await raw_consume(nc, n))

    async def ours() -> None:
        await fresh_stream(nc)
        runs["bus_pub"].append(await bus_publish(bus, msgs))
        runs["bus_con"].append(await bus_consume(bus, type(msgs[0]), n))

    for i in range(repeats):
        for side in ((raw, ours) if i % 2 == 0 else (ours, raw)):
            await side()
        await fresh_stream(nc)
        await raw_publish(nc, payloads)
        runs["cb_con"].append(await raw_callback_consume(nc, n))
    out = {k: statistics.median(v) for k, v in runs.items()}
    for phase in ("pub", "con"):
        out[f"ratio_{phase}"] = statistics.median(
            b / r for b, r in zip(runs[f"bus_{phase}"], runs[f"raw_{phase}"]))
    out["ratio_cb"] = statistics.median(b / c for b, c in zip(runs["bus_con"], runs["cb_con"]))
    return out


SYNC_PHASES = {"publish, sync": (sync_publish, "consume, ack", False),
               "publish, async": (raw_publish, "consume, ack_sync", True)}
"Each publish phase, and the consume phase that reads what it stored (plain or confirmed acks)."


def flushing(server: EmbeddedServer) -> str:
    """How the running server says it flushes (from /varz)."""
    with urllib.request.urlopen(f"{server.monitoring_url}/varz", timeout=5) as r:
        js = json.loads(r.read())["jetstream"]["config"]
    return "every write" if js.get("sync_always") else f"every {js['sync_interval'] / 1e9:g} s"


async def measure_sync(args) -> None:
    """Default sync interval against "always", side by side (see the module docstring)."""
    payloads = [encode(one_kb(i)) for i in range(args.sync_n)]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        servers = {v: EmbeddedServer(Path(tmp) / v, sync_interval=v, monitor=True)
                   for v in ("2m", "always")}
        try:
            conns = {}
            for interval, server in servers.items():
                server.start()
                conns[interval] = await nats.connect(server.url)
                print(f"server {interval!r}: flushes {flushing(server)}; store {Path(tmp) / interval}")
            runs: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.repeats):
                for interval, nc in conns.items():
                    for phase, (publish, consume_phase, confirmed) in SYNC_PHASES.items():
                        await fresh_stream(nc)
                        runs.setdefault((interval, phase), []).append(await publish(nc, payloads))
                        runs.setdefault((interval, consume_phase), []).append(
                            await raw_consume(nc, len(payloads), confirmed))
            for nc in conns.values():
                await nc.close()
        finally:
            for server in servers.values():
                server.stop()
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"{'phase':>17} {'2m msg/s':>10} {'always msg/s':>13} {'always/2m':>10}")
    for phase in ("publish, sync", "publish, async", "consume, ack", "consume, ack_sync"):
        slow, fast = med[("always", phase)], med[("2m", phase)]
        print(f"{phase:>17} {fast:>10,.0f} {slow:>13,.0f} {slow / fast:>10.2f}"
              f"   (1 KB, n={args.sync_n}, median of {args.repeats})")


async def main(args) -> None:
    if args.sync:
        await measure_sync(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedServer(Path(tmp) / "nats")
        server.start()
        try:
            bus = await Bus.connect(BusSettings(url=server.url), Identity("bench", "bench"))
            # The consumer loop also reads the server's max-deliveries advisories.
            await bus.ensure_topology([
                spec for spec in subjects.streams(work_max_bytes=-1, retention_s=3600,
                                                  events_max_bytes=-1)
                if spec.name == subjects.STREAM_ADVISORIES])
            nc = await nats.connect(server.url)
            print(f"{'size':>6} {'phase':>8} {'raw msg/s':>11} {'bus msg/s':>11} {'ratio':>6}"
                  f" {'raw cb msg/s':>13} {'vs cb':>6}")
            for label, make, n in (("1KB", one_kb, args.small), ("26KB", rollout, args.large)):
                size = len(encode(make(0)))
                r = await measure(bus, nc, make, n, args.repeats)
                for phase, key in (("publish", "pub"), ("consume", "con")):
                    cb = (f" {r['cb_con']:>13,.0f} {r['ratio_cb']:>6.2f}"
                          if phase == "consume" else " " * 21)
                    print(f"{label:>6} {phase:>8} {r[f'raw_{key}']:>11,.0f}"
                          f" {r[f'bus_{key}']:>11,.0f} {r[f'ratio_{key}']:>6.2f}"
                          f"{cb}   ({size} B, n={n}, median of {args.repeats})", flush=True)
            await nc.close()
            await bus.close()
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--small", type=int, default=20000)
    parser.add_argument("--large", type=int, default=4000)
    parser.add_argument("--sync", action="store_true",
                        help='measure the sync interval instead: default "2m" against "always"')
    parser.add_argument("--sync-n", type=int, default=2000, help="messages per phase with --sync")
    parser.add_argument("--dir", default=None, help="where --sync's stores live (a real disk)")
    anyio.run(main, parser.parse_args())
