"""Where the held-out reward of bench/vs_trl's policies comes from, by kind of answer.

    python bench/vs_trl/failure_kinds.py bench/vs_trl/results/<label>

Consumes the seed files of one vs_trl result folder (each held-out task's [reward, outcome]
for the initial, TRL and whetstone policies); writes `failure_kinds.json` beside them: per
seed and pooled, how many answers each policy left passing, failing with partial credit,
failing with no test passed, and scored as code that does not compile (reward at most -0.4:
the judge's compile_error, truncation and hack rewards). It runs nothing.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

POLICIES = ("initial", "trl", "whetstone")


def kind(reward: float | None, outcome: str) -> str:
    """One held-out answer's kind."""
    if outcome == "pass":
        return "pass"
    if reward is None:
        return "unscored"
    if reward <= -0.4:
        return "does_not_compile"
    return "partial" if reward > 0.1 else "no_test_passed"


def kinds(folder: Path) -> dict:
    """Counts per seed file and pooled, per policy."""
    per_seed, pooled = {}, {p: Counter() for p in POLICIES}
    for path in sorted(folder.glob("seed-*.json")):
        heldout = json.loads(path.read_text())["heldout"]
        counts = {p: Counter(kind(r, o) for r, o in heldout[p].values()) for p in POLICIES}
        per_seed[path.stem] = {p: dict(sorted(c.items())) for p, c in counts.items()}
        for p in POLICIES:
            pooled[p].update(counts[p])
    return {"folder": folder.name, "per_seed": per_seed,
            "pooled": {p: dict(sorted(c.items())) for p, c in pooled.items()}}


if __name__ == "__main__":
    result_dir = Path(sys.argv[1])
    out = kinds(result_dir)
    (result_dir / "failure_kinds.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["pooled"], indent=1))
