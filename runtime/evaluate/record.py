"""The file `whet eval --out` writes and `--baseline` reads: a round, enough to recompute it.

Consumes a round's settings (what was evaluated, the effective config), its chosen tasks and
each task's `TaskResult`; produces an `EvalFile` (with tool domains' episode figures) as
indented JSON, and reads one back (a file
that is not one is a one-line `WhetError`). The config hash is the SHA-256 of the resolved
config the round ran with, so two files say whether they measured the same tasks the same way;
the summary is derived (`runtime.evaluate.round.tally` recomputes it from `results`).
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from pathlib import Path

import msgspec

from bus.errors import WhetError
from bus.messages import EvalRound
from runtime.config import RunConfig, dump
from runtime.evaluate.round import TaskResult

FORMAT = "whet-eval.v1"


class Score(msgspec.Struct, kw_only=True):
    """One domain's (or every task's) pass rate and mean reward, as printed."""

    passed: int
    tasks: int
    rate: float
    low: float
    high: float
    reward: float | None


class EpisodeScore(msgspec.Struct, kw_only=True):
    """One tool domain's episodes, as printed: turns, well-formed share, calls, ends."""

    episodes: int
    turns: int
    well_formed: int
    "Turns whose completion parsed as a tool call."
    share: float
    "well_formed / turns (0 with no turns)."
    tools: dict[str, int]
    "Well-formed calls by tool."
    ends: dict[str, int]
    "Episodes by how they ended."


class EvalFile(msgspec.Struct, kw_only=True):
    """One `whet eval` round."""

    format: str = FORMAT
    model: dict[str, str]
    "What was evaluated: {kind: folder, path}, {kind: endpoint, url, name} or {kind: configured, name}."
    config: str
    "The config file read ('' for the built-in defaults)."
    config_hash: str
    split: str
    seed: int
    tasks: dict[str, list[str]]
    "The chosen task ids by domain, in the order they were evaluated."
    results: dict[str, TaskResult]
    "Each task's outcome and reward, by task id: what every number is computed from."
    overall: Score
    domains: dict[str, Score]
    dropped: int = 0
    "Attempts the judge dropped (infrastructure): in `results`, not counted."
    made_at: float = 0.0
    episodes: dict[str, EpisodeScore] = {}
    "Tool domains' episode figures, by domain (derived from `results`)."


def config_hash(cfg: RunConfig) -> str:
    """SHA-256 of the resolved config."""
    return hashlib.sha256(dump(cfg)).hexdigest()


def scores(result: EvalRound) -> tuple[Score, dict[str, Score]]:
    """(every task, by domain) of a tallied round."""
    def score(domain: str | None) -> Score:
        s = result.overall if domain is None else result.domains[domain]
        passed = sum(o.passed for o in result.tasks.values() if domain in (None, o.domain))
        reward = result.reward if domain is None else result.rewards.get(domain)
        return Score(passed=passed, tasks=s.tasks, rate=s.rate, low=s.low, high=s.high,
                     reward=reward)

    return score(None), {d: score(d) for d in sorted(result.domains)}


def episode_scores(results: dict[str, TaskResult]) -> dict[str, EpisodeScore]:
    """Each tool domain's episode figures, summed over its tasks' results."""
    by: dict[str, list[TaskResult]] = {}
    for r in results.values():
        if r.end:
            by.setdefault(r.domain, []).append(r)
    out = {}
    for domain, rs in sorted(by.items()):
        turns, formed = sum(r.turns for r in rs), sum(r.well_formed for r in rs)
        tools: Counter[str] = Counter()
        for r in rs:
            tools.update(r.tools)
        out[domain] = EpisodeScore(episodes=len(rs), turns=turns, well_formed=formed,
                                   share=round(formed / turns, 4) if turns else 0.0,
                                   tools=dict(sorted(tools.items())),
                                   ends=dict(sorted(Counter(r.end for r in rs).items())))
    return out


def make(*, model: dict[str, str], config: str, cfg: RunConfig, chosen: dict[str, list[str]],
         results: dict[str, TaskResult], result: EvalRound) -> EvalFile:
    """The record of one round."""
    overall, domains = scores(result)
    return EvalFile(model=model, config=config, config_hash=config_hash(cfg),
                    split=cfg.evaluator.split, seed=cfg.run.seed, tasks=chosen, results=results,
                    overall=overall, domains=domains, dropped=result.dropped, made_at=time.time(),
                    episodes=episode_scores(results))


def write(path: Path, record: EvalFile) -> None:
    """Write `record` as indented JSON (its folder made if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(msgspec.json.format(msgspec.json.encode(record), indent=2) + b"\n")


def read(path: Path) -> EvalFile:
    """A file `write` wrote; `WhetError` naming the file and the problem otherwise."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise WhetError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        record = msgspec.json.decode(raw, type=EvalFile)
    except msgspec.DecodeError as exc:
        raise WhetError(f"{path}: not a file 'whet eval --out' wrote ({exc})") from None
    if record.format != FORMAT:
        raise WhetError(f"{path}: format {record.format!r}, expected {FORMAT!r}")
    return record
