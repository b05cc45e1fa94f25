"""The evaluator: held-out pass rates per domain, independent of the training reward.

Consumes the policy version (KV whet-policy `current`), the configured environments'
held-out tasks (gated at intake), eval verdicts (durable on `whet.v1.verdicts.eval`) and
train verdicts (durable `evaluator-train`, for the mean training reward by version). For
every `every_versions`-th version it publishes a round: each chosen held-out task once, as
`TaskAssignment(purpose="eval", group_size=samples_per_task)` on `whet.v1.rounds`, ids
derived from the round, so a restart re-publishes nothing new. Produces per version an
`EvalRound` in KV whet-run, an `evaluator.evaluated` event, `heldout.<domain>` gauges and
its KV state (`Evaluator.report`); progress, the monitor and `whet status` read them.
It does NOT score attempts (the judge does) and never publishes training work.
"""

from __future__ import annotations

import time
from functools import partial

import anyio
import structlog
from anyio.abc import TaskStatus

from bus import gauges, subjects
from bus.consumer import Delivery, consume
from bus.messages import EvalRound, EvaluatorState, Task, TaskAssignment, Verdict, WeightVersion
from bus.nats_bus import Bus
from envs.evaluation import (Round, point_of, reward_without_heldout_gain, round_assignment_id,
                             round_of, rung_fields)
from envs.intake import KvGateCache, gated_heldout
from envs.strata import rung_of
from runtime.config import RunConfig

log = structlog.get_logger("actors.evaluator")
HISTORY = 100


class Evaluator:
    """Held-out rounds: their tasks, the rounds open, and the state kept in KV whet-run."""

    def __init__(self, bus: Bus, config: RunConfig) -> None:
        self.bus, self.config = bus, config
        self.state = EvaluatorState()
        self.heldout: list[Task] = []
        self.ready = anyio.Event()
        self.rounds: dict[int, Round] = {}
        self.reported: set[int] = set()
        "Rounds already reported: a verdict arriving after its round timed out is ignored."
        self.rewards: dict[int, dict[str, float]] = {}
        "Training reward by policy version, by verdict id (a redelivery counts once)."
        self.trained = {d for d, w in config.envs.mix.items() if w > 0}
        self.k = config.evaluator.samples_per_task
        self.prefix = subjects.token(bus.identity.run_id or "run")

    async def load(self) -> None:
        """Resume the state (last round, last reported, baseline) from KV whet-run."""
        state = await self.bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE,
                                      EvaluatorState)
        self.state = state or EvaluatorState()
        self.bus.stats.gauges.update({gauges.ROUND_VERSION: float(self.state.last_round),
                                      gauges.ROUND_REPORTED: float(self.state.last_reported)})

    async def save(self) -> None:
        """Write the state to KV whet-run."""
        await self.bus.kv_put(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE, self.state)

    async def intake(self) -> None:
        """Gate a fixed held-out subset per domain (a few spares cover rejections)."""
        split = self.config.evaluator.split
        gauge = self.bus.stats.gauges

        def progress(done: int, total: int) -> None:
            gauge.update({gauges.GATE_DONE: float(done), gauges.GATE_TOTAL: float(total)})

        chosen = await gated_heldout(
            self.config.envs, seed=self.config.run.seed,
            per_domain=self.config.evaluator.tasks_per_domain, split=split, progress=progress,
            domain_tasks=self.config.evaluator.domain_tasks,
            on_cpu=lambda seconds: gauge.update({gauges.SANDBOX_CPU_S: round(seconds, 3)}),
            cache=KvGateCache(self.bus, self.config.envs.gates.keep_reports))
        self.heldout = [t for domain in sorted(chosen) for t in chosen[domain]]
        log.info("evaluator.heldout_ready", tasks=len(self.heldout), split=split,
                 domains={d: len(ts) for d, ts in chosen.items()},
                 transfer=sorted(set(chosen) - self.trained))
        self.ready.set()

    async def start_round(self, version: int) -> None:
        """Publish the round of `version`: each held-out task once, `samples_per_task` attempts
        each; with no held-out tasks, mark it reported at once, so a holding learner goes on."""
        if not self.heldout:  # nothing to evaluate: say so, so a holding learner goes on
            self.state.last_round = self.state.last_reported = version
            await self.save()
            log.warning("evaluator.round_skipped", version=version, reason="no held-out tasks")
            return
        items = []
        for i, task in enumerate(self.heldout):
            aid = round_assignment_id(self.prefix, version, i)
            items.append((aid, TaskAssignment(assignment_id=aid, task=task, group_size=self.k,
                                              admitted_version=version, purpose="eval",
                                              created_at=time.time())))
        self.rounds[version] = Round(version, len(items) * self.k, time.monotonic())
        self.show_round()
        new = await self.bus.publish_many(subjects.ROUNDS, items)
        self.state.last_round = version
        await self.save()
        log.info("evaluator.round_started", version=version, assignments=len(items), new=new)

    async def watch_versions(self) -> None:
        """Start a round for every `every_versions`-th new policy version, and first for version 0
        (the initial weights: a generator samples them from a pinned copy, however far the
        learner has gone while the held-out tasks were gated); reopen a round a restart cut
        short."""
        await self.ready.wait()
        every = self.config.evaluator.every_versions
        if self.state.last_round < 0 and self.config.evaluator.initial_round:
            await self.start_round(0)
        cut = self.state.last_round
        if cut > self.state.last_reported and cut not in self.rounds:
            # A round cut short by a restart: what it had counted is read back, the rest is
            # redelivered, and it reports what it has after round_timeout_s at the latest.
            await self.reopen(cut)
        async for current in self.bus.kv_watch(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                                               WeightVersion):
            v = current.version
            if v > self.state.last_round and v % every == 0 and (
                    v or self.config.evaluator.initial_round):
                await self.start_round(v)

    async def on_eval(self, verdict: Verdict, delivery: Delivery) -> None:
        """Add an eval verdict to its round (a duplicate, or one for a reported round, is skipped);
        report the round once complete."""
        version = round_of(verdict.attempt.group_id)
        if version is None or verdict.attempt.purpose != "eval" or version in self.reported:
            return
        rnd = self.rounds.get(version)
        if rnd is None:  # a round from before a restart
            rnd = await self.reopen(version)
            if rnd is None:
                return
        if not count(rnd, verdict):
            log.info("evaluator.duplicate_skipped", attempt_id=verdict.attempt.attempt_id)
            return
        self.show_round()
        await self.report_if_complete(rnd)

    def show_round(self) -> None:
        """The round gauges (the live line, `whet status`): the oldest round still open, whose
        attempts the generators take first, not the newest one started (the version-0 round
        may still be open when the last starts); unchanged once none is open."""
        if self.rounds:
            rnd = self.rounds[min(self.rounds)]
            self.bus.stats.gauges.update({gauges.ROUND_VERSION: float(rnd.version),
                                          gauges.ROUND_SIZE: float(rnd.expected),
                                          gauges.ROUND_JUDGED: float(rnd.received)})

    async def reopen(self, version: int) -> Round | None:
        """The round of `version` again after a restart, with the verdicts it had counted read
        back from the verdict stream (they were acked, so they are not redelivered); None for a
        round reported before the restart (its `EvalRound` is in KV: it is not reported twice)."""
        await self.ready.wait()
        if version in self.rounds or version in self.reported:
            return self.rounds.get(version)
        if await self.bus.kv_items(subjects.BUCKET_RUN, EvalRound,
                                   prefix=subjects.eval_round_prefix(version)):
            self.reported.add(version)  # a kill may have come before its state was saved
            if version > self.state.last_reported:
                self.state.last_reported = version
                await self.save()
            return None
        if version in self.rounds:  # reopened by another verdict of it meanwhile
            return self.rounds[version]
        rnd = self.rounds[version] = Round(version, len(self.heldout) * self.k, time.monotonic())
        async for _, verdict, _ in self.bus.replay(subjects.STREAM_VERDICTS,
                                                   subjects.verdict_subject("eval"), Verdict,
                                                   follow=False):
            if verdict is not None and round_of(verdict.attempt.group_id) == version:
                count(rnd, verdict)
        log.info("evaluator.round_reopened", version=version, received=rnd.received,
                 expected=rnd.expected)
        self.show_round()
        await self.report_if_complete(rnd)
        return rnd

    async def report_if_complete(self, rnd: Round) -> None:
        if rnd.complete and self.rounds.get(rnd.version) is rnd:
            await self.report(self.rounds.pop(rnd.version))

    async def on_train(self, verdict: Verdict, delivery: Delivery) -> None:
        """Record a train verdict's reward by policy version (dropped ones say nothing)."""
        if verdict.reward is not None and verdict.outcome != "dropped":
            self.rewards.setdefault(verdict.attempt.policy_version, {})[verdict.verdict_id] = \
                verdict.reward

    async def expire_rounds(self) -> None:
        """Report with what it has each round open longer than `round_timeout_s`."""
        while True:
            await anyio.sleep(5)
            limit = self.config.evaluator.round_timeout_s
            for version, rnd in list(self.rounds.items()):
                if time.monotonic() - rnd.started_at > limit:
                    await self.report(self.rounds.pop(version))

    async def report(self, rnd: Round) -> None:
        """Write the round's `EvalRound` per policy version (`evaluator.round.<round>.<version>`):
        pass@1 overall, on trained and transfer domains (those the mix never trains) and per
        domain, each with its 95% interval and its paired comparison with the baseline (the first
        version evaluated, normally 0: tasks gained, lost, p-value; `envs.stats`), and every task's
        outcome. Then `last_reported` in the state, written after the results: with
        `evaluator.hold_learner` the learner publishes nothing past an evaluated version until then."""
        self.reported.add(rnd.version)
        rewards = {v: sum(r.values()) / len(r) for v, r in self.rewards.items() if r}
        for version in sorted(rnd.by_version):
            if self.state.baseline_version < 0:  # the first version evaluated: normally 0
                self.state.baseline_version = version
                self.state.baseline = rnd.outcomes(version)
            result = rnd.result(version, trained=self.trained, baseline=self.state.baseline,
                                baseline_version=self.state.baseline_version,
                                samples_per_task=self.k, train_reward=rewards.get(version),
                                now=time.time(), split=self.config.evaluator.split)
            key = subjects.eval_round_key(rnd.version, version)
            await self.bus.kv_put(subjects.BUCKET_RUN, key, result)
            self.state.latest_key = key
            self.announce(result)
        self.state.last_reported = max(self.state.last_reported, rnd.version)
        self.bus.stats.gauges[gauges.ROUND_REPORTED] = float(self.state.last_reported)
        self.show_round()
        self.bus.stats.processed += 1
        await self.save()

    def announce(self, result: EvalRound) -> None:
        """The `evaluator.evaluated` event for people, the `heldout.<domain>` gauges, and the
        divergence check (`evaluator.divergence_detected` when the training reward rises while the
        held-out pass rate does not)."""
        point = point_of(result)
        self.state.history = (self.state.history + [point])[-HISTORY:]
        o = result.overall
        log.info("evaluator.evaluated", version=point.version, policy_version=point.version,
                 round=result.round, pass_rates=point.pass_rates, attempts=point.attempts,
                 overall=point.overall, low=round(o.low, 4), high=round(o.high, 4),
                 baseline_version=result.baseline_version, paired=o.paired, gained=o.gained,
                 lost=o.lost, p_value=float(f"{o.p_value:.3g}"), rewards=point.rewards,
                 reward=point.reward,
                 trained={d: r for d, r in point.pass_rates.items() if d in self.trained},
                 transfer={d: r for d, r in point.pass_rates.items() if d not in self.trained},
                 train_reward=point.train_reward, complete=point.complete,
                 dropped=result.dropped, samples_per_task=result.samples_per_task,
                 rungs=rung_fields(result))
        self.bus.stats.gauges.update({f"heldout.{d}": r for d, r in point.pass_rates.items()})
        self.bus.stats.policy_version = max(self.bus.stats.policy_version, point.version)
        cfg = self.config.evaluator
        why = reward_without_heldout_gain(self.state.history, window=cfg.window,
                                          reward_rise=cfg.reward_rise,
                                          tolerance=cfg.heldout_tolerance)
        if why:
            log.warning("evaluator.divergence_detected", policy_version=point.version, reason=why)


def count(rnd: Round, verdict: Verdict) -> bool:
    """Count an eval verdict in its round; False for one counted before."""
    attempt = verdict.attempt
    return rnd.add(attempt.attempt_id, attempt.policy_version, attempt.task.task_id,
                   attempt.task.domain, verdict.outcome, verdict.reward, rung=rung_of(attempt.task))


async def run(bus: Bus, config: RunConfig, *,
              task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """The evaluator actor (one instance per run)."""
    ev = Evaluator(bus, config)
    await ev.load()
    drain = config.supervisor.drain_s
    async with anyio.create_task_group() as background:
        background.start_soon(ev.intake)
        background.start_soon(ev.watch_versions)
        background.start_soon(ev.expire_rounds)
        async with anyio.create_task_group() as consumers:  # they return once drained
            await consumers.start(partial(consume, bus, subjects.CONSUMER_EVALUATOR, Verdict,
                                          ev.on_eval, max_in_flight=64, drain_s=drain))
            await consumers.start(partial(consume, bus, subjects.CONSUMER_EVALUATOR_TRAIN,
                                          Verdict, ev.on_train, max_in_flight=256,
                                          drain_s=drain))
            task_status.started()
        background.cancel_scope.cancel()
