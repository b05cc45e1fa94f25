"""The TRL side of bench/vs_trl/vs_trl.py: GRPOTrainer on whetstone's settings, task list and judge.

    python -m bench.vs_trl.vs_trl_grpo --config CONFIG.json --out-dir DIR [--threads N]

Consumes a run config (the settings both sides share; `[envs] train_ids` names the task
list); gates those tasks as the sampler does (gate reports from the disk cache), trains the
policy with TRL's `GRPOTrainer` on CPU for `training.max_steps` updates of `batch_size`
samples (each `learner.minibatches` optimizer steps, as whetstone's learner takes them),
`bench.vs_trl.trl_reward.JudgeReward` its only reward, the training stop strings
given to `generate` through `generation_kwargs`. Writes `DIR/trl.json` (settings, the tasks
trained on, per-step curve, training-only clocks, sandbox CPU) and the final policy as
`DIR/model/`. Its whole-run clocks are the bench's (`bench.vs_trl.clock`); the held-out
evaluation is the bench's too.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

from bench.vs_trl.clock import age, meter
from bench.vs_trl.task_list import digest, gated_train_tasks
from bench.vs_trl.trl_reward import JudgeReward, task_column
from bus.messages import Task
from envs.curriculum import MixDraw


def bf16_native() -> bool:
    """Whether this CPU computes in bf16 natively (AVX-512 BF16 or AMX); else bf16 is emulated
    and slower than fp32 (FACTS.md), so TRL trains in fp32."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def grpo_settings(cfg, *, bf16: bool, out_dir: str, seed: int | None = None) -> dict[str, Any]:
    """GRPOConfig arguments: each shared setting taken from the whetstone config; the
    trainer's seed is `seed` when given, else the run's."""
    tr, lc, gen = cfg.training, cfg.learner, cfg.generator.sampling
    micro = min(lc.micro_batch_size, tr.batch_size // lc.minibatches)
    if tr.batch_size % (micro * lc.minibatches) or tr.batch_size % tr.group_size:
        raise ValueError(f"batch_size {tr.batch_size} must be a multiple of micro_batch_size "
                         f"{micro} x minibatches {lc.minibatches} and of group_size "
                         f"{tr.group_size} for TRL")
    return dict(
        output_dir=out_dir, use_cpu=True, bf16=bf16, fp16=False,
        seed=cfg.run.seed if seed is None else seed,
        max_steps=tr.max_steps * lc.minibatches,
        # `minibatches` optimizer steps per batch of `batch_size` samples, `group_size` per
        # prompt, in micro-batches of `micro_batch_size`; TRL generates the whole batch in one
        # call, then steps through it (clipped against the generating policy when it takes
        # more than one step, as whetstone clips against the proximal policy).
        num_generations=tr.group_size, per_device_train_batch_size=micro,
        gradient_accumulation_steps=tr.batch_size // micro // lc.minibatches,
        generation_batch_size=tr.batch_size, num_iterations=1,
        # Sampling of training attempts; an answer ends at the generator's stop strings
        # (`generate` needs the tokenizer for those: `train` binds it).
        temperature=gen.temperature, top_p=gen.top_p, top_k=0,
        max_completion_length=gen.max_new_tokens,
        generation_kwargs={"stop_strings": list(gen.stop)} if gen.stop else None,
        # The objective: clipped surrogate, token mean over the whole batch (whetstone's
        # learner divides by the batch's tokens; TRL calls that "dapo"), group-relative
        # advantages scaled by the group's std when whetstone scales them, KL weight.
        loss_type="dapo", epsilon=lc.clip_eps, beta=lc.kl_coef,
        scale_rewards="group" if lc.scale_rewards else "none",
        # The optimizer: AdamW at a constant rate (the learner has no schedule), same clip.
        learning_rate=lc.lr, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=lc.weight_decay, max_grad_norm=lc.grad_clip,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        # Not shared settings, chosen to be kind to TRL on a CPU: no activation
        # recomputation (TRL's default; 135M fits), no shuffling (rows follow the mix).
        gradient_checkpointing=False, shuffle_dataset=False, dataloader_num_workers=0,
        logging_steps=1, report_to=[], save_strategy="no", disable_tqdm=True,
        log_completions=False,
    )


def draw_order(tasks: dict[str, list[Task]], mix: dict[str, float], rows: int,
               seed: int) -> list[tuple[str, Task]]:
    """`rows` (domain, task) draws: each a domain in the mix's ratio (`MixDraw`, as
    whetstone's sampler draws domains), then that domain's next task (its gated tasks shuffled
    once, cycled). Whetstone's sampler picks the task by its curriculum; TRL has none."""
    rng = random.Random(seed)
    weights = {d: w for d, w in mix.items() if w > 0 and tasks.get(d)}
    if not weights:
        raise ValueError(f"no gated training tasks in the mix's domains {sorted(mix)}")
    order = {d: rng.sample(tasks[d], len(tasks[d])) for d in weights}
    drawn = {d: 0 for d in weights}
    domains = MixDraw(weights)
    out = []
    for _ in range(rows):
        domain = domains.next()
        out.append((domain, order[domain][drawn[domain] % len(order[domain])]))
        drawn[domain] += 1
    return out


def mixed_rows(tasks: dict[str, list[Task]], mix: dict[str, float], rows: int,
               seed: int) -> list[dict[str, Any]]:
    """TRL's dataset rows, in `draw_order`."""
    return [{"prompt": [{"role": "user", "content": task.prompt}],
             "task_json": task_column(task), "task_id": task.task_id, "domain": domain}
            for domain, task in draw_order(tasks, mix, rows, seed)]


def stamp(reward: JudgeReward) -> dict[str, float]:
    """Wall seconds since this process started; CPU seconds of this process tree since it
    started plus its sandboxed jobs' (the reward's, cgroup-measured)."""
    return {"wall_s": round(age(), 1),
            "cpu_s": round(meter() + reward.sandbox_cpu_s, 1)}


LOGGED = ("loss", "grad_norm", "kl", "entropy", "reward", "reward_std", "frac_reward_zero_std",
          "completions/mean_length", "completions/clipped_ratio", "clip_ratio/region_mean")
"TRL's per-step metrics the curve keeps."


def with_signal(rewards: list[float | None], group_size: int) -> int:
    """Samples in groups whose rewards differ (TRL orders a group's completions together);
    a group of equal rewards has no advantage, which whetstone's learner leaves out."""
    groups = [rewards[i:i + group_size] for i in range(0, len(rewards), group_size)]
    return sum(len(g) for g in groups if len({r for r in g if r is not None}) > 1)


def make_curve_callback(reward: JudgeReward, samples_per_step: int, group_size: int,
                        stops: list[str], steps_per_update: int = 1):
    """A TrainerCallback recording the clocks when training begins and one curve point per
    update (a generated batch, `steps_per_update` optimizer steps; TRL's metrics those of
    its last step): clocks, samples (with signal), completions ended at a stop string, the
    judge's mean reward and pass rate, TRL's metrics."""
    from transformers import TrainerCallback

    class Curve(TrainerCallback):
        def __init__(self) -> None:
            self.points: list[dict[str, Any]] = []
            self.began: dict[str, float] = {}

        def on_train_begin(self, args, state, control, **kw):
            self.began = stamp(reward)

        def on_step_end(self, args, state, control, **kw):
            if state.global_step % steps_per_update:
                return  # the update's batch is not used up yet
            step = state.global_step // steps_per_update
            judged = reward.last
            rewards = [None if j.judgement.infra else j.judgement.reward for j in judged]
            scored = [r for r in rewards if r is not None]
            texts = [j.attempt.turns[-1].completion for j in judged]
            self.points.append({
                "step": step, "samples": step * samples_per_step,
                "with_signal": with_signal(rewards, group_size), **stamp(reward),
                "train_reward": round(sum(scored) / len(scored), 4) if scored else None,
                "pass_rate": round(sum(j.judgement.outcome == "pass" for j in judged)
                                   / max(len(judged), 1), 4),
                "dropped": sum(j.judgement.infra for j in judged),
                "ended_at_stop": sum(any(s in t for s in stops) for t in texts), "trl": {}})

        def on_log(self, args, state, control, logs=None, **kw):
            if (self.points and logs and not state.global_step % steps_per_update):
                # the update's last step's metrics; the summary at the end adds none
                self.points[-1]["trl"].update({k: round(v, 5) if isinstance(v, float) else v
                                               for k, v in logs.items() if k in LOGGED})

    return Curve()


def prompts_match(cfg, tokenizer, tasks: dict[str, list[Task]]) -> bool:
    """TRL's prompt tokens (its chat-template call) equal the generator's, for a few tasks."""
    from policy.chat import hf_chat_format

    chat = hf_chat_format(tokenizer)
    sample = [t for ts in tasks.values() for t in ts[:2]]
    return all(list(tokenizer.apply_chat_template(
        conversation=[[{"role": "user", "content": t.prompt}]], add_generation_prompt=True,
        tokenize=True, return_dict=True)["input_ids"][0]) == chat.prompt_ids(t.prompt)
        for t in sample)


def train(cfg, tasks: dict[str, list[Task]], out_dir: Path, seed: int) -> dict[str, Any]:
    """Train with TRL for `training.max_steps` updates; the record `trl.json` holds. `seed`
    seeds TRL's draw of rows and its trainer, nothing else: the task list and the held-out
    set stay the run's."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from policy.model import load_model, load_tokenizer
    from policy.precision import training_precision

    bf16 = training_precision(cfg.learner.precision, "cpu") == "bf16" and bf16_native()
    settings = grpo_settings(cfg, bf16=bf16, out_dir=str(out_dir / "trainer"), seed=seed)
    per_step = cfg.training.batch_size // cfg.training.group_size
    rows = mixed_rows(tasks, cfg.envs.mix, cfg.training.max_steps * per_step, seed)
    tokenizer = load_tokenizer(cfg.model)
    tokenizer.padding_side = "left"
    model = load_model(cfg.model, "float32")
    # TRL calls `generate` without the tokenizer, which stop strings need.
    model.generate = functools.partial(model.generate, tokenizer=tokenizer)
    with JudgeReward(cfg.judge, cfg.executor.sandbox, concurrency=cfg.executor.concurrency,
                     max_new_tokens=cfg.generator.sampling.max_new_tokens,
                     stops=tuple(cfg.generator.sampling.stop),
                     eos_id=tokenizer.eos_token_id) as reward:
        curve = make_curve_callback(reward, cfg.training.batch_size, cfg.training.group_size,
                                    list(cfg.generator.sampling.stop),
                                    cfg.learner.minibatches)
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=GRPOConfig(**settings),
                              train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                              callbacks=[curve])
        trainer.train()
        outcomes, sandbox_cpu = dict(reward.outcomes), reward.sandbox_cpu_s
    final = out_dir / "model"
    trainer.model.save_pretrained(final)
    tokenizer.save_pretrained(final)
    last = curve.points[-1] if curve.points else {**curve.began, "step": 0, "samples": 0}
    trained = sorted({r["task_id"] for r in rows})
    return {"settings": {k: v for k, v in settings.items() if k != "output_dir"},
            "precision": "bf16 autocast, fp32 weights" if bf16 else "fp32",
            "prompt_ids_match_generator": prompts_match(cfg, tokenizer, tasks),
            "tasks_drawn": {"count": len(trained), "sha256": digest(trained)},
            "updates": last["step"], "samples": {
                "consumed": last["samples"],
                "with_signal": sum(p["with_signal"] for p in curve.points)},
            "curve": curve.points,
            "training": {"wall_s": round(last["wall_s"] - curve.began["wall_s"], 1),
                         "cpu_s": round(last["cpu_s"] - curve.began["cpu_s"], 1)},
            "outcomes": outcomes, "reward_sandbox_cpu_s": round(sandbox_cpu, 1)}


def main(argv: list[str] | None = None) -> int:
    import anyio
    import torch

    from runtime import log as log_mod
    from runtime.config import load

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="the run config both sides share (JSON or TOML)")
    p.add_argument("--out-dir", required=True, help="where trl.json and model/ go")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads")
    p.add_argument("--seed", type=int, default=None,
                   help="TRL's own seed (its draw and trainer; default the run's)")
    args = p.parse_args(argv)
    log_mod.configure(kind="bench", instance="vs_trl_grpo", level="warning")
    torch.set_num_threads(args.threads)
    cfg = load(args.config)
    out = Path(args.out_dir)
    tasks, gate_cpu = anyio.run(gated_train_tasks, cfg)
    ids = sorted(t.task_id for ts in tasks.values() for t in ts)
    seed = cfg.run.seed if args.seed is None else args.seed
    record = {"tasks": {"count": len(ids), "sha256": digest(ids)}, "gate_sandbox_cpu_s": gate_cpu,
              "threads": args.threads, "seed": seed, **train(cfg, tasks, out, seed)}
    record["sandbox_cpu_s"] = round(gate_cpu + record["reward_sandbox_cpu_s"], 1)
    (out / "trl.json").write_text(json.dumps(record, indent=2))
    print(f"TRL: {record['updates']} updates, {record['samples']} samples, training "
          f"{record['training']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
