"""The main job's progress: CSV rows per step and evaluation, when a run stops, the live
line from the first second, and plots before the first step."""

from __future__ import annotations

import csv

import anyio
import pytest

from bus import subjects
from bus.messages import EvalRound, Heartbeat, HeldoutScore, StepRecord
from envs.config import EvaluatorConfig
from runtime.config import ActorsConfig, RunConfig, TrainingConfig
from runtime.stack import liveline
from runtime.stack.plots import draw
from runtime.stack.progress import Progress, watch
from runtime.stack.render_round import eval_row, round_brief, round_line, rung_text
from runtime.stack.rundir import RunDir
from tests.conftest import until


def progress(tmp_path, evaluators: int) -> Progress:
    cfg = RunConfig(training=TrainingConfig(max_steps=4),
                    actors=ActorsConfig(count={"learner": 1, "evaluator": evaluators}),
                    evaluator=EvaluatorConfig(every_versions=2))
    return Progress(cfg, RunDir(tmp_path), lambda: {})


def step(n: int, version: int | None = None, trained_at: float = 0.0, **figures) -> StepRecord:
    return StepRecord(step=n, policy_version=n if version is None else version,
                      trained_at=trained_at or 1000.0 + n, **figures)


@pytest.mark.unit
def test_without_an_evaluator_the_run_stops_at_max_steps(tmp_path):
    """Four step records make four train.csv rows, and the fourth stops the run."""
    p = progress(tmp_path, evaluators=0)
    for n in (1, 2, 3):
        p.on_step(step(n, mean_reward=0.1 * n))
        assert not p.done
    p.on_step(step(4, mean_reward=0.4, masked_frac=0.25))
    assert p.done
    with (tmp_path / "metrics" / "train.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows] == ["1", "2", "3", "4"] and rows[3]["mean_reward"] == "0.4"
    assert rows[3]["masked_frac"] == "0.25" and rows[2]["loss"] == ""


@pytest.mark.unit
def test_a_repeated_step_record_is_skipped_and_a_redone_step_is_kept(tmp_path):
    """A renewed watch gives a record again: no second row. A step redone after a learner
    restart (trained later) is a row of its own, and the step count follows it back."""
    p = progress(tmp_path, evaluators=0)
    assert p.on_step(step(1)) and p.on_step(step(2))
    assert not p.on_step(step(2))
    assert p.on_step(step(2, trained_at=2000.0))
    assert p.step == 2 and p.last is not None and p.last.trained_at == 2000.0


def result(version: int, rate: float, gained: int = 0, lost: int = 0,
           p_value: float = 1.0) -> EvalRound:
    score = HeldoutScore(rate=rate, low=rate / 2, high=min(1.0, rate * 2), tasks=4, attempts=4,
                         paired=4, gained=gained, lost=lost, p_value=p_value)
    return EvalRound(round=version, version=version, overall=score, trained=score,
                     baseline_version=0)


@pytest.mark.unit
def test_with_an_evaluator_the_run_waits_for_the_round_of_its_last_version(tmp_path):
    """Version 4 is due a round (every 2): max_steps alone does not stop the run; the
    round's typed result does, and lands in eval.csv with its round, interval and paired
    comparison; a result seen again (a renewed watch) is not written twice."""
    p = progress(tmp_path, evaluators=1)
    assert p.on_round(result(2, 0.25))
    p.on_step(step(4))
    assert not p.done
    assert p.on_round(result(4, 0.5, gained=2, p_value=0.5))
    assert not p.on_round(result(4, 0.5, gained=2, p_value=0.5))
    assert p.done
    p.on_step(step(5))  # not due a round: 4's is its last
    assert p.done
    assert "held-out 0.500 [0.25, 1.00] vs v0: +2/-0 of 4 (p=0.5)" in p.figures()
    with (tmp_path / "metrics" / "eval.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["round"], r["overall"], r["overall_low"], r["attempts"], r["gained"],
             r["p_value"], r["trained"]) for r in rows] == [
        ("2", "0.25", "0.125", "4", "0", "1.0", "0.25"), ("4", "0.5", "0.25", "4", "2", "0.5", "0.5")]


@pytest.mark.unit
def test_a_round_reads_as_rate_interval_and_change_since_the_baseline():
    """The status line names the version, the rate with its interval over tasks, and the
    paired change (+gained/-lost of paired, p) overall, on trained and on transfer domains."""
    trained = HeldoutScore(rate=0.6, low=0.3127, high=0.8318, tasks=10, attempts=20, paired=10,
                           gained=3, lost=0, p_value=0.25, delta=0.3)
    transfer = HeldoutScore(rate=0.2, low=0.0567, high=0.5098, tasks=10, attempts=20,
                            paired=10, gained=1, lost=1, p_value=1.0)
    overall = HeldoutScore(rate=0.4, low=0.2188, high=0.6134, tasks=20, attempts=40, paired=20,
                           gained=4, lost=1, p_value=0.375, delta=0.15)
    r = EvalRound(round=12, version=12, overall=overall, trained=trained, transfer=transfer,
                  baseline_version=0, samples_per_task=2, complete=False)
    assert round_line(r) == (
        "v12 (round 12, incomplete); overall 0.400 [0.22, 0.61] on 20 tasks x2; "
        "vs v0: +4/-1 of 20 (p=0.375); trained 0.600 [0.31, 0.83] vs v0: +3/-0 of 10 (p=0.25); "
        "transfer 0.200 [0.06, 0.51] vs v0: +1/-1 of 10 (p=1)")
    assert round_brief(r) == "held-out 0.600 [0.31, 0.83] vs v0: +3/-0 of 10 (p=0.25)"
    assert round_brief(None) == "held-out -"
    row = eval_row(r)
    assert (row["trained_gained"], row["trained_p_value"], row["transfer_high"]) == (3, 0.25, 0.5098)


@pytest.mark.unit
def test_a_rounds_rungs_read_as_one_text_in_eval_csv_and_status(tmp_path):
    """Each domain's rungs, in order, with rate, interval, tasks and paired change: the text
    `whet status` prints under the round and eval.csv's `rungs` column holds."""
    low = HeldoutScore(rate=0.52, low=0.3842, high=0.6528, tasks=50, paired=50, gained=3,
                       lost=1, p_value=0.625)
    high = HeldoutScore(rate=0.1, low=0.0279, high=0.3010, tasks=20, paired=20, lost=2,
                        p_value=0.5)
    r = EvalRound(round=4, version=4, overall=low, baseline_version=0,
                  rungs={"data": {1: high, 0: low}, "humaneval": {0: high}})
    text = ("data L0 0.520 [0.38, 0.65] n=50 +3/-1 (p=0.625), L1 0.100 [0.03, 0.30] n=20 "
            "+0/-2 (p=0.5); humaneval L0 0.100 [0.03, 0.30] n=20 +0/-2 (p=0.5)")
    assert rung_text(r) == text and eval_row(r)["rungs"] == text
    p = progress(tmp_path, evaluators=1)
    p.on_round(r)
    with (tmp_path / "metrics" / "eval.csv").open(newline="") as f:
        assert [row["rungs"] for row in csv.DictReader(f)] == [text]
    assert eval_row(EvalRound(round=0, version=0, overall=low))["rungs"] is None


def beat(kind: str, state: str = "ready", beat_at: float = 100.0, **stats: float) -> Heartbeat:
    return Heartbeat(kind=kind, instance=f"{kind}-1", pid=1, host="h", state=state,
                     started_at=90.0, beat_at=beat_at, interval_s=2.0, stats=stats)


@pytest.mark.unit
def test_the_live_line_says_what_the_stack_does_before_the_first_step():
    """Gating, the version-0 held-out round and the attempts gathered for step 1 are shown,
    from the heartbeats' gauges; stopped and silent processes count for nothing."""
    cfg = RunConfig(training=TrainingConfig(max_steps=24, batch_size=32),
                    actors=ActorsConfig(count={"sampler": 1, "evaluator": 1, "learner": 1,
                                               "judge": 1}))
    beats = [beat("sampler", gate_done=30, gate_total=400),
             beat("evaluator", gate_done=7, gate_total=50, round_version=0, round_judged=12,
                  round_size=109, round_reported=-1),
             beat("learner", held_attempts=12),
             beat("judge", state="stopped"), beat("judge", beat_at=50.0)]
    counts = liveline.counts(liveline.live(beats, now=101.0), cfg)
    line = liveline.describe(counts, cfg, elapsed_s=252)
    assert line == ("4m12s  starting: 3/4 actors ready (waiting for judge) | gating 37/450 tasks"
                    " | held-out round at version 0: 12/109 attempts | step 1/24: 12/32 attempts")


@pytest.mark.unit
def test_the_live_line_shows_a_held_learner_and_the_latest_figures(tmp_path):
    """A learner waiting for a round says so; after steps the line carries their figures."""
    cfg = RunConfig(training=TrainingConfig(max_steps=24),
                    actors=ActorsConfig(count={"learner": 1, "evaluator": 1}))
    beats = [beat("learner", step=12, waiting_for_round=12),
             beat("evaluator", round_version=12, round_judged=100, round_size=109,
                  round_reported=0)]
    p = progress(tmp_path, evaluators=1)
    p.on_step(step(12, mean_reward=0.125, pass_rate=0.25, staleness_mean=0.5))
    line = liveline.describe(liveline.counts(beats, cfg), cfg, 3700, p.figures())
    assert line == ("1h01m  held-out round at version 12: 100/109 attempts | step 12/24 done, "
                    "waiting for the held-out round at version 12 | version 12 reward 0.125 "
                    "pass 0.250 staleness 0.50")


@pytest.mark.unit
def test_plots_exist_from_the_first_progress_row(tmp_path):
    """Before any step, the progress counters are plotted against wall time."""
    p = progress(tmp_path, evaluators=1)
    p.on_counts(liveline.Counts(gated=10, gate_total=100, judged=5))
    written = draw(tmp_path)
    assert (tmp_path / "plots" / "progress.png") in written
    assert (tmp_path / "plots" / "progress.png").stat().st_size > 1000


@pytest.mark.stack
async def test_a_stack_shows_its_live_line_from_the_start(make_stack, tmp_path):
    """Off a terminal the live line is a plain line, there before any work is done."""
    stack = make_stack("[actors.count]\nprobe = 1\n[actors.target]\n"
                       'probe = "tests.support.probe_actor:run"\n')
    stack.start()
    await until(lambda: any(line.split("  ", 1)[-1].startswith(("starting: 0/1", "running"))
                            for line in (tmp_path / "stack.out").read_text().splitlines()),
                30, "the live line in stack.out")


@pytest.mark.bus
async def test_step_records_reach_train_csv_once_each_across_a_server_restart(bus, nats_server, tmp_path):
    """Progress reads the learner's typed step records from KV: those written before it
    watched, while it watched, and while the server was down and back; none is missed and
    none is written twice, though the watch gives them again after the restart."""
    p = progress(tmp_path, evaluators=0)

    def rows() -> list[str]:
        with (tmp_path / "metrics" / "train.csv").open(newline="") as f:
            return [r["step"] for r in csv.DictReader(f)]

    async def written(n: int) -> None:
        await until(lambda: len(rows()) >= n, 60, f"{n} rows in train.csv")

    await bus.kv_put(subjects.BUCKET_RUN, subjects.step_key(1), step(1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch, bus, subjects.KEY_LEARNER_STEPS, StepRecord, p.on_step)
        await written(1)
        await bus.kv_put(subjects.BUCKET_RUN, subjects.step_key(2), step(2))
        await written(2)
        nats_server.kill()
        nats_server.start()
        await bus.kv_put(subjects.BUCKET_RUN, subjects.step_key(3), step(3))
        await written(3)
        await bus.kv_put(subjects.BUCKET_RUN, subjects.step_key(4), step(4))  # a sentinel
        await written(4)
        tg.cancel_scope.cancel()
    assert rows() == ["1", "2", "3", "4"]
    assert p.done


@pytest.mark.stack
async def test_a_stack_stops_itself_after_max_steps_from_the_step_records(make_stack):
    """A whole pipeline under `whet up` (fake engine, tiny learner) with max_steps = 2 stops
    on its own once the learner's second step record is in, with a train.csv row per step."""
    from tests.test_chaos import CONFIG

    stack = make_stack(CONFIG.replace("[training]\n", "[training]\nmax_steps = 2\n"))
    stack.start(timeout_s=180)
    await until(lambda: stack.proc is None or stack.proc.poll() is not None, 600,
                "the stack stopped itself")
    assert stack.proc is not None and stack.proc.returncode == 0
    with (stack.run_dir / "metrics" / "train.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows[:2]] == ["1", "2"] and rows[0]["samples_total"]
    out = (stack.tmp / "stack.out").read_text()
    assert "training.finished" in out, out[-3000:]


@pytest.mark.unit
def test_the_reward_plot_carries_a_rolling_mean():
    """The rolling mean of the last 5 steps' reward, hand-computed, fewer at the start."""
    from runtime.stack.plots import with_rolling_mean

    rows = [{"step": i, "mean_reward": r} for i, r in enumerate([0, 1, 2, 3, 4, 5, 6], 1)]
    got = [r["mean_reward_rolling"] for r in with_rolling_mean(rows, "mean_reward")]
    assert got == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]
