"""The monitor actor in a real stack: metrics computed from the verdicts a test publishes, in
`whet status`, on the Prometheus endpoint and as alert events; every verdict recorded as a
trial that `whet trace` and `whet export` read back."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

import msgspec
import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bus import subjects
from bus.messages import (EvalRound, EvaluatorState, Event, ExecutionResult, HeldoutScore,
                          Heartbeat, MetricsSnapshot, Verdict, WeightVersion)
from tests.conftest import ROOT
from tests.test_codec import samples
from tests.test_runtime import wait_for

pytestmark = pytest.mark.stack

BASE: Verdict = next(s for s in samples() if isinstance(s, Verdict))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def monitor_config(port: int, window_s: float = 60.0) -> str:
    return f"""
[actors.count]
monitor = 1
[supervisor]
heartbeat_s = 0.5
drain_s = 3
[monitor]
window_s = {window_s}
snapshot_s = 0.3
prometheus_port = {port}
min_samples = 5
cooldown_s = 600
reward_rise = 0.2
heldout_flat = 0.01
[monitor.bands]
timeout_rate = {{ high = 0.3 }}
"""


def verdict(i: int, outcome: str, *, cause: str = "", reward: float | None = 0.0,
            purpose: str = "train", domain: str = "python", difficulty: float = 0.0,
            version: int = 5, at: float | None = None) -> Verdict:
    task = msgspec.structs.replace(BASE.attempt.task, domain=domain, difficulty=difficulty,
                                   prompt=f"write f number {i}")
    turn = msgspec.structs.replace(BASE.attempt.turns[0], completion=f"def f(): return {i}",
                                   executor="executor-7", policy_version=version,
                                   execution=ExecutionResult(status="ok", exit_code=0,
                                                             stdout=f"ran {i}", backend="local"))
    attempt = msgspec.structs.replace(BASE.attempt, attempt_id=f"g{i}.0", group_id=f"g{i}",
                                      task=task, turns=[turn], policy_version=version,
                                      purpose=purpose)
    return msgspec.structs.replace(BASE, verdict_id=attempt.attempt_id, attempt=attempt,
                                   outcome=outcome, cause=cause, reward=reward, judge="judge-3",
                                   judged_at=time.time() if at is None else at)


async def publish_verdicts(bus, verdicts: list[Verdict]) -> None:
    for v in verdicts:
        await bus.publish(subjects.verdict_subject(v.attempt.purpose), v, msg_id=v.verdict_id)


async def snapshot_with(bus, verdicts: int) -> MetricsSnapshot:
    async def check():
        snap = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_METRICS, MetricsSnapshot)
        return snap if snap is not None and sum(snap.outcomes_total.values()) >= verdicts else None

    return await wait_for(check, 30, f"a snapshot counting {verdicts} verdicts")


async def monitor_at_version(bus, version: int) -> bool:
    """The monitor's heartbeat says it follows policy `version`."""
    beats = await bus.kv_items(subjects.BUCKET_ACTORS, Heartbeat, prefix="monitor.")
    return any(b.policy_version == version for b in beats.values())


async def snapshots_after(bus, at: float, n: int) -> None:
    """Wait until `n` more snapshots than the one taken at `at` were published."""
    seen: set[float] = set()

    async def enough() -> bool:
        snap = await bus.kv_get(subjects.BUCKET_RUN, subjects.KEY_METRICS, MetricsSnapshot)
        if snap is not None and snap.at > at:
            seen.add(snap.at)
        return len(seen) >= n

    await wait_for(enough, 30, f"{n} more snapshots")


async def trial_event(bus, trial_id: str) -> bool:
    """The monitor's `monitor.trial_recorded` event for `trial_id` is in the events stream."""
    async for _, ev, _ in bus.replay(subjects.STREAM_EVENTS, subjects.event_filter("monitor"),
                                     Event, follow=False):
        if ev is not None and ev.event == "monitor.trial_recorded" \
                and ev.fields.get("trial_id") == trial_id:
            return True
    return False


async def beat(bus, kind: str, i: int, stats: dict[str, float]) -> None:
    now = time.time()
    await bus.kv_put(subjects.BUCKET_ACTORS, subjects.actor_key(kind, f"{kind}-{i}"),
                     Heartbeat(kind=kind, instance=f"{kind}-{i}", pid=1, host="h", state="ready",
                               started_at=now, beat_at=now, interval_s=60.0, stats=stats))


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_metrics_from_verdicts_reach_status_prometheus_and_alerts(bus, make_stack):
    """Rates, rewards, pass rates, lag and throughput computed from published verdicts and
    heartbeats show in `whet status` and on /metrics; a timeout spike raises one alert event."""
    port = free_port()
    stack = make_stack(monitor_config(port))
    stack.start()
    await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                     WeightVersion(version=6, object_name="v6"))
    await beat(bus, "generator", 1, {"tokens_per_s": 120.0})
    await beat(bus, "generator", 2, {"tokens_per_s": 30.0})
    await beat(bus, "learner", 1, {"step_time_s": 4.5})
    await beat(bus, "executor", 1, {"jobs_per_s": 12.0})
    await wait_for(lambda: monitor_at_version(bus, 6), 30, "the monitor on version 6")
    train = ([verdict(i, "pass", reward=1.0, version=6) for i in range(4)]
             + [verdict(4, "fail", cause="model.wrong_answer", version=5, difficulty=1.0)]
             + [verdict(i, "fail", cause="model.timeout", reward=-0.5, version=4)
                for i in range(5, 9)]
             + [verdict(9, "dropped", cause="infra.sandbox", reward=None, version=6)])
    evals = [verdict(10, "pass", reward=1.0, purpose="eval", domain="data"),
             verdict(11, "fail", cause="model.wrong_answer", purpose="eval", domain="data")]
    await publish_verdicts(bus, train + evals)
    snap = await snapshot_with(bus, 12)
    assert snap.outcomes_total == {"eval.fail": 1, "eval.pass": 1, "train.dropped": 1,
                                   "train.fail": 5, "train.pass": 4}
    assert snap.rates["timeout_rate"] == 4 / 12
    assert snap.rates["infra_failure_rate"] == 1 / 12
    assert snap.rates["execution_success_rate"] == 7 / 12
    assert snap.rates["train_pass_rate"] == 4 / 9 and snap.rates["eval_pass_rate"] == 0.5
    assert snap.reward.count == 9 and abs(snap.reward.mean - (4 - 2) / 9) < 1e-9
    assert snap.staleness == {"0": 5, "1": 3, "2": 4}
    cells = {(r.purpose, r.domain, r.difficulty): (r.passed, r.judged) for r in snap.pass_rates}
    assert cells == {("train", "python", "0"): (4, 8), ("train", "python", "1"): (0, 1),
                     ("eval", "data", "0"): (1, 2)}
    assert snap.throughput == {"generator_tokens_per_s": 150.0, "learner_step_time_s": 4.5,
                               "executor_jobs_per_s": 12.0}
    assert snap.alerts == ["timeout_rate"]
    assert any(q.stream == "WHET_VERDICTS" and q.consumer == "monitor-train" for q in snap.queues)

    metrics = scrape(port)
    assert metrics[("whet_timeout_rate", ())] == 4 / 12
    assert metrics[("whet_verdicts_total", (("outcome", "pass"), ("purpose", "train")))] == 4
    assert metrics[("whet_generator_tokens_per_s", ())] == 150.0
    assert metrics[("whet_staleness_verdicts", (("lag", "2"),))] == 4
    assert metrics[("whet_pass_rate", (("difficulty", "0"), ("domain", "data"),
                                       ("purpose", "eval")))] == 0.5
    assert metrics[("whet_alert_active", (("alert", "timeout_rate"),))] == 1
    assert metrics[("whet_queue_stored", (("consumer", "monitor-train"), ("stream", "WHET_VERDICTS")))] == 12

    status = stack.whet("status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["metrics"]["rates"]["timeout_rate"] == 4 / 12
    text = stack.whet("status")
    assert "run health" in text.stdout and "timeout rate" in text.stdout
    assert "33.3%" in text.stdout

    await publish_verdicts(bus, [verdict(i, "fail", cause="model.timeout", version=6)
                                 for i in range(20, 25)])
    await snapshots_after(bus, (await snapshot_with(bus, 17)).at, 3)  # the cooldown holds
    # A sentinel: the trial event of a verdict published now comes after every alert event
    # of those snapshots (one connection sends the monitor's events, in order).
    await publish_verdicts(bus, [verdict(30, "pass", reward=1.0, version=6)])
    await wait_for(lambda: trial_event(bus, "g30.0"), 30, "the sentinel's trial event")
    tail = stack.whet("tail", "--no-follow", "--json", "--event", "monitor.alert_*")
    alerts = [json.loads(line) for line in tail.stdout.splitlines()]
    assert [(a["event"], a["fields"]["alert"]) for a in alerts] == [
        ("monitor.alert_raised", "timeout_rate")]
    assert alerts[0]["fields"]["value"] == 4 / 12 and alerts[0]["fields"]["high"] == 0.3


async def test_reward_rising_while_heldout_flat_raises_an_alert(bus, make_stack):
    """Training reward up a window on the one before while the evaluator's held-out pass rate
    (its typed round results in KV; an incomplete round left out) did not move: one
    `reward_rising_heldout_flat` alert, naming the top-reward trials that `whet trace` opens."""
    stack = make_stack(monitor_config(0, window_s=20.0))
    stack.start()
    now = time.time()
    before = [verdict(i, "fail", cause="model.wrong_answer", reward=0.0, at=now - 30)
              for i in range(6)]
    after = [verdict(i, "pass", reward=1.0, at=now) for i in range(6, 12)]
    for at, version in ((now - 25, 2), (now - 1, 3)):
        result = EvalRound(round=version, version=version, overall=HeldoutScore(rate=0.40),
                           reported_at=at)
        await bus.kv_put(subjects.BUCKET_RUN, subjects.eval_round_key(version, version), result)
    await bus.kv_put(subjects.BUCKET_RUN, subjects.eval_round_key(4, 4),  # cut short: ignored
                     EvalRound(round=4, version=4, overall=HeldoutScore(rate=0.9),
                               complete=False, reported_at=now))
    await publish_verdicts(bus, before + after)
    snap = await snapshot_with(bus, 12)
    assert snap.reward_drift["mean_delta"] == 1.0 and snap.reward_drift["ks"] == 1.0
    assert snap.heldout_pass_rate == 0.40 and snap.heldout_version == 3

    async def raised():
        r = stack.whet("tail", "--no-follow", "--json", "--event", "monitor.alert_raised")
        return [json.loads(line) for line in r.stdout.splitlines()]

    (alert,) = await wait_for(raised, 10, "alert event")
    assert alert["fields"]["alert"] == "reward_rising_heldout_flat"
    assert alert["fields"]["heldout_delta"] == 0.0 and alert["fields"]["reward_delta"] == 1.0
    # It names the trials that drove it: the five top-reward verdicts of the window (all 1.0
    # at the same time, so in id order), each one `whet trace` opens.
    top = ["g10.0", "g11.0", "g6.0", "g7.0", "g8.0"]
    assert alert["fields"]["trials"] == top
    assert json.loads(stack.whet("status", "--json").stdout)["metrics"]["alert_trials"] == {
        "reward_rising_heldout_flat": top}
    trace = stack.whet("trace", "g10.0", "--json")
    assert trace.returncode == 0 and json.loads(trace.stdout)["trial_id"] == "g10.0", trace.stderr

    # `whet status` shows the round the evaluator's state names as its newest.
    await bus.kv_put(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE,
                     EvaluatorState(last_reported=3, latest_key=subjects.eval_round_key(3, 3)))
    status = stack.whet("status")
    assert "held-out: v3 (round 3); overall 0.400 [0.00, 1.00] on 0 tasks" in status.stdout
    as_json = json.loads(stack.whet("status", "--json").stdout)
    assert as_json["heldout"]["overall"]["rate"] == 0.4 and as_json["heldout"]["version"] == 3


async def test_every_verdict_is_a_trial_that_trace_and_export_show(bus, make_stack, tmp_path):
    """Each verdict becomes one trial record (a verdict seen twice is recorded once);
    `whet trace` shows it end to end and `whet export` writes JSON lines and Parquet."""
    stack = make_stack(monitor_config(0))
    stack.start()
    verdicts = [verdict(i, "pass" if i % 2 else "fail", cause="" if i % 2 else "model.timeout",
                        reward=1.0 if i % 2 else -0.5) for i in range(6)]
    await publish_verdicts(bus, verdicts)
    await snapshot_with(bus, 6)
    again = msgspec.structs.replace(verdicts[0], evidence="re-judged")
    await bus.publish(subjects.verdict_subject("train"), again, msg_id="g0.0-again")
    await snapshot_with(bus, 7)
    (trials,) = await bus.stream_states([subjects.STREAM_TRIALS])
    assert trials.messages == 6

    shown = stack.whet("trace", "g3.0")
    assert shown.returncode == 0, shown.stderr
    for expected in ("trial g3.0", "write f number 3", "def f(): return 3", "executor-7",
                     "ran 3", "judge-3", "generator-1", "monitor-1"):
        assert expected in shown.stdout, expected
    as_json = json.loads(stack.whet("trace", "g0.0", "--json").stdout)
    assert as_json["evidence"] == "" and as_json["turns"][0]["executor"] == "executor-7"
    assert as_json["outcome"] == "fail" and as_json["cause"] == "model.timeout"
    missing = stack.whet("trace", "nope")
    assert missing.returncode == 2 and "no trial 'nope'" in missing.stderr

    lines = stack.whet("export", "--format", "jsonl").stdout.splitlines()
    rows = sorted((json.loads(line) for line in lines), key=lambda r: r["trial_id"])
    assert [r["trial_id"] for r in rows] == [f"g{i}.0" for i in range(6)]
    assert rows[1]["outcome"] == "pass" and rows[1]["run_id"] == stack.run_dir.name
    out = tmp_path / "trials.parquet"
    exported = stack.whet("export", "--format", "parquet", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    table = pq.read_table(out).to_pylist()
    assert sorted(r["trial_id"] for r in table) == [f"g{i}.0" for i in range(6)]
    assert {r["turns"][0]["execution"]["stdout"] for r in table} == {f"ran {i}" for i in range(6)}
    other = subprocess.run([sys.executable, "-m", "runtime.cli", "export", "--run", "another-run",
                            "--url", stack.url], cwd=ROOT, env=stack.env, capture_output=True,
                           text=True, timeout=60)
    assert other.returncode == 0 and other.stdout == "", "another run's trials are not exported"


async def test_one_task_or_group_dropping_often_raises_its_own_drop_alert(bus, make_stack):
    """Infra drops concentrated on one task (5 of its 10 verdicts, all in one group) raise
    `drop_rate.task.<task>` and `drop_rate.group.<group>` naming the dropped trials, while
    the run's infra rate (9 of 50) stays inside its band and tasks dropping 1 in 10 raise
    nothing: a policy that learned to cause drops shows on the task it learned it on."""
    config = monitor_config(0).replace("[monitor.bands]", "drop_min_samples = 5\ndrop_band = { high = 0.2 }\n"
                                       "[monitor.bands]\ninfra_failure_rate = { high = 0.3 }")
    stack = make_stack(config)
    stack.start()

    def on(v: Verdict, task_id: str, group_id: str) -> Verdict:
        task = msgspec.structs.replace(v.attempt.task, task_id=task_id)
        attempt = msgspec.structs.replace(v.attempt, task=task, group_id=group_id)
        return msgspec.structs.replace(v, attempt=attempt)

    verdicts, n = [], 0
    for t in range(5):
        for i in range(10):
            dropped = (i < 5) if t == 0 else (i == 0)
            v = verdict(n, "dropped" if dropped else "fail", cause="infra.sandbox" if dropped else "model.wrong_answer",
                        reward=None if dropped else 0.0)
            verdicts.append(on(v, f"env/t{t}", f"t{t}.{'ab'[i // 5]}"))
            n += 1
    await publish_verdicts(bus, verdicts)
    snap = await snapshot_with(bus, 50)
    assert snap.rates["infra_failure_rate"] == 9 / 50
    assert snap.alerts == ["drop_rate.group.t0.a", "drop_rate.task.env/t0"]
    await publish_verdicts(bus, [verdict(99, "pass", reward=1.0)])  # the sentinel
    await wait_for(lambda: trial_event(bus, "g99.0"), 30, "the sentinel's trial event")
    tail = stack.whet("tail", "--no-follow", "--json", "--event", "monitor.alert_raised")
    raised = {a["fields"]["alert"]: a["fields"] for a in map(json.loads, tail.stdout.splitlines())}
    assert set(raised) == {"drop_rate.group.t0.a", "drop_rate.task.env/t0"}
    assert raised["drop_rate.task.env/t0"]["value"] == 0.5 and raised["drop_rate.group.t0.a"]["value"] == 1.0
    assert sorted(raised["drop_rate.task.env/t0"]["trials"]) == [f"g{i}.0" for i in range(5)]
