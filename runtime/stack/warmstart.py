"""The `[warmstart]` stage of a run: supervised fine-tuning before the RL stage starts.

Consumes the run's config and its run directory. When `[warmstart] enabled`, trains on the
demonstrations (the `[warmstart] demos` file, or, when '', those `envs.demos.make_demos`
makes from the training split) into <run>/warmstart/ (`policy.warmstart`; stage.json: the
stage's seconds and CPU seconds, making demonstrations included; demonstrated.txt: their task
ids), logs one `warmstart.done` event, and returns the config with `[model] path` at
<run>/warmstart/model (and, with `rl_pool = "undemonstrated"`, `[envs] skip_ids` at those
ids), written into the run's resolved config too: every actor then starts from it as
version 0. A run whose warm start is done (sft.json there) is not trained again. It starts
no actor and touches no bus.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import msgspec
import structlog

from bus.demos_file import read_demos
from bus.errors import RunError
from bus.messages import Demo
from envs.taskfile import read_ids
from runtime.config import RunConfig, dump
from runtime.stack.rundir import RunDir

log = structlog.get_logger("runtime.stack.warmstart")
DEMONSTRATED = "demonstrated.txt"
"The ids of the tasks the warm start's demonstrations came from, one a line."


def demonstrations(cfg: RunConfig) -> list[Demo]:
    """The warm start's demonstrations: the `[warmstart] demos` file, else made from the
    run's training split (`envs.demos`, imported here: it loads the environments)."""
    if cfg.warmstart.demos:
        return read_demos(Path(cfg.warmstart.demos).expanduser())
    from envs.demos import make_demos

    made = anyio.run(lambda: make_demos(
        cfg.envs, cfg.executor.sandbox, seed=cfg.run.seed, judge=cfg.judge,
        domains=cfg.warmstart.domains, per_task=cfg.warmstart.per_task,
        limit=cfg.warmstart.tasks_per_domain, concurrency=cfg.executor.concurrency))
    return made.demos


def prepare(cfg: RunConfig, rd: RunDir) -> RunConfig:
    """`cfg` for the RL stage: unchanged without a warm start, else with `[model] path` at
    the warm start's model (trained first unless <run>/warmstart/sft.json says it was)."""
    if not cfg.warmstart.enabled:
        return cfg
    out = rd.path / "warmstart"
    if not (out / "sft.json").is_file():
        from policy import warmstart  # torch: the slim image's `whet` never imports it

        began, cpu0 = time.monotonic(), warmstart.cpu_seconds()
        demos = demonstrations(cfg)
        made_s, made_cpu = time.monotonic() - began, warmstart.cpu_seconds() - cpu0
        report = anyio.run(lambda: warmstart.train(
            demos, cfg.trainer, cfg.warmstart, out, cfg.generator.sampling.stop, cfg.run.seed,
            cfg.warmstart.demos or "demonstrations of the training split"))
        stage = {"demos": len(demos), "demos_wall_s": round(made_s, 2),
                 "demos_cpu_s": round(made_cpu, 2), "sft_wall_s": report.wall_s,
                 "sft_cpu_s": report.cpu_s, "cpu_s": round(warmstart.cpu_seconds() - cpu0, 2),
                 "wall_s": round(time.monotonic() - began, 2)}
        (out / "stage.json").write_text(json.dumps(stage, indent=1) + "\n")
        (out / DEMONSTRATED).write_text("".join(f"{t}\n" for t in sorted({d.task_id for d in demos})))
        log.info("warmstart.done", steps=report.steps, loss_first=report.loss[0],
                 loss_last=report.loss[-1], seconds=report.wall_s, cpu_s=report.cpu_s,
                 demos=report.demos_used, too_long=len(report.left_out_too_long),
                 stage_cpu_s=stage["cpu_s"], model=str(out / "model"))
    rl = msgspec.structs.replace(cfg, model=msgspec.structs.replace(
        cfg.model, path=str(out / "model")))
    if cfg.warmstart.rl_pool == "undemonstrated":
        rl = msgspec.structs.replace(rl, envs=msgspec.structs.replace(
            rl.envs, skip_ids=skip_file(cfg, out)))
    rd.config_file.write_bytes(dump(rl))
    return rl


def skip_file(cfg: RunConfig, out: Path) -> str:
    """The file of training task ids the RL stage leaves out: those the warm start
    demonstrated (<out>/demonstrated.txt), with any `[envs] skip_ids` the run already had."""
    demonstrated = out / DEMONSTRATED
    if not demonstrated.is_file():
        raise RunError(f"{demonstrated}: missing, so the RL stage cannot leave the demonstrated "
                       "tasks out ([warmstart] rl_pool = 'undemonstrated'); delete "
                       f"{out / 'sft.json'} to run the warm start again, or set rl_pool = 'all'")
    if not cfg.envs.skip_ids:
        return str(demonstrated)
    ids = sorted(set(read_ids(cfg.envs.skip_ids)) | set(read_ids(demonstrated)))
    both = out / "skipped.txt"
    both.write_text("".join(f"{t}\n" for t in ids))
    return str(both)
