"""The learner actor: GRPO-style updates with DeepSpeed, then new weights for the generators.

Consumes `Verdict`s (durable `learner` on whet.v1.verdicts.train), each held unacked until
the checkpoint that contains its update is written. Publishes bf16 weights (with `[learner]
lora`, the adapters alone) in the object store and the new `WeightVersion` in KV after each
update (or every `publish_every`; every batch in sync mode), pruning old versions; writes
each step's typed `StepRecord` to KV whet-run (`learner.step.<step>`), which progress reads
for train.csv and the stop at `max_steps`, and logs `learner.step_completed` naming every
verdict id it consumed. It is DeepSpeed rank 0; the other ranks are its children or
`learner_rank` actors met through the bus (`policy.ranks`). Checkpoints hold a
`policy.checkpoint.LearnerState`, so a restart resumes with optimizer state and never trains
a sample twice (`Learner`). When it stops, it writes the newest checkpoint as a Hugging Face
folder, `<run dir>/model/` (`actors.learner_files`; with LoRA merged, plus `<run dir>/adapter/`).
With `[learner] spare_cores` on one CPU rank it also trains on the cores the generators
and executors leave idle (`policy.spare_cores`). It does not sample, judge or choose tasks,
and never sees eval verdicts.
"""

from __future__ import annotations

import time
from functools import partial

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus

from actors.learner_files import checkpoint_dir, export_final, kept_versions, published_kind
from bus import gauges, subjects
from bus.consumer import Delivery, consume
from bus.messages import StepRecord, Verdict
from bus.nats_bus import Bus
from policy import disk
from policy.batch import Assembled, assemble, signal_members, trajectory_problem
from policy.checkpoint import LearnerState
from policy.groups import Group, GroupBuffer
from policy.ledger import Ledger
from policy.ranks import RankGroup
from policy.publisher import Publisher, round_reported
from policy.spare_cores import SpareCores, for_learner
from policy.versions import current_version, object_name
from runtime.config import RunConfig

log = structlog.get_logger("actors.learner")


class Learner:
    """Rank 0's bookkeeping around the trainer: buffer, ledger, version, and what is unsaved.

    Each verdict is counted once however often it is delivered: the consumer rebinds a
    redelivery of a verdict held here to the held handle, and a copy whose id the ledger
    already holds is kept out of the buffer and acked with the checkpoint that records it.
    Groups (attempts sharing a `group_id`) are trained whole with group-relative advantages
    (per token with `learner.credit = "step"`: `policy.credit`); dropped verdicts are never
    trained and count as missing members; samples older than `training.staleness` versions are
    rejected and counted; `left_out` names them by reason ('dropped', 'stale', 'no_signal');
    groups without signal are trained or refilled by `training.zero_signal`. A
    member arriving after its group was trained without it is acked untrained
    (`learner.late_member_dropped`). With `training.max_steps` set it trains no step past it
    (verdicts arriving after stay unacked). When a rank met through the bus is replaced, it
    leaves, to be restarted and meet them under a new generation."""

    def __init__(self, bus: Bus, config: RunConfig, ranks: RankGroup,
                 resumed: LearnerState) -> None:
        self.bus, self.config, self.ranks = bus, config, ranks
        self.lc = config.learner
        self.resumed = resumed
        "The state the checkpoint held (defaults when starting fresh)."
        self.version = resumed.version
        self.step = resumed.step
        self.samples = resumed.samples
        self.ledger = Ledger.from_state(resumed.consumed_verdicts, resumed.consumed_groups)
        rounds = config.evaluator.every_versions if config.actors.count.get("evaluator") else 0
        self.publisher = Publisher(bus, kept_versions(config), *published_kind(config),
                                   round_every=rounds)
        self.object_name = resumed.object_name
        "Object holding the weights of `version` ('' for the initial weights)."
        self.unpublished = 0
        self.unsaved: list[Delivery] = []
        t = config.training
        refill = t.zero_signal == "refill"
        self.buffer = GroupBuffer(t.batch_size, self.lc.group_timeout_s,
                                  counted=signal_members if refill else None,
                                  most=t.batch_most if refill else 0)
        self.duplicates = 0
        self.consumed_by_steps = resumed.consumed_by_steps or 0
        "Verdicts the steps consumed (trained or left out), through `step`."
        self.consumed_late = resumed.consumed_late
        "Verdicts that arrived after their group was trained without them."
        self.idle_s = self.busy_s = self.held_s = 0.0
        self.checkpoint_bytes = 0
        "Bytes of the newest checkpoint written: the room a next one needs."
        self.inbox, self.outbox = anyio.create_memory_object_stream[tuple[Verdict, Delivery]](
            self.held_limit)
        self.spare: SpareCores | None = for_learner(config.learner, ranks.trainer)
        "The cores training may borrow while the others wait (None: it keeps its own)."

    @property
    def held_limit(self) -> int:
        """Verdicts held unacked at most: a batch per unsaved step, one being filled, slack
        (a refill batch may take `training.batch_most` members and a group more)."""
        t = self.config.training
        batch = t.batch_size if t.zero_signal != "refill" else t.batch_most + t.group_size
        return batch * (self.lc.checkpoint_every + 2) + 4 * t.group_size

    async def resume(self) -> None:
        """Make the KV version match the weights held here, publishing them if it does not."""
        kv = await current_version(self.bus)
        if kv is not None and kv.version == self.version and kv.object_name == self.object_name:
            self.publisher.adopt(kv)
        elif kv is None and not self.resumed.from_checkpoint:
            await self.publisher.publish(0, None, step=0, samples=0)
        else:  # KV names other weights: publish ours (checkpoint, or initial) as a newer version
            self.version = max(self.version, kv.version if kv else 0)
            self.unpublished = 1 if self.resumed.from_checkpoint else 0
            await self._publish(now=True)
        self.bus.stats.policy_version = self.version
        log.info("learner.resumed" if self.resumed.from_checkpoint else "learner.started_fresh",
                 step=self.step, policy_version=self.version, samples=self.samples,
                 checkpoint=self.resumed.checkpoint,
                 optimizer_steps=self.resumed.optimizer_steps,
                 consumed=len(self.ledger.verdicts), consumed_by_steps=self.consumed_by_steps,
                 consumed_late=self.consumed_late)
        self.check_ledger()

    def check_ledger(self) -> None:
        """The checkpoint's ledger must hold exactly what its steps (and late members)
        consumed; a difference means a sample was consumed twice, or lost, before it."""
        expected = self.consumed_by_steps + self.consumed_late
        if (self.resumed.consumed_by_steps is not None and not self.ledger.truncated
                and len(self.ledger.verdicts) != expected):
            log.error("learner.ledger_mismatch", step=self.step, ledger=len(self.ledger.verdicts),
                      consumed_by_steps=self.consumed_by_steps, consumed_late=self.consumed_late,
                      checkpoint=self.resumed.checkpoint)

    async def on_verdict(self, verdict: Verdict, delivery: Delivery) -> None:
        """Consumer handler: skip what a checkpoint holds, pass the rest to the loop."""
        if self.ledger.saved(verdict.verdict_id):
            self.duplicates += 1  # a checkpoint holds its update: nothing to wait for
            log.info("learner.duplicate_skipped", verdict_id=verdict.verdict_id)
            return
        problem = trajectory_problem(verdict.attempt, self.ranks.vocab_size)
        if problem:  # retried, then dead-lettered by the consumer with this reason
            raise ValueError(f"verdict {verdict.verdict_id}: {problem}")
        delivery.defer()
        await self.inbox.send((verdict, delivery))

    async def loop(self) -> None:
        """Gather verdicts into groups and train on each batch, until stopping."""
        idle_since = time.monotonic()
        last = self.config.training.max_steps
        while not self.bus.stopping.is_set():
            # Past `training.max_steps` it trains nothing more; verdicts still arriving stay
            # held (unacked), for a later run that resumes with a higher limit.
            done = bool(last) and self.step >= last
            groups = [] if done else self.buffer.take_batch(time.time())
            if groups:
                self.bus.stats.gauges[gauges.LEARNER_HELD] = float(self.buffer.held())
                self.idle_s += time.monotonic() - idle_since
                await self.train_on(groups)
                idle_since = time.monotonic()
                continue
            deadline = None if done else self.buffer.next_deadline()
            wait = 1.0 if deadline is None else min(1.0, max(0.0, deadline - time.time()))
            with anyio.move_on_after(wait):
                self._hold(*await self.outbox.receive())
                while True:
                    try:
                        self._hold(*self.outbox.receive_nowait())
                    except anyio.WouldBlock:
                        break

    def _hold(self, verdict: Verdict, delivery: Delivery) -> None:
        """Buffer a verdict, unless the ledger says it (or its group) was consumed: it may
        have waited in the inbox while its first copy was trained. Either way its delivery
        is acked with the next checkpoint, which also holds the ledger entry."""
        vid, group_id = verdict.verdict_id, verdict.attempt.group_id
        if not self.ledger.seen(vid, group_id):
            self.buffer.add(verdict, delivery, time.time())
            self.bus.stats.gauges[gauges.LEARNER_HELD] = float(self.buffer.held())
            return
        self.unsaved.append(delivery)
        if self.ledger.consumed(vid):
            self.duplicates += 1
            log.info("learner.duplicate_skipped", verdict_id=vid)
        else:  # its group timed out and was trained without it: never trained
            self.ledger.add([vid], [])
            self.consumed_late += 1
            log.warning("learner.late_member_dropped", verdict_id=vid, group_id=group_id)

    async def train_on(self, groups: list[Group]) -> None:
        """One learner step: assemble, update, publish, checkpoint on schedule."""
        began = time.monotonic()
        t = self.config.training
        batch = assemble(groups, self.version, t.staleness, self.lc.scale_rewards,
                         self.config.model.max_context,
                         keep_no_signal=self.lc.kl_coef > 0 or t.zero_signal == "keep",
                         credit=self.lc.credit, step_weight=self.lc.step_weight)
        metrics = (await self.ranks.call("train", batch.samples, batch.batch_tokens)
                   if batch.samples else {})
        trained_at = time.time()
        self.unpublished += bool(batch.samples)
        self.step += 1
        self.samples += len(batch.samples)
        again = self.ledger.add(batch.consumed, [g.group_id for g in groups])
        if again:  # never expected: _hold keeps consumed verdicts out of the buffer
            log.error("learner.consumed_twice", step=self.step, verdict_ids=again)
        self.consumed_by_steps += len(batch.consumed)
        self.unsaved += [h for g in groups for h in g.handles()]
        # A batch with nothing to train moves the version too (the same weights, renumbered):
        # the sampler admits (version + staleness + 1) * batch_size samples in all, so
        # without it every such batch would use up budget for good and admission would stop.
        held = 0.0
        if t.mode == "sync" or not batch.samples or self.unpublished >= self.lc.publish_every:
            held = await self.hold_for_eval()
            await self._publish()
        if self.step % self.lc.checkpoint_every == 0:
            await self.checkpoint()
        self.busy_s += time.monotonic() - began - held
        await self._report(batch, metrics, len(groups), trained_at,
                           time.monotonic() - began)

    async def hold_for_eval(self) -> float:
        """Before moving past an evaluated version, wait until the evaluator reported its
        round (`evaluator.hold_learner`, and an evaluator in the stack), so the round's attempts all
        come from it; at most `evaluator.hold_s`, and not past a stop (`learner.held_for_eval`).
        Returns the seconds held, which count as neither idle nor busy."""
        ev = self.config.evaluator
        if (not ev.hold_learner or self.version % ev.every_versions
                or not self.config.actors.count.get("evaluator")):
            return 0.0
        began = time.monotonic()
        reported = False
        log.info("learner.holding_for_eval", policy_version=self.version, most_s=ev.hold_s)
        self.bus.stats.gauges[gauges.LEARNER_WAITING_FOR_ROUND] = float(self.version)
        with anyio.move_on_after(ev.hold_s):
            reported = await round_reported(self.bus, self.version)
        held = time.monotonic() - began
        self.held_s += held
        self.bus.stats.gauges[gauges.LEARNER_WAITING_FOR_ROUND] = -1.0
        log.info("learner.held_for_eval", policy_version=self.version, seconds=round(held, 3),
                 reported=reported)
        return held

    async def _publish(self, now: bool = False) -> None:
        """Next version: the trained weights (copied, so training may go on while they upload),
        or, if nothing was trained since, the same weights renumbered (admission counts batches)."""
        self.version += 1
        if self.spare is not None:  # new weights: the generators get work again
            self.spare.lower()
        parts = await self.ranks.call("weights", True) if self.unpublished else None
        if parts is not None:
            self.object_name = object_name(self.version)
        if now:
            await self.publisher.publish(self.version, parts, step=self.step, samples=self.samples)
        else:
            await self.publisher.submit(self.version, parts, step=self.step, samples=self.samples)
        self.unpublished = 0
        self.bus.stats.policy_version = self.version

    async def checkpoint(self) -> None:
        """Save model, optimizer and bookkeeping; then ack every verdict the save covers."""
        began = time.monotonic()
        state = LearnerState(version=self.version, step=self.step, samples=self.samples,
                             object_name=self.object_name,
                             consumed_by_steps=self.consumed_by_steps,
                             consumed_late=self.consumed_late, **self.ledger.to_state())
        await self.save(f"step{self.step:08d}", state.to_client())
        self.ledger.mark_saved()
        acked, self.unsaved = self.unsaved, []
        for delivery in acked:
            await delivery.ack()
        log.info("learner.checkpoint_saved", step=self.step, policy_version=self.version,
                 acked=len(acked), seconds=round(time.monotonic() - began, 3))

    async def save(self, tag: str, client_state: dict) -> None:
        """Write checkpoint `tag`, waiting out a full disk (`policy.disk.save_with_room`)."""
        self.checkpoint_bytes = await disk.save_with_room(
            self.ranks, tag, client_state, self.checkpoint_bytes, self.bus.stats.gauges, self.step)

    async def finish(self) -> None:
        """On stop: finish uploads, save what is trained but unsaved, give back the rest."""
        await self.publisher.close()
        if self.unsaved:
            await self.checkpoint()
        for group in list(self.buffer.groups.values()):
            for delivery in group.handles():
                await delivery.nak()
        self.buffer.groups.clear()

    async def _report(self, batch: Assembled, metrics: dict, groups: int, trained_at: float,
                      seconds: float) -> None:
        """Log the step for people (with every verdict id) and write its typed record."""
        record = StepRecord(
            step=self.step, policy_version=self.version, trained_at=trained_at, groups=groups,
            samples_total=self.samples, duplicates=self.duplicates, late=self.consumed_late,
            step_s=round(seconds, 3),
            idle_frac=round(self.idle_s / max(self.idle_s + self.busy_s, 1e-9), 4),
            held_for_eval_s=round(self.held_s, 3), **batch.figures(),
            **{k: round(v, 6) for k, v in metrics.items() if k in StepRecord.__struct_fields__})
        fields = {**msgspec.structs.asdict(record), **{k: round(v, 6) for k, v in metrics.items()},
                  "trained": [s.verdict_id for s in batch.samples], "left_out": batch.left_out}
        log.info("learner.step_completed", **fields)
        self.bus.stats.processed = self.samples
        self.bus.stats.gauges.update({k: float(v) for k, v in fields.items()
                                      if isinstance(v, (int, float)) and k != "trained_at"})
        self.bus.stats.gauges[gauges.LEARNER_STEP_TIME_S] = round(seconds, 3)
        await self.bus.kv_put(subjects.BUCKET_RUN, subjects.step_key(self.step), record)


async def run(bus: Bus, config: RunConfig, *,
              task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Train on verdicts until `bus.stopping` is set; then save, give back, and leave."""
    ranks = RankGroup(config.trainer, checkpoint_dir(config, bus), bus)
    try:
        resumed = LearnerState.from_client(await ranks.start())
        learner = Learner(bus, config, ranks, resumed)
        await learner.resume()
        async with anyio.create_task_group() as tg:
            peers = anyio.CancelScope()

            async def watch_peers() -> None:
                with peers:  # a replaced rank ends the run here: PeerLost
                    await ranks.watch_peers()

            tg.start_soon(watch_peers)
            rounds = anyio.CancelScope()

            async def follow_rounds() -> None:
                with rounds:  # until the learner has finished
                    await learner.publisher.follow_rounds()

            tg.start_soon(follow_rounds)
            spare = anyio.CancelScope()

            async def lend_cores() -> None:
                with spare:  # until the learner has finished
                    if learner.spare is not None:
                        await learner.spare.watch(bus)

            tg.start_soon(lend_cores)
            await tg.start(learner.publisher.run)
            await tg.start(partial(consume, bus, subjects.CONSUMER_LEARNER, Verdict,
                                   learner.on_verdict, max_in_flight=learner.held_limit,
                                   drain_s=config.supervisor.drain_s))
            task_status.started()
            await learner.loop()
            with anyio.CancelScope(shield=True):
                await learner.finish()
                await export_final(config, bus, ranks.dir)
            peers.cancel()
            rounds.cancel()
            spare.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await ranks.close()
