"""One held-out evaluation of bench/vs_trl/vs_trl.py, in a process of its own so its clocks count alike.

    python -m bench.vs_trl.vs_trl_eval --config CONFIG.json --label L --out L.json [--model DIR]

Consumes a run config and a model (a folder another trainer saved, or without `--model`
the configured initial weights); chooses the evaluator's held-out tasks (`heldout_tasks`:
`envs.intake.gated_heldout`, which the bench also calls before either side runs, so every
gate report comes from the disk cache) and runs the one evaluation function every policy
of the bench goes through (`evaluate`: greedy attempts on the torch engine, judged on
`[executor.sandbox]`). Writes the held-out task ids by domain, the evaluation point and
each task's [reward, outcome]. It trains nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


async def heldout_tasks(cfg) -> tuple[dict[str, list], float]:
    """The evaluator's held-out tasks by domain, and the CPU seconds their sandboxed gate
    runs took (0 when every report came from the cache)."""
    from runtime import evaluate

    spent = [0.0]

    def on_cpu(seconds: float) -> None:
        spent[0] = seconds

    chosen = await evaluate.heldout_tasks(cfg, on_cpu)
    return dict(sorted(chosen.items())), spent[0]


async def held_out(cfg, model) -> dict:
    """The held-out tasks, the model's evaluation point and each task's (reward, outcome)."""
    import msgspec

    from runtime.evaluate import evaluate

    chosen, gate_cpu = await heldout_tasks(cfg)
    tasks = [t for domain in chosen for t in chosen[domain]]
    point, per_task = await evaluate(cfg, model, tasks, "vs-trl")
    return {"tasks": {d: [t.task_id for t in ts] for d, ts in chosen.items()},
            "gate_sandbox_cpu_s": round(gate_cpu, 1), "point": msgspec.to_builtins(point),
            "per_task": {task: list(result) for task, result in sorted(per_task.items())}}


def main(argv: list[str] | None = None) -> int:
    import anyio
    import torch

    from policy.config import ModelConfig
    from runtime import log as log_mod
    from runtime.config import load

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="the run config (JSON or TOML)")
    p.add_argument("--model", default="", help="a model folder (default: the configured model)")
    p.add_argument("--label", required=True, help="the policy's name in the bench")
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads")
    args = p.parse_args(argv)
    log_mod.configure(kind="bench", instance="vs_trl_eval", level="warning")
    torch.set_num_threads(args.threads)
    cfg = load(args.config)
    model = ModelConfig(path=args.model, max_context=cfg.model.max_context) if args.model else cfg.model
    result = {"label": args.label, "model": args.model or cfg.model.name,
              **anyio.run(held_out, cfg, model)}
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"{args.label}: held-out reward {result['point']['reward']}, pass rate "
          f"{result['point']['overall']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
