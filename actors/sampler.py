"""The sampler: decides what the policy practises next and admits it within the staleness bound.

Consumes the configured environments (generated or read, then gated at intake), train
verdicts (its own durable consumer on `whet.v1.verdicts.train`) and the policy version (KV
whet-policy `current`; version 0 until the learner publishes). Publishes `TaskAssignment`s
on `whet.v1.tasks`, with ids derived from a persisted sequence number, so a restarted
sampler re-publishes the same ids and JetStream stores each once. What to practise is
`envs.curriculum`'s choice (`Sampler.next_assignments`), how much `envs.admission`'s bound
(`Sampler.admissible`); counters persist in KV whet-run (`Sampler.settle`).
It does NOT sample from the model, run attempts, or touch held-out tasks: those are the
evaluator's, and the curriculum refuses them.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from functools import partial

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus

from bus import gauges, subjects
from bus.consumer import Delivery, consume
from bus.messages import SamplerState, Task, TaskAssignment, Verdict, WeightVersion
from bus.nats_bus import Bus
from envs.admission import AdmissionCounters, SignalRefunds, admissible_groups, refund_credit
from envs.curriculum import Curriculum
from envs.intake import FirstAccepted, KvGateCache, collect, gate_many
from envs.repair import repair_task
from runtime.config import RunConfig

log = structlog.get_logger("actors.sampler")
CHUNK = 256 * 1024
FLUSH_S = 0.2


class Sampler:

    """One sampler's state: pool, counters, version, and what is counted but not yet acked.

    With `sampler.repair_tasks`, a tool episode the model failed becomes a repair task in the
    same pool (`envs.repair`; never from a held-out task), counted in the `repair_tasks` gauge
    and logged as `sampler.repair_task_added`; repair tasks live in this process, so a restarted
    sampler starts without them. With `training.zero_signal = "refill"`, each finished group
    whose rewards are all equal gives its budget back (`sampler.group_refunded`), so one more
    is admitted in its place; the open groups are saved with the counters."""

    def __init__(self, bus: Bus, config: RunConfig) -> None:
        self.bus, self.config = bus, config
        self.curriculum = Curriculum(config.sampler, config.envs.mix)
        self.tasks: dict[str, Task] = {}
        self.counters = AdmissionCounters()
        self.refunds = SignalRefunds()
        "refill (`training.zero_signal`): open groups' rewards, to refund those without signal."
        self.version = 0
        self.learner_step = 0
        "Learner steps (batches consumed) behind the current version: the budget counts them."
        self.unacked: list[Delivery] = []
        self.counted_ids: list[str] = []
        self.skip_ids: set[str] = set()
        self.changed = anyio.Event()
        self.id_prefix = subjects.token(bus.identity.run_id or "run")
        self.repairs = 0
        "Repair tasks added to the pool by this process (`envs.repair`)."

    def wake(self) -> None:
        """Wake the admission loop: something it waits on changed."""
        self.changed.set()

    async def wait_change(self, timeout_s: float) -> None:
        """Wait until `wake` is called, or `timeout_s` passes."""
        self.changed = anyio.Event()
        with anyio.move_on_after(timeout_s):
            await self.changed.wait()

    # --- persistence -------------------------------------------------------------------

    async def load(self) -> None:
        """Resume the counters and counted ids from KV whet-run, and the policy version."""
        state = await self.bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, SamplerState)
        if state is not None:
            self.counters = AdmissionCounters(state.admitted, state.judged, state.produced,
                                              state.next_seq, state.refunded)
            self.refunds = SignalRefunds({g: dict(m) for g, m in state.open_groups.items()})
            self.skip_ids = set(state.counted)
        current = await self.bus.kv_get(subjects.BUCKET_POLICY, subjects.KEY_POLICY, WeightVersion)
        self.version = current.version if current else 0
        self.learner_step = current.step if current else 0
        log.info("sampler.resumed", admitted=self.counters.admitted, judged=self.counters.judged,
                 produced=self.counters.produced, refunded=self.counters.refunded,
                 next_seq=self.counters.next_seq,
                 version=self.version, learner_step=self.learner_step)

    async def save(self) -> int:
        """Save the counters and the verdict ids counted since the last flush; returns how
        many ids the saved state holds (built before the first await, so consistent)."""
        c = self.counters
        state = SamplerState(admitted=c.admitted, judged=c.judged, produced=c.produced,
                             next_seq=c.next_seq, counted=list(self.counted_ids),
                             refunded=c.refunded,
                             open_groups={g: dict(m) for g, m in self.refunds.open.items()})
        await self.bus.kv_put(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_STATE, state)
        return len(state.counted)

    async def settle(self) -> None:
        """Save, then ack the verdicts the save covers."""
        batch, self.unacked = self.unacked, []
        saved = await self.save()
        del self.counted_ids[:saved]
        for delivery in batch:
            await delivery.ack()
        self.bus.stats.gauges.update(self.gauges())

    async def save_rates(self) -> None:
        """Save the curriculum's pass rates to KV whet-run in chunks (every `snapshot_s`: a crash
        loses at most that much curriculum evidence, never budget)."""
        data = msgspec.msgpack.encode(self.curriculum.snapshot())
        chunks = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)] or [b""]
        for n, chunk in enumerate(chunks):
            await self.bus.kv_put_bytes(subjects.BUCKET_RUN, f"{subjects.KEY_SAMPLER_RATES}.{n}", chunk)
        await self.bus.kv_put_bytes(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_RATES,
                                    str(len(chunks)).encode())

    async def load_rates(self) -> None:
        """Restore the pass rates `save_rates` wrote; an incomplete set is ignored (logged)."""
        count = await self.bus.kv_get_bytes(subjects.BUCKET_RUN, subjects.KEY_SAMPLER_RATES)
        if not count:
            return
        parts = [await self.bus.kv_get_bytes(subjects.BUCKET_RUN,
                                             f"{subjects.KEY_SAMPLER_RATES}.{n}")
                 for n in range(int(count))]
        if any(p is None for p in parts):
            log.warning("sampler.rates_incomplete", chunks=int(count))
            return
        self.curriculum.restore(msgspec.msgpack.decode(b"".join(parts)))  # type: ignore[arg-type]

    # --- verdicts ----------------------------------------------------------------------

    async def on_verdict(self, verdict: Verdict, delivery: Delivery) -> None:
        """Count a train verdict once (ids counted before a restart are skipped), record its
        outcome in the curriculum, and hold its ack until the counters that count it are saved."""
        if verdict.verdict_id in self.skip_ids:
            return  # counted before a restart; its ack was lost
        if verdict.attempt.purpose != "train":
            return
        if verdict.outcome != "dropped":  # an infrastructure failure says nothing of the task
            self.curriculum.record(verdict.attempt.task.task_id, verdict.outcome == "pass",
                                   verdict.attempt.group_id)
        if self.config.sampler.repair_tasks:
            self.reuse_failure(verdict)
        self.counters.judged += 1
        self.counters.produced += 1 if verdict.trainable else 0
        if self.config.training.zero_signal == "refill":
            self.refund_without_signal(verdict)
        self.counted_ids.append(verdict.verdict_id)
        delivery.defer()
        self.unacked.append(delivery)
        self.wake()

    def refund_without_signal(self, verdict: Verdict) -> None:
        """refill: once the verdict's group is complete, give back the budget of a group
        whose rewards are all equal, so a replacement is admitted (`envs.admission`)."""
        usable = verdict.trainable and verdict.outcome != "dropped" and verdict.reward is not None
        attempt = verdict.attempt
        refunded = self.refunds.record(attempt.group_id, attempt.group_size, verdict.verdict_id,
                                       verdict.reward if usable else None)
        if refunded:
            self.counters.refunded += refunded
            log.info("sampler.group_refunded", group_id=attempt.group_id, attempts=refunded,
                     refunded=self.counters.refunded)

    def reuse_failure(self, verdict: Verdict) -> None:
        """Add the repair task a failed tool episode gives to the pool (`envs.repair`)."""
        if self.repairs >= self.config.sampler.max_repair_tasks:
            return
        task = repair_task(verdict)
        if task is None or task.task_id in self.tasks:
            return
        self.tasks[task.task_id] = task
        self.curriculum.add(task.task_id, task.domain, int(task.difficulty), task.split)
        self.repairs += 1
        self.bus.stats.gauges[gauges.SAMPLER_REPAIR_TASKS] = float(self.repairs)
        log.info("sampler.repair_task_added", task_id=task.task_id,
                 source=verdict.attempt.task.task_id, verdict_id=verdict.verdict_id,
                 cause=verdict.cause, repairs=self.repairs)

    async def flush(self) -> None:
        """Settle counted verdicts every FLUSH_S."""
        while True:
            await anyio.sleep(FLUSH_S)
            if self.unacked:
                await self.settle()

    # --- admission ---------------------------------------------------------------------

    def admissible(self) -> int:
        """Groups the bound admits now: in_flight + produced (less refill's refunds, as many
        as refill batches can take: `envs.admission.refund_credit`) <= (learner step +
        staleness + 1) * batch_size, and none once the learner step reaches
        `training.max_steps`. The learner step
        (`WeightVersion.step`, batches consumed) equals the version until a learner restart: a
        restarted learner rolls back to its checkpoint yet announces its weights under a newer
        number, so counting versions would let the learner's queue grow for good."""
        t = self.config.training
        if t.max_steps and self.learner_step >= t.max_steps:
            return 0  # the learner has made its last step: more samples would go untrained
        credit = refund_credit(self.counters.refunded, version=self.learner_step,
                               max_staleness=t.staleness, batch_size=t.batch_size,
                               most=t.batch_most)
        return admissible_groups(in_flight=self.counters.in_flight,
                                 produced=self.counters.produced - credit,
                                 version=self.learner_step, max_staleness=t.staleness,
                                 batch_size=t.batch_size, group_size=t.group_size)

    def next_assignments(self, n: int) -> list[tuple[str, TaskAssignment]]:
        """Up to `n` assignments, each chosen with an rng seeded by its sequence number."""
        out = []
        group = self.config.training.group_size
        for _ in range(n):
            seq = self.counters.next_seq
            task_id = self.curriculum.choose(random.Random(f"{self.config.run.draw_seed}/{seq}"))
            if task_id is None:
                break
            task = self.tasks[task_id]
            assert task.split == "train", task_id  # the curriculum never holds held-out tasks
            aid = f"{self.id_prefix}-s{seq:09d}"
            out.append((aid, TaskAssignment(assignment_id=aid, task=task, group_size=group,
                                            admitted_version=self.version, purpose="train",
                                            created_at=time.time())))
            self.counters.next_seq += 1
            self.counters.admitted += group
        return out

    async def admit(self) -> None:
        """Publish whatever the bound allows, until the bus stops."""
        while not self.bus.stopping.is_set():
            groups = self.admissible()
            if groups <= 0 or len(self.curriculum) < self.config.sampler.min_pool:
                await self.wait_change(1.0)
                continue
            items = self.next_assignments(min(groups, self.config.sampler.max_batch))
            if not items:
                await self.wait_change(1.0)
                continue
            new = await self.bus.publish_many(subjects.TASKS, items)
            # Logged before the save: a crash in between re-admits the same ids (stored
            # once), so the log names every admitted assignment at least once.
            log.info("tasks.admitted", assignments=len(items), new=new, version=self.version,
                     in_flight=self.counters.in_flight, produced=self.counters.produced,
                     assignment_ids=[aid for aid, _ in items])
            await self.save()
            self.bus.stats.processed += len(items)
            self.bus.stats.gauges.update(self.gauges())

    def gauges(self) -> dict[str, float]:
        """The heartbeat gauges: the curriculum's, and the admission counters."""
        c = self.counters
        return {**self.curriculum.gauges(), "admitted": float(c.admitted),
                "in_flight": float(c.in_flight), "produced": float(c.produced),
                "refunded": float(c.refunded)}

    async def watch_version(self) -> None:
        """Follow the policy pointer in KV; wake admission when the version or step moves."""
        async for current in self.bus.kv_watch(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                                               WeightVersion):
            if (current.version, current.step) != (self.version, self.learner_step):
                self.version, self.learner_step = current.version, current.step
                self.bus.stats.policy_version = current.version
                self.wake()

    async def intake(self) -> None:
        """Gate the training tasks and add each accepted one to the pool as it passes."""
        cfg = self.config.envs
        found, errors = collect(cfg, seed=self.config.run.seed, split="train")
        for error in errors:
            log.warning("tasks.bad_record", error=str(error))
        target = self.config.sampler.pool_per_domain
        tasks = [(t, g) for t, g in found if cfg.mix.get(t.domain, 0) > 0]
        per_domain = Counter(t.domain for t, _ in tasks)
        progress = self.bus.stats.gauges
        progress.update({gauges.GATE_DONE: 0.0, gauges.GATE_TOTAL: float(sum(
            min(n, target) if target else n for n in per_domain.values()))})

        # The pool is each domain's first accepted tasks in the listed order, so it does not
        # depend on which gate finished first.
        pool = FirstAccepted((t for t, _ in tasks), target)

        async def accepted(task: Task, report) -> None:
            progress[gauges.GATE_DONE] += 1
            for ready in pool.add(task, report.accepted):
                self.tasks[ready.task_id] = ready
                self.curriculum.add(ready.task_id, ready.domain, int(ready.difficulty), ready.split)
                self.wake()

        def spent(seconds: float) -> None:
            progress[gauges.SANDBOX_CPU_S] = round(seconds, 3)

        tally = await gate_many(pool.gating(tasks),
                                cfg.gates.sandbox, accepted,
                                concurrency=cfg.gates.concurrency, on_cpu=spent,
                                cache=KvGateCache(self.bus, cfg.gates.keep_reports))
        await self.load_rates()
        self.bus.stats.gauges.update({f"rejected.{k}": float(v) for k, v in tally.rejected.items()})
        domains = set(self.curriculum.rungs)
        log.info("intake.completed", accepted=tally.accepted, rejected=dict(tally.rejected),
                 bad_records=len(errors), pool=len(self.curriculum),
                 by_domain={d: n for d, n in pool.released.items() if n},
                 not_gated=sorted({t.domain for t, _ in found} - set(per_domain)))
        if set(self.curriculum.mix) - domains:
            log.warning("intake.mix_without_tasks", domains=sorted(set(self.curriculum.mix) - domains))

    async def snapshots(self) -> None:
        """Save the pass rates every `sampler.snapshot_s`."""
        while True:
            await anyio.sleep(self.config.sampler.snapshot_s)
            await self.save_rates()


async def run(bus: Bus, config: RunConfig, *,
              task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """The sampler actor (one instance per run)."""
    sampler = Sampler(bus, config)
    await sampler.load()
    async with anyio.create_task_group() as tg:
        tg.start_soon(sampler.watch_version)
        tg.start_soon(sampler.flush)
        tg.start_soon(sampler.intake)
        tg.start_soon(sampler.snapshots)
        await tg.start(partial(consume, bus, subjects.CONSUMER_SAMPLER, Verdict,
                               sampler.on_verdict, max_in_flight=256,
                               drain_s=config.supervisor.drain_s))
        task_status.started()
        await sampler.admit()
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            await sampler.settle()
            await sampler.save_rates()
        tg.cancel_scope.cancel()
