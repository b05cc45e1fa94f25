"""Benchmark: the judge's cost per verdict against a baseline commit's, in one run.

Consumes a git ref (the baseline) and this checkout; produces a JSON file with, for each
side and round, wall seconds and CPU seconds per verdict (the judging process's own, plus
every sandbox job's CPU as the backend accounted it from the job's cgroup), and every
verdict (task, outcome, reward), for the 164 HumanEval canonical solutions judged through
the same sandbox backend. The baseline is checked out into a temporary git worktree; each
side runs in a child process from its own checkout, alternating order by round (the machine
is shared and noisy: the ratios are the result). Target (issue 20): at most 1.2x.

    python bench/judge/judge_cost.py --baseline 3800652 [--env humaneval] [--tasks 164] [--rounds 2]
        [--backend local] [--out FILE]

It does NOT change either checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD = r"""
import json, resource, sys, time
import anyio
import msgspec
from bus.messages import Attempt, Turn
from envs.humaneval import import_file
from judging.config import JudgeConfig
from judging.offline import judge_all
from sandbox import open_backend
from sandbox.config import SandboxConfig

args = json.loads(sys.argv[1])
if args["env"] == "humaneval":
    tasks = import_file().tasks[: args["tasks"]]
else:
    from envs.registry import first_tasks
    tasks = [t for t in first_tasks([args["env"]], args["tasks"])[args["env"]] if t.verifier.reference]
def attempt(t):
    turn = Turn(prompt_ids=b"", completion_ids=b"", logprobs=b"", completion=t.verifier.reference,
                policy_version=0)
    return Attempt(attempt_id=t.task_id + ".0", group_id=t.task_id, index=0, group_size=1, task=t,
                   turns=[turn], policy_version=0, purpose="eval")

async def main():
    backend = await open_backend(SandboxConfig(backend=args["backend"]), slots=args["concurrency"])
    try:
        start = time.monotonic()
        judged = await judge_all([attempt(t) for t in tasks], backend, JudgeConfig(),
                                 concurrency=args["concurrency"])
        wall = time.monotonic() - start
    finally:
        await backend.aclose()
    return judged, wall

judged, wall = anyio.run(main)
me = resource.getrusage(resource.RUSAGE_SELF)
jobs = sum(j.result.cpu_s for j in judged if j.result is not None)
print(json.dumps({"wall_s": wall, "cpu_s": me.ru_utime + me.ru_stime + jobs, "job_cpu_s": jobs,
                  "verdicts": [[j.attempt.task.task_id, j.judgement.outcome, j.judgement.reward,
                                j.judgement.cause, j.retries] for j in judged]}))
"""


def checkout(ref: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(where), ref],
                   check=True)
    return where


def side(folder: Path, args: argparse.Namespace) -> dict:
    """One judging pass from `folder`'s code, in a child process of its own."""
    env = {**os.environ, "PYTHONPATH": str(folder), "PYTHONDONTWRITEBYTECODE": "1"}
    spec = json.dumps({"tasks": args.tasks, "backend": args.backend, "concurrency": args.concurrency,
                       "env": args.env})
    done = subprocess.run([sys.executable, "-c", CHILD, spec], cwd=folder, env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"judge_cost: the pass in {folder} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    n = len(runs[0]["verdicts"])
    full = [sum(1 for v in r["verdicts"] if v[1] == "pass" and v[2] == 1.0) for r in runs]
    return {"verdicts": n, "full_reward": full,
            "wall_s_per_verdict": statistics.median(r["wall_s"] / n for r in runs),
            "cpu_s_per_verdict": statistics.median(r["cpu_s"] / n for r in runs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="git ref of the judge to compare with")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=164)
    parser.add_argument("--backend", default="local")
    parser.add_argument("--env", default="humaneval", help="humaneval, or a shipped environment's name")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/judge/results/cost.json")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"baseline": [], "current": []}
    with tempfile.TemporaryDirectory(prefix="whet-judge-cost-") as tmp:
        base = checkout(args.baseline, Path(tmp) / "baseline")
        try:
            for r in range(args.rounds):
                order = [("baseline", base), ("current", ROOT)]
                for name, folder in order if r % 2 == 0 else order[::-1]:
                    runs[name].append(side(folder, args))
                    print(f"round {r} {name}: {runs[name][-1]['wall_s']:.1f} s wall, "
                          f"{runs[name][-1]['cpu_s']:.1f} CPU-s", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    result = {"baseline": args.baseline, "current": head, "backend": args.backend, "env": args.env,
              "rounds": args.rounds,
              "when": time.strftime("%Y-%m-%d %H:%M"), **{k: summary(v) for k, v in runs.items()}}
    result["cpu_ratio"] = result["current"]["cpu_s_per_verdict"] / result["baseline"]["cpu_s_per_verdict"]
    result["wall_ratio"] = result["current"]["wall_s_per_verdict"] / result["baseline"]["wall_s_per_verdict"]
    result["runs"] = runs
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
