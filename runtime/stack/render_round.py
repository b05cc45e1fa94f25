"""Text and CSV forms of the evaluator's typed round result (`EvalRound`).

Consumes an `EvalRound`; produces the `eval.csv` row (`EVAL_COLUMNS`), the short held-out
part of the progress line and the lines `whet status` shows (the round, its rungs).
Formatting only: the numbers are the evaluator's (`envs.stats` computes them). No I/O.
"""

from __future__ import annotations

from typing import Any

from bus.messages import EvalRound, HeldoutScore

EVAL_COLUMNS = ["policy_version", "round", "step", "overall", "overall_low", "overall_high",
                "reward", "trained", "trained_low", "trained_high", "transfer", "transfer_low",
                "transfer_high", "baseline_version", "paired", "gained", "lost", "p_value",
                "delta", "trained_paired", "trained_gained", "trained_lost", "trained_p_value",
                "tasks", "attempts", "samples_per_task", "complete", "wall_s", "cpu_s", "rungs"]
"""Columns of `<run dir>/metrics/eval.csv`: pass@1 with its 95% interval overall, on the
trained domains and on the transfer domains; the paired comparison with the baseline version
overall and on the trained domains (tasks paired, gained, lost, sign-test p-value, mean
change); the step the row was written at, wall and CPU seconds; each domain's rungs as
`rung_text` writes them."""


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _p(value: float | None) -> float | None:
    """A p-value to 3 significant digits: a tiny one stays visible (2.6e-09, not 0.0)."""
    return None if value is None else float(f"{value:.3g}")


def _score_columns(prefix: str, score: HeldoutScore | None) -> dict[str, Any]:
    if score is None:
        return {}
    return {prefix: _r(score.rate), f"{prefix}_low": _r(score.low),
            f"{prefix}_high": _r(score.high)}


def eval_row(result: EvalRound) -> dict[str, Any]:
    """The `eval.csv` columns a round result fills (step and stamps are the caller's)."""
    o, t = result.overall, result.trained
    row: dict[str, Any] = {
        "policy_version": result.version, "round": result.round, "reward": _r(result.reward),
        "baseline_version": result.baseline_version, "paired": o.paired, "gained": o.gained,
        "lost": o.lost, "p_value": _p(o.p_value), "delta": _r(o.delta), "tasks": o.tasks,
        "attempts": o.attempts, "samples_per_task": result.samples_per_task,
        "complete": result.complete, "rungs": rung_text(result) or None,
        **_score_columns("overall", o), **_score_columns("trained", t),
        **_score_columns("transfer", result.transfer)}
    if t is not None:
        row.update(trained_paired=t.paired, trained_gained=t.gained, trained_lost=t.lost,
                   trained_p_value=_p(t.p_value))
    return row


def _interval(score: HeldoutScore) -> str:
    return f"{score.rate:.3f} [{score.low:.2f}, {score.high:.2f}]"


def _versus(score: HeldoutScore, baseline_version: int) -> str:
    return (f"vs v{baseline_version}: +{score.gained}/-{score.lost} of {score.paired} "
            f"(p={score.p_value:.3g})")


def round_brief(result: EvalRound | None) -> str:
    """The held-out part of the progress line, e.g. 'held-out 0.425 [0.32, 0.54] vs v0:
    +6/-2 of 80 (p=0.289)'; the trained domains' score when there are trained domains."""
    if result is None:
        return "held-out -"
    score = result.trained or result.overall
    return f"held-out {_interval(score)} {_versus(score, result.baseline_version)}"


def rung_text(result: EvalRound) -> str:
    """Each domain's pass rate by rung, with its interval, tasks and change since the
    baseline, e.g. 'data L0 0.520 [0.38, 0.66] n=50 +3/-1 (p=0.625), L1 ...; humaneval L0 ...'."""
    return "; ".join(
        f"{domain} " + ", ".join(f"L{rung} {_interval(s)} n={s.tasks} +{s.gained}/-{s.lost} "
                                 f"(p={s.p_value:.3g})" for rung, s in sorted(rungs.items()))
        for domain, rungs in sorted(result.rungs.items()))


def round_line(result: EvalRound) -> str:
    """Everything about one round on one line, for `whet status`."""
    parts = [f"v{result.version} (round {result.round}"
             + ("" if result.complete else ", incomplete") + ")",
             f"overall {_interval(result.overall)} on {result.overall.tasks} tasks"
             + (f" x{result.samples_per_task}" if result.samples_per_task > 1 else ""),
             _versus(result.overall, result.baseline_version)]
    for name, score in (("trained", result.trained), ("transfer", result.transfer)):
        if score is not None:
            parts.append(f"{name} {_interval(score)} {_versus(score, result.baseline_version)}")
    return "; ".join(parts)
