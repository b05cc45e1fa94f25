"""What `whet eval` prints: pass rates by domain, and the paired change against a baseline.

Consumes a round's record (`runtime.evaluate.record.EvalFile`) and its tallied `EvalRound`
(paired with the baseline's results when there was one); produces plain text lines. Pure
functions: no I/O.
"""

from __future__ import annotations

from pathlib import Path

from bus.messages import EvalRound, HeldoutScore
from runtime.evaluate.record import EpisodeScore, EvalFile, Score


def _model(record: EvalFile) -> str:
    m = record.model
    return m.get("path") or (f"{m['name']} at {m['url']}" if "url" in m else m.get("name", "?"))


def _reward(value: float | None) -> str:
    return "   -  " if value is None else f"{value:6.3f}"


def _score_line(name: str, s: Score) -> str:
    return (f"{name:<14} {f'{s.passed}/{s.tasks}':>9}  {s.rate:5.3f}  [{s.low:5.3f}, {s.high:5.3f}]"
            f"  {_reward(s.reward)}")


def score_lines(record: EvalFile, result: EvalRound) -> list[str]:
    """The model, then each domain's pass rate k/n with its 95% interval and mean reward."""
    lines = [f"{_model(record)} on {record.split} tasks (config {record.config or 'defaults'}, "
             f"hash {record.config_hash[:12]})",
             f"{'domain':<14} {'passed':>9}  {'rate':>5}  {'95% interval':^14}  {'reward':>6}"]
    lines += [_score_line(d, s) for d, s in record.domains.items()]
    lines.append(_score_line("all", record.overall))
    if result.dropped:
        lines.append(f"{result.dropped} attempts dropped by the judge (infrastructure): not counted")
    return lines + episode_lines(record.episodes)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "none"


def episode_lines(episodes: dict[str, EpisodeScore]) -> list[str]:
    """Each tool domain's episodes: turns, the well-formed share, calls by tool, ends."""
    lines = []
    for domain, e in episodes.items():
        lines += [f"{domain}: {e.episodes} episodes, {e.turns} turns, well-formed tool calls "
                  f"{e.well_formed}/{e.turns} ({e.share:.3f})",
                  f"  calls: {_counts(e.tools)}", f"  ends: {_counts(e.ends)}"]
    return lines


def _pair_line(name: str, s: HeldoutScore) -> str:
    return (f"{name:<14} {s.paired:>6}  {s.gained:>6}  {s.lost:>4}  {s.p_value:7.3g}  "
            f"{s.delta:+7.3f}")


def paired_lines(path: Path, baseline: EvalFile, result: EvalRound) -> list[str]:
    """The paired change since `baseline` by domain: tasks both judged, gained, lost, the
    sign test's p and the mean change of pass rate."""
    lines = [f"against {path} ({_model(baseline)}), on the tasks both judged:",
             f"{'domain':<14} {'paired':>6}  {'gained':>6}  {'lost':>4}  {'p':>7}  {'change':>7}"]
    lines += [_pair_line(d, s) for d, s in sorted(result.domains.items())]
    lines.append(_pair_line("all", result.overall))
    return lines
