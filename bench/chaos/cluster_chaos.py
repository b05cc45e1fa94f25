"""Cluster chaos under several seeds: kill -9 NATS nodes (leaders first) six times a run.

Usage: `PYTHONPATH=. .venv/bin/python bench/chaos/cluster_chaos.py [--seeds 7] [--kills 6]
[--out bench/chaos/results/cluster_chaos.txt]`. Each seed runs `tests/test_cluster_chaos.py` with
`CLUSTER_KILLS` kills (the test runs 3 in CI) through `bench/chaos_seeds.run_one`; its
summary line and its table of kills (which node, what it led, how long it was down, when
another node led what the kill aimed at, and how many seconds no verdict was stored after the
kill) go to the output file and stdout. Whole pytest outputs stay in `<out>.d/`. A benchmark,
not a test: about 2-3 minutes a run here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chaos_seeds import ROOT, run_one, seeds  # noqa: E402


def kills_of(log: Path) -> tuple[list[str], list[dict]]:
    """The kill table the test printed, and its kills as records."""
    lines = log.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("kill ")), None)
    records = [json.loads(line.split(" ", 3)[3]) for line in lines
               if line.startswith("cluster chaos kills ")]
    if start is None or not records:
        return [], []
    return lines[start:start + 1 + len(records[-1])], records[-1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="7")
    ap.add_argument("--kills", type=int, default=6)
    ap.add_argument("--out", default=str(ROOT / "bench/chaos/results/cluster_chaos.txt"))
    args = ap.parse_args()
    logs = Path(args.out + ".d")
    logs.mkdir(parents=True, exist_ok=True)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    out = [f"$ PYTHONPATH=. python bench/chaos/cluster_chaos.py --seeds {args.seeds} --kills {args.kills}"
           f"   # {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, load average {load}", ""]
    stalls, failed = [], 0
    for seed in seeds(args.seeds):
        log = logs / f"seed{seed}.log"
        ok, text, took = run_one(seed, 1, 1, log, test="tests/test_cluster_chaos.py",
                                 summary="cluster chaos seed", CLUSTER_KILLS=str(args.kills))
        failed += not ok
        rows, kills = kills_of(log) if ok else ([], [])
        stalls += [k["stall_s"] for k in kills]
        out += [f"{'PASS' if ok else 'FAIL'} seed={seed} kills={args.kills} wall={took:.0f}s :: "
                f"{text}", *rows, ""]
        print("\n".join(out[-len(rows) - 2:]), flush=True)
        Path(args.out).write_text("\n".join(out) + "\n")
    if stalls:
        out.append(f"no-work seconds after a kill: median {statistics.median(stalls):.1f}, "
                   f"max {max(stalls):.1f}, over {len(stalls)} kills")
        print(out[-1])
        Path(args.out).write_text("\n".join(out) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
