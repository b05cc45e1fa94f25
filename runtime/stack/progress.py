"""The stack's progress: a live line on the terminal, CSV metrics and plots in the run dir.

Consumes the actors' heartbeats (KV whet-actors) and, with a learner, the typed step
records (`StepRecord`, KV `learner.step.*`) and round results (`EvalRound`, KV
`evaluator.round.*`), through KV watches renewed after an outage (what was recorded is
skipped, so nothing is missed or written twice; the log events are for people, never read).
Produces the live line on stderr (`runtime.stack.liveline`, with `runtime.stack.render_round`:
in place on a terminal, else a plain line on change, every 30 s to 5 min); with a learner,
`metrics/train.csv`, `eval.csv` and `progress.csv` (stamped with wall and CPU seconds of the
whole stack) and `plots/*.png` (at most once a minute, and at the stop); and, once
`training.max_steps` steps are done and their last round reported, a stop. It trains nothing.
"""

from __future__ import annotations

import csv
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

import anyio
import msgspec
import structlog

from bus import subjects
from bus.errors import BusUnavailable
from bus.messages import EvalRound, Heartbeat, Message, StepRecord
from bus.nats_bus import Bus
from runtime.config import RunConfig
from runtime.log import Refusals
from runtime.stack import liveline
from runtime.stack.cpu import cpu_by_label, stack_cpu_seconds
from runtime.stack.plots import draw
from runtime.stack.render_round import EVAL_COLUMNS, eval_row, round_brief
from runtime.stack.rundir import RunDir
from runtime.terminal import terminal

log = structlog.get_logger("runtime.stack.progress")
ROW_S = 30.0
"Seconds between rows of metrics/progress.csv."
PLAIN_LINE_S = 30.0
"Off a terminal: seconds between looks, a line each time it changed..."
QUIET_LINE_S = 300.0
"...and at least this often, changed or not."
PLOT_S = 60.0
"Plots are redrawn at most this often (matplotlib costs a second or two of CPU)."

TRAIN_COLUMNS = ["step", "policy_version", "samples_total", "mean_reward", "pass_rate",
                 "staleness_mean", "staleness_max", "stale_rejected", "step_s", "idle_frac",
                 "held_for_eval_s", "loss", "kl", "clip_frac", "masked_frac", "wall_s", "cpu_s"]
PROGRESS_COLUMNS = ["wall_s", "cpu_s", *liveline.Counts().row()]


class Unwritable:
    """Runs a write that the disk may refuse (a full disk, a read-only folder) under the log
    file's rule (`runtime.log.Refusals`): an OSError is counted, never raised, and said once
    (`progress.file_unwritable`); the first write that works again says how many were lost
    (`progress.file_writable`). Metrics and plots are for people: the supervisor must
    outlive them."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.refusals = Refusals()

    @property
    def unwritten(self) -> int:
        """Writes refused since the last one that worked."""
        return self.refusals.count

    def run(self, write: Callable[..., Any], *args: Any) -> Any:
        """`write(*args)`'s result, or None when the disk refused it."""
        try:
            result = write(*args)
        except OSError as exc:
            if self.refusals.refused():
                log.warning("progress.file_unwritable", what=self.what, error=str(exc))
            return None
        if self.refusals.count:
            log.warning("progress.file_writable", what=self.what, unwritten=self.refusals.taken())
        return result


class CsvLog:
    """Appends rows with fixed columns to one CSV file (header written once); a row the disk
    refuses is counted and lost, never raised (`Unwritable`)."""

    def __init__(self, path: Path, columns: list[str]) -> None:
        self.path, self.columns = path, columns
        self.guard = Unwritable(str(path))
        self.guard.run(self._header)

    def _header(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            with self.path.open("w", newline="") as f:
                csv.writer(f).writerow(self.columns)

    def append(self, row: dict[str, Any]) -> None:
        self.guard.run(self._append, row)

    def _append(self, row: dict[str, Any]) -> None:
        if not self.path.exists():  # the header was refused earlier
            self._header()
        with self.path.open("a", newline="") as f:
            csv.writer(f).writerow(["" if row.get(c) is None else row.get(c) for c in self.columns])


class Progress:
    """Turns step records and round results into CSV rows, a terminal line and plots;
    decides when to stop."""

    def __init__(self, cfg: RunConfig, run_dir: RunDir,
                 pids: Callable[[], dict[str, list[int]]]) -> None:
        self.cfg, self.run_dir, self.pids = cfg, run_dir, pids
        "Live process ids by label: each actor kind, and 'nats' for an embedded server."
        self.started = time.monotonic()
        self.train = CsvLog(run_dir.path / "metrics" / "train.csv", TRAIN_COLUMNS)
        self.eval = CsvLog(run_dir.path / "metrics" / "eval.csv", EVAL_COLUMNS)
        self.counts = CsvLog(run_dir.path / "metrics" / "progress.csv", PROGRESS_COLUMNS)
        self.kinds = sorted({*cfg.actors.count, "nats"})
        self.cpu = CsvLog(run_dir.path / "metrics" / "cpu.csv", ["wall_s", *self.kinds, "sandbox"])
        self.sandbox_cpu_s = 0.0
        "CPU seconds of sandboxed jobs, from the heartbeats (no process tree shows them)."
        self.step = 0
        self.steps: dict[int, float] = {}
        "When each recorded step was trained (`trained_at`), to tell a repeat from a redo."
        self.last: StepRecord | None = None
        self.heldout: EvalRound | None = None
        self.rounds: set[tuple[int, int]] = set()
        self.last_round = -1

    def stamp(self) -> dict[str, float]:
        own = stack_cpu_seconds([p for ps in self.pids().values() for p in ps])
        return {"wall_s": round(time.monotonic() - self.started, 1),
                "cpu_s": round(own + self.sandbox_cpu_s, 1)}

    def on_step(self, record: StepRecord) -> bool:
        """Record a learner step; False for one recorded before (a renewed watch). A step
        redone after a learner restart (trained again, later) gets a row of its own."""
        if self.steps.get(record.step) == record.trained_at:
            return False
        self.steps[record.step] = record.trained_at
        self.step, self.last = record.step, record
        self.train.append({**msgspec.structs.asdict(record), **self.stamp()})
        return True

    def on_round(self, result: EvalRound) -> bool:
        """Record a round's result; False for one recorded before (a renewed watch)."""
        if (result.round, result.version) in self.rounds:
            return False
        self.rounds.add((result.round, result.version))
        self.heldout = result
        self.last_round = max(self.last_round, result.round)
        self.eval.append({**eval_row(result), "step": self.step, **self.stamp()})
        return True

    def on_counts(self, counts: liveline.Counts) -> None:
        """A row of metrics/progress.csv (what the stack has got through so far) and one of
        metrics/cpu.csv (CPU seconds so far of each kind's processes and their children, and
        of the sandboxed jobs)."""
        self.sandbox_cpu_s = max(self.sandbox_cpu_s, counts.sandbox_cpu_s)
        stamp = self.stamp()
        self.counts.append({**counts.row(), **stamp})
        self.cpu.append({"wall_s": stamp["wall_s"], **cpu_by_label(self.pids()),
                         "sandbox": self.sandbox_cpu_s})

    def figures(self) -> str:
        """The latest training figures for the live line ('' before the first of them)."""
        r = self.last

        def f(value: float | None, fmt: str = "{:.3f}") -> str:
            return "-" if value is None else fmt.format(value)

        out = []
        if r is not None:
            out.append(f"version {r.policy_version} reward {f(r.mean_reward)} "
                       f"pass {f(r.pass_rate)} staleness {f(r.staleness_mean, '{:.2f}')}")
        if self.heldout is not None:
            out.append(round_brief(self.heldout))
        return "  ".join(out)

    @property
    def done(self) -> bool:
        """`max_steps` steps trained and, with an evaluator, the last version due a round
        evaluated (so a run ends with the held-out rate of what it trained)."""
        if not (self.cfg.training.max_steps and self.step >= self.cfg.training.max_steps):
            return False
        if not self.cfg.actors.count.get("evaluator"):
            return True
        version = self.last.policy_version if self.last is not None else 0
        return self.last_round >= version - version % self.cfg.evaluator.every_versions


async def follow(bus: Bus, cfg: RunConfig, run_dir: RunDir,
                 pids: Callable[[], dict[str, list[int]]]) -> None:
    """Show the live line until cancelled; with a learner, also record metrics and plots,
    and stop the stack after `max_steps` steps."""
    progress = Progress(cfg, run_dir, pids) if cfg.actors.count.get("learner") else None
    since = time.time()
    term = terminal()
    redraw = anyio.Event()

    def finish_when_done() -> None:
        assert progress is not None
        redraw.set()
        if progress.done and not bus.stopping.is_set():
            log.info("training.finished", steps=progress.step, **progress.stamp())
            bus.stopping.set()

    def on_step(record: StepRecord) -> None:
        assert progress is not None
        if record.trained_at >= since and progress.on_step(record):
            finish_when_done()

    def on_round(result: EvalRound) -> None:
        assert progress is not None
        if result.reported_at >= since and progress.on_round(result):
            finish_when_done()

    async def show() -> None:
        shown, shown_at, row_at = "", -1e9, -1e9
        while True:
            now = time.monotonic()
            try:
                beats = await bus.kv_items(subjects.BUCKET_ACTORS, Heartbeat)
            except Exception as exc:  # noqa: BLE001 - an outage: say so, keep going
                text = f"{liveline.duration(now - started)}  no answer from the bus ({exc!r:.80})"
            else:
                c = liveline.counts(liveline.live(list(beats.values()), time.time()), cfg)
                text = liveline.describe(c, cfg, now - started,
                                         progress.figures() if progress else "")
                if progress is not None and now - row_at >= ROW_S:
                    progress.on_counts(c)
                    row_at = now
                    redraw.set()
            if term.tty:
                term.show(_fit(text))
            elif text.split("  ", 1)[-1] != shown or now - shown_at >= QUIET_LINE_S:
                term.show(text)
                shown, shown_at = text.split("  ", 1)[-1], now
            await anyio.sleep(1.0 if term.tty else PLAIN_LINE_S)

    plots = Unwritable(str(run_dir.path / "plots"))

    async def plot() -> None:
        nonlocal redraw
        while True:
            await redraw.wait()
            redraw = anyio.Event()
            await anyio.to_thread.run_sync(plots.run, draw, run_dir.path)
            await anyio.sleep(PLOT_S)

    started = time.monotonic()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(show)
            if progress is not None:
                tg.start_soon(watch, bus, subjects.KEY_LEARNER_STEPS, StepRecord, on_step)
                tg.start_soon(watch, bus, subjects.KEY_EVAL_ROUNDS, EvalRound, on_round)
                tg.start_soon(plot)
    finally:
        term.end_status()
        if progress is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(plots.run, draw, run_dir.path)


M = TypeVar("M", bound=Message)


async def watch(bus: Bus, key: str, cls: type[M], handle: Callable[[M], None]) -> None:
    """Hand every value of whet-run `key` (a pattern) to `handle`, now and as they are
    written; a watch an outage ends is renewed (and gives every value again)."""
    while True:
        try:
            async for value in bus.kv_watch(subjects.BUCKET_RUN, key, cls):
                handle(value)
        except (BusUnavailable, TimeoutError) as exc:
            log.warning("progress.watch_renewed", key=key, error=repr(exc))
            await anyio.sleep(1.0)


def _fit(text: str) -> str:
    """`text` cut to the terminal's width, so redrawing in place stays on one line."""
    width = shutil.get_terminal_size((120, 24)).columns - 1
    return text if len(text) <= width else text[:width - 1] + "…"
