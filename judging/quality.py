"""Quality bonuses of a passing attempt: lint, type errors and runtime against the reference.

Consumes the `[judge.reward.quality]` config, the candidate and the harness's `quality`
records; produces what the job spec asks the harness to measure (`job_spec`) and the bonus
components (`bonuses`), each in [0, its weight]. Bonuses, not penalties: a passing attempt
scores at least what it scores without quality, and every failing attempt scores less than
that already, so quality can only reorder passing attempts, whatever the weights or the
number of tests. The config check keeps the bonuses under `maximum` (so clipping cannot
undo them) and under the tests weight. The gate (pass only) is `judgement.conclude`'s.
It runs nothing.
"""

from __future__ import annotations

from judging.config import QualityConfig
from judging.extract import Candidate

MEMORY_MB = 128
"Added to a job's memory limit while lint or types are measured (mypy peaked at 67-86 MB here)."
CPU_FLOOR_S = 0.005
"Added to both CPU times before the ratio: below this, differences are measurement noise."


def job_spec(config: QualityConfig, cand: Candidate) -> dict | None:
    """The job spec's `quality` part, or None when quality is off."""
    if not config.on:
        return None
    return {"lint": config.lint > 0, "types": config.types > 0, "runtime": config.runtime > 0,
            "offset": cand.offset_lines, "wall_s": config.time_s}


def bonuses(config: QualityConfig, measured: dict) -> dict[str, float]:
    """The bonus of every measured quality with a weight; nothing for what was not measured
    (tool missing, reference failing):

    - `lint`: whole with no flake8 finding (ruff's default rules) on the candidate's lines,
      falling linearly to 0 at `findings_to_zero`;
    - `types`: the same for mypy's errors;
    - `runtime`: whole while the hidden tests take at most `slower_than` times the reference's
      CPU time (measured in the same job, the same way), 0 at twice that. A floor of
      `CPU_FLOOR_S` on both sides keeps microsecond noise on fast code from counting."""
    out = {}
    for name, weight in (("lint", config.lint), ("types", config.types)):
        record = measured.get(name) or {}
        if weight > 0 and isinstance(record.get("findings"), int):
            out[name] = weight * max(0.0, 1.0 - record["findings"] / config.findings_to_zero)
    ratio = runtime_ratio(measured.get("runtime") or {})
    if config.runtime > 0 and ratio is not None:
        k = config.slower_than
        out["runtime"] = config.runtime * min(max((2 * k - ratio) / k, 0.0), 1.0)
    return out


def runtime_ratio(record: dict) -> float | None:
    """Candidate over reference CPU time on the hidden tests (None when not measured)."""
    try:
        cand, ref = float(record["candidate_cpu_s"]), float(record["reference_cpu_s"])
    except (KeyError, TypeError, ValueError):
        return None
    return (cand + CPU_FLOOR_S) / (ref + CPU_FLOOR_S)


def evidence(measured: dict) -> str:
    """One line saying what was measured (for the verdict's evidence on a pass)."""
    parts = []
    for name in ("lint", "types"):
        record = measured.get(name)
        if record:
            found = record.get("findings")
            parts.append(f"{name}: {record['error']}" if found is None else
                         f"{name}: {found} ({'; '.join(record.get('first', [])[:2])})" if found else f"{name}: 0")
    runtime = measured.get("runtime")
    if runtime:
        ratio = runtime_ratio(runtime)
        parts.append(f"runtime: {runtime.get('error')}" if ratio is None else f"runtime: {ratio:.2f}x reference")
    return "; ".join(parts)[:1000]
