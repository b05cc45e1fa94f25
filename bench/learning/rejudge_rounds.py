"""Benchmark: a finished run's held-out or validation rounds judged again by today's judge.

Consumes a run folder (`runs/.../<id>`, its JetStream store under nats/) and reads every
eval verdict from a copy of that store through a private nats-server. Structured documents
are judged again whole (no sandbox needed: `judging.judgement.before_running`). Programs are
not run again: only their format layer is read again (`judging.extract`), which can turn
a verdict whose one failure was the format into a pass with the format bonus. Produces JSON:
per round (version), passes and mean reward then and now, and each task whose verdict
changed. It changes nothing in the run; answers are never re-sampled.

    python bench/learning/rejudge_rounds.py runs/ablation/<id> [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bus import subjects  # noqa: E402
from bus.codec import decode  # noqa: E402
from bus.messages import Verdict  # noqa: E402
from judging import kinds  # noqa: E402
from judging.config import RewardConfig  # noqa: E402
from judging.judgement import before_running, candidate_of  # noqa: E402
from runtime.broker.embedded import EmbeddedServer  # noqa: E402


def rejudged(v: Verdict, weights: RewardConfig) -> tuple[str, float, str]:
    """(outcome, reward, how) of an eval verdict under today's judge."""
    attempt, turns = v.attempt, len(v.attempt.turns)
    cand = candidate_of(attempt)
    if kinds.of(attempt.task).attempt == "document":
        j = before_running(attempt.task, cand, turns, weights)
        return j.outcome, round(float(j.reward), 6), "judged again"
    old_structure = v.layers[0] if v.layers else None
    format_only = (old_structure is not None and not old_structure.ok
                   and old_structure.detail.startswith("format:") and ";" not in old_structure.detail)
    if v.outcome == "fail" and v.cause == "model.format" and format_only and cand.structure(attempt.task).ok:
        return "pass", round(float(v.reward) + weights.format, 6), "format read again"
    return v.outcome, float(v.reward), "unchanged"


async def _verdicts(url: str) -> list[Verdict]:
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(subjects.STREAM_VERDICTS)
        out = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                msg = await js.get_msg(subjects.STREAM_VERDICTS, seq)
            except Exception:  # noqa: BLE001 - a deleted sequence
                continue
            out.append(decode(msg.data, Verdict))
        return out
    finally:
        await nc.close()


def stored_verdicts(store: Path) -> list[Verdict]:
    """Every verdict in a run's JetStream store (`<run>/nats/jetstream`), read from a copy
    through a private nats-server; the run is left untouched."""
    with tempfile.TemporaryDirectory(prefix="verdicts-") as tmp:
        shutil.copytree(store, Path(tmp) / "jetstream")
        server = EmbeddedServer(Path(tmp))
        url = server.start()
        try:
            return asyncio.run(_verdicts(url))
        finally:
            server.stop()


def summary(verdicts: list[Verdict], weights: RewardConfig) -> dict:
    rounds: dict[int, dict[str, tuple]] = defaultdict(dict)
    for v in verdicts:
        rounds[v.attempt.admitted_version][v.attempt.task.task_id] = (
            (v.outcome, float(v.reward)), rejudged(v, weights))
    out = {}
    for version, tasks in sorted(rounds.items()):
        then = [old for old, _ in tasks.values()]
        now = [new[:2] for _, new in tasks.values()]
        out[str(version)] = {
            "tasks": len(tasks),
            "passes_then": sum(o == "pass" for o, _ in then),
            "passes_now": sum(o == "pass" for o, _ in now),
            "reward_then": round(sum(r for _, r in then) / len(then), 4),
            "reward_now": round(sum(r for _, r in now) / len(now), 4),
            "changed": {t: {"then": list(old), "now": [new[0], new[1]], "how": new[2]}
                        for t, (old, new) in sorted(tasks.items()) if tuple(old) != new[:2]},
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    store = args.run_dir / "nats" / "jetstream"
    if not store.is_dir():
        sys.exit(f"rejudge_rounds: {store} is missing: the run's JetStream store is needed "
                 "(runs keep it under nats/jetstream)")
    verdicts = [v for v in stored_verdicts(store)
                if v.attempt.purpose == "eval" and v.reward is not None]
    where = args.run_dir.resolve()
    shown = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    out = f" --out {args.out}" if args.out else ""
    result = {"run": args.run_dir.name,
              "command": f"PYTHONPATH=. python bench/learning/rejudge_rounds.py {shown}{out}",
              "rounds": summary(verdicts, RewardConfig())}
    text = json.dumps(result, indent=1) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    for version, r in result["rounds"].items():
        print(f"v{version}: {r['tasks']} tasks, passes {r['passes_then']} -> {r['passes_now']}, "
              f"reward {r['reward_then']} -> {r['reward_now']}, {len(r['changed'])} changed")


if __name__ == "__main__":
    main()
