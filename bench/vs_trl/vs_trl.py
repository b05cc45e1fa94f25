"""Benchmark: whetstone side by side with TRL's GRPOTrainer, on the same CPU budget.

Both systems get one config's shared settings (default configs/default.toml, with the
overrides below): the model, the gated training tasks of the mix's domains, whetstone's
judge as the reward (for TRL through `bench.vs_trl.trl_reward`), group size, batch, learning
rate, sampling, token limits, and a CPU budget.

1. TRL trains in this process (`bench/vs_trl/vs_trl_grpo.py`) until `--max-steps` or the budget.
2. whetstone runs `whet up` on the same settings in a child process, stopped by SIGINT
   once its stack's CPU seconds would pass the budget (`bench/vs_trl/vs_trl_whetstone.py`), or
   `--whetstone-run DIR` reads a finished run (DIR holds metrics/train.csv and
   metrics/eval.csv, or the two CSVs, and checkpoints/ when the run kept them).
3. The initial weights (both sides' start), TRL's final policy and whetstone's final
   checkpoint are evaluated one after another on the evaluator's held-out tasks
   (`envs.intake.gated_heldout`) with the evaluator's path (`runtime.evaluate`).

It writes both curves (CPU seconds, samples, training reward), the held-out pass rate and
mean reward at the start and end (and whetstone's at every version its evaluator
evaluated during the run), samples per second, and the goal's ratios
(`bench/vs_trl/vs_trl_report.py`): does whetstone reach TRL's final held-out reward in at most
0.7x TRL's CPU seconds, with at least 1.3x its samples per second?

    python bench/vs_trl/vs_trl.py [--budget-s 3600] [--whetstone-run runs/<id>] [--out bench/vs_trl/results/vs_trl.json]
    python bench/vs_trl/vs_trl.py --label smoke --budget-s 600 --max-steps 2 --eval-every 2 \\
        --batch 8 --group-size 4 --max-new-tokens 48 --eval-max-new-tokens 64 \\
        --tasks-per-env 20 --heldout-per-domain 2 --out /tmp/vs_trl_smoke.json

It reports what it measured; where TRL wins, the report says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.vs_trl import vs_trl_grpo as grpo  # noqa: E402
from bench.learning.learning_run import paired  # noqa: E402
from bench.vs_trl.vs_trl_report import NOTES, findings, goal  # noqa: E402
from bench.vs_trl.vs_trl_whetstone import export_final, run_whetstone, whetstone_side  # noqa: E402


def effective_config(args: argparse.Namespace):
    """The run config both systems use: the file, then the command line's overrides."""
    import msgspec

    from runtime.config import load

    source = Path(args.config) if args.config else None
    if source is None and args.whetstone_run:
        resolved = Path(args.whetstone_run) / "config.resolved.json"
        source = resolved if resolved.exists() else None
    cfg = load(source or ROOT / "configs" / "default.toml")
    rep = msgspec.structs.replace
    tr, lc, gen = cfg.training, cfg.learner, cfg.generator
    tr = rep(tr, group_size=args.group_size or tr.group_size, batch_size=args.batch or tr.batch_size,
             max_steps=args.max_steps or tr.max_steps)
    lc = rep(lc, lr=args.lr or lc.lr, micro_batch_size=min(lc.micro_batch_size, tr.batch_size))
    sampling = rep(gen.sampling, temperature=gen.sampling.temperature if args.temperature is None
                   else args.temperature, max_new_tokens=args.max_new_tokens or gen.sampling.max_new_tokens)
    greedy = rep(gen.eval_sampling, max_new_tokens=args.eval_max_new_tokens
                 or gen.eval_sampling.max_new_tokens)
    ev = rep(cfg.evaluator, tasks_per_domain=args.heldout_per_domain or cfg.evaluator.tasks_per_domain,
             every_versions=args.eval_every or cfg.evaluator.every_versions)
    use = {name: entry if entry.all_heldout or not args.tasks_per_env
           else rep(entry, count=args.tasks_per_env) for name, entry in cfg.envs.use.items()}
    cfg = rep(cfg, training=tr, learner=lc, evaluator=ev, envs=rep(cfg.envs, use=use),
              generator=rep(gen, sampling=sampling, eval_sampling=greedy))
    return cfg, str(source or "configs/default.toml")


def shared_settings(cfg) -> dict:
    """The settings the comparison holds equal, as whetstone names them."""
    return {"model": cfg.model.path or cfg.model.name, "group_size": cfg.training.group_size,
            "batch_size": cfg.training.batch_size, "lr": cfg.learner.lr,
            "temperature": cfg.generator.sampling.temperature, "top_p": cfg.generator.sampling.top_p,
            "max_new_tokens": cfg.generator.sampling.max_new_tokens,
            "eval_max_new_tokens": cfg.generator.eval_sampling.max_new_tokens,
            "eval_every": cfg.evaluator.every_versions,
            "clip_eps": cfg.learner.clip_eps, "kl_coef": cfg.learner.kl_coef,
            "scale_rewards": cfg.learner.scale_rewards, "grad_clip": cfg.learner.grad_clip,
            "mix": cfg.envs.mix, "domains": {n: e.count for n, e in cfg.envs.use.items()},
            "heldout_per_domain": cfg.evaluator.tasks_per_domain, "max_steps": cfg.training.max_steps,
            "seed": cfg.run.seed, "judge": json.loads(_json(cfg.judge))}


def settings_differ(cfg, run_dir: Path) -> dict | str:
    """Shared settings whose values differ between TRL's side and the whetstone run read:
    {name: [TRL's, the run's]}."""
    from runtime.config import load

    resolved = run_dir / "config.resolved.json"
    if not resolved.exists():
        return f"unknown: {run_dir} keeps no config.resolved.json"
    ours, theirs = shared_settings(cfg), shared_settings(load(resolved))
    return {k: [ours[k], theirs[k]] for k in ours if ours[k] != theirs[k]}


def _json(value) -> str:
    import msgspec

    return msgspec.json.encode(value).decode()


async def gated_train_tasks(cfg) -> dict[str, list]:
    """The training split of the mix's domains, gated as the sampler gates it: in the same
    order, stopping a domain at `[sampler] pool_per_domain` accepted tasks, with the gate
    reports kept on this machine's disk."""
    from collections import Counter

    from envs.intake import KvGateCache, collect, gate_many, while_short

    found, _ = collect(cfg.envs, seed=cfg.run.seed, split="train")
    trained = {d for d, w in cfg.envs.mix.items() if w > 0}
    target = cfg.sampler.pool_per_domain
    accepted: dict[str, list] = {}
    pooled = Counter[str]()

    async def on_gated(task, report) -> None:
        if report.accepted:
            pooled[task.domain] += 1
            accepted.setdefault(task.domain, []).append(task)

    mine = [(task, gates) for task, gates in found if task.domain in trained]
    await gate_many(while_short(mine, pooled, lambda domain: target), cfg.envs.gates.sandbox,
                    on_gated, concurrency=cfg.envs.gates.concurrency,
                    cache=KvGateCache(None, cfg.envs.gates.keep_reports))
    return {d: sorted(ts, key=lambda t: t.task_id) for d, ts in accepted.items()}


async def heldout_rounds(cfg, models: dict) -> dict:
    """Each model (label: ModelConfig) on the evaluator's held-out tasks, one after another on
    the same path: its evaluation point, each task's (reward, outcome) and the CPU it took."""
    import msgspec

    from runtime.evaluate import evaluate
    from envs.intake import KvGateCache, gated_heldout

    chosen = await gated_heldout(cfg.envs, seed=cfg.run.seed, per_domain=cfg.evaluator.tasks_per_domain,
                                 domain_tasks=cfg.evaluator.domain_tasks,
                                 cache=KvGateCache(None, cfg.envs.gates.keep_reports))
    tasks = [t for domain in sorted(chosen) for t in chosen[domain]]
    out: dict = {"tasks": {d: [t.task_id for t in ts] for d, ts in sorted(chosen.items())},
                 "points": {}, "per_task": {}, "cpu_s": {}}
    for label, model in models.items():
        began = grpo.cpu_seconds()
        point, per_task = await evaluate(cfg, model, tasks, f"vs-trl-{label}")
        out["points"][label] = msgspec.to_builtins(point)
        out["per_task"][label] = per_task
        out["cpu_s"][label] = round(grpo.cpu_seconds() - began, 1)
    return out


def prompts_match(cfg, tasks: dict[str, list]) -> bool:
    """TRL's prompt tokens (its chat-template call) equal the generator's, for a few tasks."""
    from policy.chat import hf_chat_format
    from policy.model import load_tokenizer

    tok = load_tokenizer(cfg.model)
    chat = hf_chat_format(tok)
    sample = [t for ts in tasks.values() for t in ts[:2]]
    return all(list(tok.apply_chat_template(conversation=[[{"role": "user", "content": t.prompt}]],
                                            add_generation_prompt=True, tokenize=True,
                                            return_dict=True)["input_ids"][0])
               == chat.prompt_ids(t.prompt) for t in sample)


def train_trl(cfg, args: argparse.Namespace, work: Path) -> dict:
    """Phase 1: gate the training tasks, then train with TRL within the budget."""
    import anyio

    began = grpo.cpu_seconds(), time.monotonic()
    tasks = anyio.run(gated_train_tasks, cfg)
    intake = {"cpu_s": round(grpo.cpu_seconds() - began[0], 1),
              "wall_s": round(time.monotonic() - began[1], 1),
              "tasks": {d: len(ts) for d, ts in tasks.items()}}
    print(f"gated training tasks: {intake}", flush=True)
    trl = grpo.train(cfg, tasks, max_steps=cfg.training.max_steps, budget_s=args.budget_s, out_dir=work)
    trl["intake"] = intake
    trl["prompt_ids_match_generator"] = prompts_match(cfg, tasks)
    print(f"TRL: {trl['steps']} steps, {trl['samples']} samples, {trl['cpu_s']} cpu s, "
          f"{trl['wall_s']} wall s ({trl['precision']})", flush=True)
    return trl


def evaluate_policies(cfg, trl: dict, whet: dict, run_dir: Path, work: Path) -> dict:
    """Phase 3: the initial weights, TRL's final policy and whetstone's final checkpoint (when
    the run kept one) on the held-out tasks, one after another on the same path; returns the
    tasks."""
    import anyio

    from policy.config import ModelConfig

    context = cfg.model.max_context
    models = {"initial": cfg.model, "trl_final": ModelConfig(path=trl["final_model"], max_context=context)}
    exported = export_final(cfg, run_dir, work / "whetstone-final")
    if exported:
        models["whetstone_final"] = ModelConfig(path=str(exported[1]), max_context=context)
    rounds = anyio.run(heldout_rounds, cfg, models)
    points, per_task = rounds["points"], rounds["per_task"]
    trl["heldout"] = {"initial": points["initial"], "final": points["trl_final"],
                      "paired": paired(per_task["initial"], per_task["trl_final"]),
                      "eval_cpu_s": rounds["cpu_s"]}
    if exported:
        version = exported[0]
        cpu = next((p["cpu_s"] for p in whet["curve"] if p["policy_version"] == version), None)
        whet["final_eval"] = {**points["whetstone_final"], "version": version, "cpu_s_reached": cpu,
                              "paired_with_initial": paired(per_task["initial"], per_task["whetstone_final"]),
                              "paired_with_trl_final": paired(per_task["trl_final"],
                                                              per_task["whetstone_final"])}
    print(f"held-out reward: initial {points['initial']['reward']}, TRL final "
          f"{points['trl_final']['reward']}, whetstone final "
          f"{points.get('whetstone_final', {}).get('reward')}", flush=True)
    return rounds["tasks"]


def main(args: argparse.Namespace) -> int:
    import torch

    from runtime import log as log_mod

    log_mod.configure(kind="bench", instance="vs_trl", level="warning")
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    cfg, source = effective_config(args)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="vs-trl-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.trl_from:  # a finished TRL phase (its trl.json and final model), not run again
        trl = json.loads((Path(args.trl_from) / "trl.json").read_text())
    else:
        trl = train_trl(cfg, args, work)
        (work / "trl.json").write_text(json.dumps(trl, indent=2))
    run_dir = Path(args.whetstone_run) if args.whetstone_run else run_whetstone(cfg, args.budget_s, work)
    whet = whetstone_side(run_dir.resolve())
    whet["settings_differ"] = settings_differ(cfg, run_dir)
    tasks = evaluate_policies(cfg, trl, whet, run_dir, work)
    report = {"label": args.label, "command": " ".join(sys.argv), "config": source,
              "machine": {"cpus": os.cpu_count(), "threads": args.threads,
                          "bf16_native": grpo.bf16_native()},
              "budget_cpu_s": args.budget_s, "shared_settings": shared_settings(cfg),
              "heldout_tasks": tasks, "trl": trl, "whetstone": whet, "goal": goal(trl, whet),
              "notes": NOTES}
    report["findings"] = findings(report["goal"], trl, whet)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps({"goal": report["goal"], "findings": report["findings"]}, indent=2))
    print(f"wrote {out}")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="", help="whetstone config (default: the run's resolved "
                   "config with --whetstone-run, else configs/default.toml)")
    p.add_argument("--whetstone-run", default="", help="read this finished run instead of running whet up")
    p.add_argument("--budget-s", type=float, default=3600.0, help="CPU seconds each system may use")
    p.add_argument("--max-steps", type=int, default=0, help="optimizer steps (default: training.max_steps)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads for TRL")
    p.add_argument("--group-size", type=int, default=0)
    p.add_argument("--batch", type=int, default=0, help="samples per optimizer step")
    p.add_argument("--lr", type=float, default=0.0)
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--max-new-tokens", type=int, default=0, help="training completions' token limit")
    p.add_argument("--eval-max-new-tokens", type=int, default=0, help="held-out completions' token limit")
    p.add_argument("--tasks-per-env", type=int, default=0, help="tasks each generated environment makes")
    p.add_argument("--heldout-per-domain", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=0, help="whetstone's held-out rounds every N versions")
    p.add_argument("--label", default="", help="e.g. 'smoke'; written into the report")
    p.add_argument("--trl-from", default="", help="reuse the TRL phase kept in this work dir "
                   "(trl.json and the final model) instead of training again")
    p.add_argument("--work-dir", default="", help="where TRL's final model is saved (default: a temp dir)")
    p.add_argument("--out", default=str(ROOT / "bench" / "vs_trl" / "results" / "vs_trl.json"))
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main(parse()))
