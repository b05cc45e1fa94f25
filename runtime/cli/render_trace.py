"""Terminal rendering of one trial for `whet trace`: the task, every turn with its execution,
the verdict, and the instances that handled it.

Consumes a `Trial`; produces text on the console. No I/O beyond printing.
"""

from __future__ import annotations

import textwrap
from datetime import datetime

from rich.console import Console
from rich.markup import escape

from bus.messages import ExecutionResult, Trial, Turn

_OUTCOME_STYLE = {"pass": "green", "fail": "red", "hack": "bold magenta", "dropped": "yellow"}


def _block(text: str, limit: int = 4000) -> str:
    if len(text) > limit:
        text = text[:limit] + f"\n... ({len(text) - limit} more characters)"
    return textwrap.indent(escape(text.rstrip()) or "(empty)", "    ")


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def _execution(result: ExecutionResult, executor: str) -> list[str]:
    ended = f"exit {result.exit_code}" if result.exit_code is not None else (
        f"signal {result.signal}" if result.signal is not None else "no exit")
    lines = [f"  execution by {executor or '?'} ({result.backend or '?'}): [bold]{result.status}[/] "
             f"{ended}, {result.wall_s:.2f} s wall, {result.cpu_s:.2f} s cpu, "
             f"{result.peak_memory_mb:.0f} MB"]
    if result.sandbox_failed:
        lines.append(f"  sandbox failed: {escape(result.sandbox_error)}")
    for name, text, cut in (("stdout", result.stdout, result.stdout_truncated),
                            ("stderr", result.stderr, result.stderr_truncated)):
        if text:
            lines += [f"  {name}{' (truncated)' if cut else ''}:", _block(text, 2000)]
    return lines


def _turn(i: int, turn: Turn) -> list[str]:
    lines = [f"[bold]turn {i + 1}[/]: generator {turn.generator or '?'}, policy "
             f"v{turn.policy_version}, finish {turn.finish_reason or '?'}",
             "  completion:", _block(turn.completion)]
    if turn.execution is not None:
        lines += _execution(turn.execution, turn.executor)
    else:
        lines.append("  execution: none recorded")
    if turn.feedback:
        lines += ["  feedback to the model:", _block(turn.feedback)]
    return lines


def render_trial(trial: Trial, console: Console | None = None) -> None:
    console = console or Console(highlight=False)
    v = trial.verdict
    a, t = v.attempt, v.attempt.task
    style = _OUTCOME_STYLE.get(v.outcome, "")
    lag = (f", lag {trial.current_version - a.policy_version}"
           if trial.current_version >= 0 else "")
    lines = [
        f"[bold]trial {escape(trial.trial_id)}[/] (run {trial.run_id}, group {a.group_id} "
        f"#{a.index + 1} of {a.group_size}, {a.purpose})",
        f"[{style}]{v.outcome}[/] reward {v.reward if v.reward is not None else '-'}"
        + (f", cause {v.cause}" if v.cause else ""),
        f"task {t.task_id} ({t.env} v{t.env_version}, domain {t.domain}, difficulty "
        f"{t.difficulty:g}, split {t.split})",
        f"policy v{a.policy_version} (admitted at v{a.admitted_version}; current when "
        f"recorded v{trial.current_version}{lag})",
        f"judged by {v.judge or '?'} at {_when(v.judged_at)}; recorded by "
        f"{trial.recorder or '?'} at {_when(trial.recorded_at)}",
        "prompt:", _block(t.prompt),
    ]
    for i, turn in enumerate(a.turns):
        lines += _turn(i, turn)
    if v.layers:
        lines.append("layers: " + "; ".join(
            f"{x.name} {x.passed}/{x.total} {'ok' if x.ok else 'failed'}" for x in v.layers))
    if v.components:
        lines.append("reward components: " + " ".join(
            f"{k}={val:+.3f}" for k, val in sorted(v.components.items())))
    if v.evidence:
        lines += ["evidence:", _block(v.evidence, 2000)]
    console.print("\n".join(lines))
