"""The chaos test under many seeds: one pytest run per (seed, replicas, rounds), in turn.

Usage: `PYTHONPATH=. .venv/bin/python bench/chaos/chaos_seeds.py [--seeds 1-10] [--replicas 1,2]
[--rounds 1] [--out bench/chaos/results/chaos_seeds.txt]`. Replicas alternate over the seeds.
Each run's summary line or its failure goes to the output file and to stdout: kills by kind
(all seven actor kinds and the server), pauses by kind (SIGSTOP of one actor and of the
server), full disks (how many, and seconds full until the learner's checkpoint waited),
`admitted N = trained T + left out L` with the reasons, learner steps, rounds started and
reported, trials. Each run's whole pytest output is kept beside the output file
(`<out>.d/seed<N>.log`). A benchmark, not a test: about 2-4 minutes a run here.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def seeds(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def run_one(seed: int, replicas: int, rounds: int, log: Path, test: str = "tests/test_chaos.py",
            summary: str = "chaos seed", **env_vars: str) -> tuple[bool, str, float]:
    """One pytest run of `test` with the seed; (passed, its `summary` line or errors, seconds)."""
    env = {**os.environ, "CHAOS_SEED": str(seed), "CHAOS_REPLICAS": str(replicas),
           "CHAOS_ROUNDS": str(rounds), "PYTHONPATH": str(ROOT), **env_vars}
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", test, "-q", "-s",
                           "-p", "no:cacheprovider", "-o", "timeout=1800"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    took = time.monotonic() - began
    log.write_text(proc.stdout + proc.stderr)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(summary)]
    if proc.returncode == 0 and lines:
        return True, lines[-1], took
    errors = [line for line in proc.stdout.splitlines() if re.match(r"^E\s", line)]
    return False, " | ".join(errors[:4]) or proc.stdout[-400:], took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1-10")
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "bench/chaos/results/chaos_seeds.txt"))
    args = ap.parse_args()
    replicas = [int(r) for r in args.replicas.split(",")]
    lines = []
    logs = Path(args.out + ".d")
    logs.mkdir(parents=True, exist_ok=True)
    for n, seed in enumerate(seeds(args.seeds)):
        ok, text, took = run_one(seed, replicas[n % len(replicas)], args.rounds,
                                 logs / f"seed{seed}.log")
        line = f"{'PASS' if ok else 'FAIL'} seed={seed} replicas={replicas[n % len(replicas)]} " \
               f"rounds={args.rounds} wall={took:.0f}s :: {text}"
        print(line, flush=True)
        lines.append(line)
        Path(args.out).write_text("\n".join(lines) + "\n")
    failed = sum(not line.startswith("PASS") for line in lines)
    print(f"{len(lines) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
