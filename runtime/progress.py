"""The main job's progress: a live line on the terminal, CSV metrics and plots in the run dir.

Consumes `learner.step_completed` events from the events stream (read-only replay, from the
moment the stack is ready) and the evaluator's typed round results (`EvalRound`, KV whet-run
`evaluator.round.*`, those reported since then); produces
- a progress bar on stderr (one plain line per step when stderr is not a terminal) with
  step, policy version, mean reward, pass rate, staleness and the latest held-out pass rate
  with its interval and its paired change since version 0 (`runtime.render_round`);
- `<run dir>/metrics/train.csv` and `eval.csv`, one row per learner step / evaluated version,
  each stamped with wall seconds and CPU seconds of the whole stack since start;
- `<run dir>/plots/*.png` (reward, held-out pass rate, staleness against steps), redrawn as
  rows arrive;
and, once `training.max_steps` steps are done (and the evaluator has reported the round of
the last version due one), a stop of the stack. It trains nothing.
"""

from __future__ import annotations

import csv
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import anyio
import structlog

from bus import subjects
from bus.messages import EvalRound, Event
from bus.nats_bus import Bus
from runtime.config import RunConfig
from runtime.render_round import EVAL_COLUMNS, eval_row, round_brief
from runtime.rundir import RunDir

log = structlog.get_logger("runtime.progress")

TRAIN_COLUMNS = ["step", "policy_version", "samples_total", "mean_reward", "pass_rate",
                 "staleness_mean", "staleness_max", "stale_rejected", "step_s", "idle_frac",
                 "held_for_eval_s", "loss", "kl", "clip_frac", "wall_s", "cpu_s"]


class CsvLog:
    """Appends rows with fixed columns to one CSV file (header written once)."""

    def __init__(self, path: Path, columns: list[str]) -> None:
        self.path, self.columns = path, columns
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            with path.open("w", newline="") as f:
                csv.writer(f).writerow(columns)

    def append(self, row: dict[str, Any]) -> None:
        with self.path.open("a", newline="") as f:
            csv.writer(f).writerow(["" if row.get(c) is None else row.get(c) for c in self.columns])


def stack_cpu_seconds(child_pids: list[int]) -> float:
    """CPU seconds used by this process, its reaped children and the live `child_pids`
    (with the children they reaped: sandboxes, DeepSpeed ranks)."""
    own = os.times()
    total = own.user + own.system + own.children_user + own.children_system
    tick = os.sysconf("SC_CLK_TCK")
    for pid in child_pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    return round(total, 1)


class Progress:
    """Turns events into CSV rows, a terminal line and plots; decides when to stop."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir, child_pids: Callable[[], list[int]]) -> None:
        self.cfg, self.run_dir, self.child_pids = cfg, run_dir, child_pids
        self.started = time.monotonic()
        self.train = CsvLog(run_dir.path / "metrics" / "train.csv", TRAIN_COLUMNS)
        self.eval = CsvLog(run_dir.path / "metrics" / "eval.csv", EVAL_COLUMNS)
        self.step = 0
        self.heldout: EvalRound | None = None
        self.rounds: set[tuple[int, int]] = set()
        self.last_round = -1
        self.last: dict[str, Any] = {}

    def stamp(self) -> dict[str, float]:
        return {"wall_s": round(time.monotonic() - self.started, 1),
                "cpu_s": stack_cpu_seconds(self.child_pids())}

    def on_step(self, fields: dict[str, Any]) -> None:
        self.step = int(fields.get("step", self.step))
        row = {**fields, **self.stamp()}
        self.train.append(row)
        self.last = row

    def on_round(self, result: EvalRound) -> bool:
        """Record a round's result; False for one recorded before (a renewed watch)."""
        if (result.round, result.version) in self.rounds:
            return False
        self.rounds.add((result.round, result.version))
        self.heldout = result
        self.last_round = max(self.last_round, result.round)
        self.eval.append({**eval_row(result), "step": self.step, **self.stamp()})
        return True

    def line(self) -> str:
        r = self.last

        def f(key: str, fmt: str = "{:.3f}") -> str:
            value = r.get(key)
            return "-" if value is None else fmt.format(value)

        total = self.cfg.training.max_steps or "∞"
        return (f"step {self.step}/{total}  version {f('policy_version', '{}')}  "
                f"reward {f('mean_reward')}  pass {f('pass_rate')}  "
                f"staleness {f('staleness_mean', '{:.2f}')}  {round_brief(self.heldout)}  "
                f"samples {f('samples_total', '{}')}  cpu {f('cpu_s', '{:.0f}')}s")

    @property
    def done(self) -> bool:
        """`max_steps` steps trained and, with an evaluator, the last version due a round
        evaluated (so a run ends with the held-out rate of what it trained)."""
        if not (self.cfg.training.max_steps and self.step >= self.cfg.training.max_steps):
            return False
        if not self.cfg.actors.count.get("evaluator"):
            return True
        version = int(self.last.get("policy_version") or 0)
        return self.last_round >= version - version % self.cfg.evaluator.every_versions


async def follow(bus: Bus, cfg: RunConfig, run_dir: RunDir,
                 child_pids: Callable[[], list[int]]) -> None:
    """Record and show progress until cancelled; stop the stack after `max_steps` steps."""
    progress = Progress(cfg, run_dir, child_pids)
    since = time.time()
    show = _Display(sys.stderr.isatty())
    redraw = anyio.Event()

    async def read(kind: str, event: str, handle: Callable[[dict[str, Any]], None]) -> None:
        async for _, ev, _ in bus.replay(subjects.STREAM_EVENTS, subjects.event_filter(kind),
                                         Event, since=since):
            if ev is not None and ev.event == event:
                handle(ev.fields)
                show.update(progress.line())
                redraw.set()
                if progress.done:
                    log.info("training.finished", steps=progress.step, **progress.stamp())
                    bus.stopping.set()

    async def rounds() -> None:
        async for result in bus.kv_watch(subjects.BUCKET_RUN, subjects.KEY_EVAL_ROUNDS,
                                         EvalRound):
            if result.reported_at >= since and progress.on_round(result):
                show.update(progress.line())
                redraw.set()
                if progress.done:
                    log.info("training.finished", steps=progress.step, **progress.stamp())
                    bus.stopping.set()

    async def plot() -> None:
        from runtime.plots import draw

        nonlocal redraw
        while True:
            await redraw.wait()
            redraw = anyio.Event()
            await anyio.to_thread.run_sync(draw, run_dir.path)
            await anyio.sleep(10)  # at most one redraw per 10 s

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read, "learner", "learner.step_completed", progress.on_step)
            tg.start_soon(rounds)
            tg.start_soon(plot)
    finally:
        show.close()
        with anyio.CancelScope(shield=True):
            from runtime.plots import draw

            await anyio.to_thread.run_sync(draw, run_dir.path)


class _Display:
    """One status line: redrawn in place on a terminal, appended otherwise."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def update(self, text: str) -> None:
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + text)
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
