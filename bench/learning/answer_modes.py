"""Benchmark: how a run's attempts end, per domain, purpose and policy version.

Consumes a run's JetStream store (`runs/<id>/nats/jetstream`, read from a copy through a
private nats-server by `rejudge_rounds.stored_verdicts`); produces JSON: for each domain,
purpose (train, eval) and policy version, the count of each outcome and cause the judge gave
(`pass`, `model.runtime_error`, `model.wrong_answer`, `model.truncated`, ...), so a run that
stops improving a domain shows which failure its answers settled into. Dropped attempts are
counted under `dropped`. It reads the verdicts as judged and changes nothing.

    python bench/learning/answer_modes.py runs/ablation/<run>/nats/jetstream [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.learning.rejudge_rounds import stored_verdicts  # noqa: E402


def ending(verdict) -> str:
    """'pass', 'dropped', or the cause of a failure or hack ('model.runtime_error', ...)."""
    if verdict.outcome in ("pass", "dropped"):
        return verdict.outcome
    return verdict.cause or verdict.outcome


def modes(verdicts) -> dict:
    """{domain: {purpose: {version: {ending: count}}}}. The version is the one that sampled
    the attempt's last turn (train) or the round's version (eval)."""
    out: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(Counter)))
    for v in verdicts:
        a = v.attempt
        version = a.admitted_version if a.purpose == "eval" else a.turns[-1].policy_version
        out[a.task.domain][a.purpose][version][ending(v)] += 1
    return {domain: {purpose: {str(version): dict(sorted(counts.items()))
                               for version, counts in sorted(by_version.items())}
                     for purpose, by_version in sorted(by_purpose.items())}
            for domain, by_purpose in sorted(out.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path, help="runs/<id>/nats/jetstream")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not args.store.is_dir():
        sys.exit(f"answer_modes: {args.store} is not a directory; give runs/<id>/nats/jetstream")
    text = json.dumps({"store": args.store.name if args.store.name != "jetstream"
                       else args.store.parents[1].name,
                       "modes": modes(stored_verdicts(args.store))}, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
