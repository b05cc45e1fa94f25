"""The monitor actor: run health for `whet status` and Prometheus, alerts, and the trial record.

Consumes `Verdict`s from its own durables on `whet.v1.verdicts.train` and `.eval`
(`subjects.CONSUMER_MONITOR_TRAIN` / `_EVAL`, so it never takes work from the learner), the
policy pointer (KV whet-policy `current`, for version lag), heartbeats (KV whet-actors),
stream and consumer state, and the evaluator's `EvalRound`s (KV whet-run). Publishes a
`Trial` per verdict, a `MetricsSnapshot` every `monitor.snapshot_s` in KV whet-run
`monitor.metrics`, `monitor.alert_raised` / `_cleared` events (`monitoring.alerts`), and
`GET /metrics` on `monitor.prometheus_port`. It runs as a single instance (a second one
would split the verdicts); its windows start empty after a restart.
It does NOT judge, train or change anything it watches.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from functools import partial

import anyio
import anyio.abc
import structlog
from anyio.abc import TaskStatus

from bus import subjects
from bus.consumer import Delivery, consume
from bus.messages import EvalRound, Heartbeat, MetricsSnapshot, Verdict, WeightVersion
from bus.nats_bus import Bus
from monitoring import metrics, prometheus, trials
from monitoring.alerts import AlertBook, HeldoutSeries, check_alerts, linked_trials
from monitoring.config import MonitorConfig
from monitoring.snapshot import Window, build_snapshot
from runtime.config import RunConfig

log = structlog.get_logger("monitor")


class Monitor:
    """The monitor's windows of verdict points, outcome counts, held-out series and alerts."""

    def __init__(self, bus: Bus, cfg: MonitorConfig) -> None:
        self.bus, self.cfg = bus, cfg
        self.points: deque[metrics.VerdictPoint] = deque(maxlen=cfg.max_points)
        self.outcomes: Counter[str] = Counter()
        self.policy_version = -1
        self.heldout = HeldoutSeries()
        self.book = AlertBook(cfg.cooldown_s)
        self.latest: MetricsSnapshot | None = None

    async def on_verdict(self, verdict: Verdict, delivery: Delivery) -> None:
        """Record the verdict's `Trial` on `whet.v1.trials.<run>.<trial>` (msg id from the
        verdict id: a redelivered verdict is recorded once) and add it to the windows."""
        now = time.time()
        run_id = self.bus.identity.run_id
        trial = trials.trial_of(verdict, run_id=run_id, current_version=self.policy_version,
                                recorder=self.bus.identity.instance, now=now)
        await self.bus.publish(subjects.trial_subject(run_id, trial.trial_id), trial,
                               msg_id=f"trial.{run_id}.{trial.trial_id}")
        self.points.append(metrics.point_of(verdict, self.policy_version, now))
        self.outcomes[f"{verdict.attempt.purpose}.{verdict.outcome}"] += 1
        log.info("monitor.trial_recorded", trial_id=trial.trial_id, outcome=verdict.outcome,
                 reward=verdict.reward, cause=verdict.cause)

    async def follow_policy(self) -> None:
        """Follow the policy pointer in KV, for version lag."""
        async for version in self.bus.kv_watch(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                                               WeightVersion):
            self.policy_version = self.bus.stats.policy_version = version.version

    async def follow_evaluator(self) -> None:
        """Follow the evaluator's rounds in KV whet-run: `overall.rate`, `version` and
        `reported_at` of each complete round feed the reward-versus-held-out alert."""
        async for result in self.bus.kv_watch(subjects.BUCKET_RUN, subjects.KEY_EVAL_ROUNDS,
                                              EvalRound):
            self.take_evaluation(result)

    def take_evaluation(self, result: EvalRound) -> None:
        """A complete round joins the held-out series (a renewed watch repeats it: ignored)."""
        if result.complete:
            self.heldout.add(result.reported_at, result.version, result.overall.rate)

    async def snapshot(self) -> MetricsSnapshot:
        """Compute a snapshot, raise or clear alerts, and publish it to KV. A raised alert carries
        `trials`, the ids of the verdicts that drove it (for `whet trace`); among the alerts, one
        task's or one group's infra-drop rate out of `drop_band`."""
        now = time.time()
        # Points and counts are read together, before any await lets more verdicts in.
        window = Window(*metrics.split_windows(list(self.points), now, self.cfg.window_s))
        outcomes = dict(self.outcomes)
        beats = list((await self.bus.kv_items(subjects.BUCKET_ACTORS, Heartbeat)).values())
        states = await self.bus.stream_states(subjects.WORK_STREAMS)
        rates = metrics.rates(window.current)
        linked = linked_trials(window.current, self.cfg.alert_trials)
        for change in check_alerts(self.book, self.cfg, now, rates=rates,
                                   verdicts=len(window.current),
                                   reward_delta=window.reward_delta,
                                   rewards_counted=window.rewards_counted,
                                   heldout_delta=self.heldout.delta(now, self.cfg.window_s),
                                   trials=linked,
                                   drops=metrics.drop_rates(window.current,
                                                            self.cfg.drop_min_samples)):
            emit = log.warning if change.change == "raised" else log.info
            extra = {"trials": list(change.trials)} if change.trials else {}
            emit(f"monitor.alert_{change.change}", alert=change.name, value=change.value,
                 window_s=self.cfg.window_s, **change.detail, **extra)
        snap = build_snapshot(window, self.cfg, now, monitor=self.bus.identity.instance,
                              outcomes_total=outcomes, beats=beats, states=states,
                              heldout=self.heldout, alerts=sorted(self.book.active),
                              alert_trials=linked)
        await self.bus.kv_put(subjects.BUCKET_RUN, subjects.KEY_METRICS, snap)
        self.latest = snap
        return snap

    async def snapshot_every(self, interval_s: float) -> None:
        """Take a snapshot every `interval_s`; a failed one is logged and the next tried."""
        while True:
            try:
                await self.snapshot()
            except Exception as exc:  # noqa: BLE001 - the next snapshot may succeed
                log.warning("monitor.snapshot_failed", error=repr(exc))
            await anyio.sleep(interval_s)


async def start_prometheus(tg: anyio.abc.TaskGroup, monitor: Monitor, cfg: MonitorConfig) -> None:
    """Serve `GET /metrics` from the latest snapshot in `tg`; a busy port is logged
    (`monitor.metrics_unavailable`) and the monitor carries on without it."""
    try:
        listener = await prometheus.open_listener(cfg.prometheus_host, cfg.prometheus_port)
    except OSError as exc:
        # A busy port must not stop the trial record: say so and carry on without it.
        log.error("monitor.metrics_unavailable", host=cfg.prometheus_host,
                  port=cfg.prometheus_port, error=str(exc))
        return
    log.info("monitor.metrics_served", host=cfg.prometheus_host,
             port=prometheus.bound_port(listener))
    tg.start_soon(prometheus.serve_metrics, listener, prometheus.registry_for(lambda: monitor.latest))


async def run(bus: Bus, config: RunConfig, *,
              task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """The monitor actor (one instance per run): record, watch and alert until the bus stops."""
    cfg = config.monitor
    monitor = Monitor(bus, cfg)
    async with anyio.create_task_group() as tg:
        tg.start_soon(monitor.follow_policy)
        tg.start_soon(monitor.follow_evaluator)
        tg.start_soon(monitor.snapshot_every, cfg.snapshot_s)
        if cfg.prometheus_port:
            await start_prometheus(tg, monitor, cfg)
        async with anyio.create_task_group() as consumers:
            for spec in (subjects.CONSUMER_MONITOR_TRAIN, subjects.CONSUMER_MONITOR_EVAL):
                await consumers.start(partial(consume, bus, spec, Verdict, monitor.on_verdict,
                                              max_in_flight=64,
                                              drain_s=config.supervisor.drain_s))
            task_status.started()
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await monitor.snapshot()
        tg.cancel_scope.cancel()
