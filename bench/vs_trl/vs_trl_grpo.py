"""The TRL side of bench/vs_trl/vs_trl.py: GRPOTrainer with whetstone's settings, tasks and judge.

Consumes a run config (the settings both systems share), the gated training tasks by
domain and a CPU budget; trains SmolLM2 with TRL's `GRPOTrainer` on CPU in
this process, with `bench.vs_trl.trl_reward.JudgeReward` as its only reward function; produces
the curve (per optimizer step: CPU and wall seconds, samples, the judge's mean reward and
pass rate, TRL's own logged metrics) and the final policy saved as a model folder.

CPU seconds are measured as `whet up` measures its stack (`runtime.stack.progress.
stack_cpu_seconds`: this process, its reaped children and its live children), from just
before the model loads: TRL's clocks leave out the imports and the gating of its tasks,
which whetstone's include (kind to TRL). Jobs inside sandboxes are counted by their
cgroups, on neither side's meter; the reward's are reported apart (`sandbox_cpu_s`).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

from bus.messages import Task
from bench.vs_trl.trl_reward import JudgeReward, task_column
from runtime.stack.progress import stack_cpu_seconds


def children_of(pid: int) -> list[int]:
    """Live child pids of `pid` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(stat[1]) == pid:
                out.append(int(entry.name))
    return out


def cpu_seconds() -> float:
    """CPU seconds of this process and its children since it started (the stack's meter)."""
    return stack_cpu_seconds(children_of(os.getpid()))


def bf16_native() -> bool:
    """Whether this CPU computes in bf16 natively (AVX-512 BF16 or AMX); else bf16 is emulated
    and slower than fp32 (FACTS.md), so TRL trains in fp32."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def grpo_settings(cfg, *, max_steps: int, bf16: bool, out_dir: str) -> dict[str, Any]:
    """GRPOConfig arguments: each shared setting taken from the whetstone config."""
    tr, lc, gen = cfg.training, cfg.learner, cfg.generator.sampling
    micro = min(lc.micro_batch_size, tr.batch_size)
    if tr.batch_size % micro or tr.batch_size % tr.group_size:
        raise ValueError(f"batch_size {tr.batch_size} must be a multiple of micro_batch_size "
                         f"{micro} and group_size {tr.group_size} for TRL")
    if lc.minibatches != 1:
        raise ValueError("the bench maps one optimizer step per batch only (learner.minibatches = 1)")
    return dict(
        output_dir=out_dir, use_cpu=True, bf16=bf16, fp16=False, seed=cfg.run.seed,
        max_steps=max_steps,
        # One optimizer step per batch of `batch_size` samples, `group_size` per prompt, in
        # micro-batches of `micro_batch_size`; TRL generates the whole batch in one call.
        num_generations=tr.group_size, per_device_train_batch_size=micro,
        gradient_accumulation_steps=tr.batch_size // micro,
        generation_batch_size=tr.batch_size, num_iterations=1,
        # Sampling of training attempts.
        temperature=gen.temperature, top_p=gen.top_p, top_k=0,
        max_completion_length=gen.max_new_tokens,
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


def mixed_rows(tasks: dict[str, list[Task]], mix: dict[str, float], rows: int,
               seed: int) -> list[dict[str, Any]]:
    """`rows` dataset rows: each a domain drawn by the mix weights, then that domain's next task
    (its gated tasks shuffled once, cycled). Whetstone's sampler draws by the same weights
    but picks tasks by its curriculum; TRL has none."""
    rng = random.Random(seed)
    weights = {d: w for d, w in mix.items() if w > 0 and tasks.get(d)}
    if not weights:
        raise ValueError(f"no gated training tasks in the mix's domains {sorted(mix)}")
    order = {d: rng.sample(tasks[d], len(tasks[d])) for d in weights}
    drawn = {d: 0 for d in weights}
    out = []
    for _ in range(rows):
        domain = rng.choices(list(weights), list(weights.values()))[0]
        task = order[domain][drawn[domain] % len(order[domain])]
        drawn[domain] += 1
        out.append({"prompt": [{"role": "user", "content": task.prompt}],
                    "task_json": task_column(task), "domain": domain})
    return out


def make_curve_callback(reward: JudgeReward, samples_per_step: int, budget_s: float,
                        origin: tuple[float, float]):
    """A TrainerCallback recording one curve point per optimizer step (clocks from `origin`,
    (CPU, monotonic) seconds); it stops training before the next step would take the CPU
    seconds past `budget_s`."""
    from transformers import TrainerCallback

    cpu_now = lambda: cpu_seconds() - origin[0]  # noqa: E731
    wall_now = lambda: time.monotonic() - origin[1]  # noqa: E731

    class Curve(TrainerCallback):
        def __init__(self) -> None:
            self.points: list[dict[str, Any]] = []
            self.began_cpu = self.began_wall = 0.0

        def on_train_begin(self, args, state, control, **kw):
            self.began_cpu, self.began_wall = cpu_now(), wall_now()

        def on_step_end(self, args, state, control, **kw):
            judged = reward.last
            scored = [j.judgement.reward for j in judged if not j.judgement.infra]
            cpu = cpu_now()
            self.points.append({
                "step": state.global_step, "samples": state.global_step * samples_per_step,
                "cpu_s": round(cpu, 1), "wall_s": round(wall_now(), 1),
                "train_reward": round(sum(scored) / len(scored), 4) if scored else None,
                "pass_rate": round(sum(j.judgement.outcome == "pass" for j in judged)
                                   / max(len(judged), 1), 4),
                "dropped": sum(j.judgement.infra for j in judged),
                "sandbox_cpu_s": round(reward.sandbox_cpu_s, 1)})
            before = self.points[-2]["cpu_s"] if len(self.points) > 1 else self.began_cpu
            if cpu + (cpu - before) > budget_s:
                control.should_training_stop = True
            return control

        def on_log(self, args, state, control, logs=None, **kw):
            if self.points and logs:
                self.points[-1]["trl"] = {k: round(v, 5) if isinstance(v, float) else v
                                          for k, v in logs.items()}

    return Curve()


def train(cfg, tasks: dict[str, list[Task]], *, max_steps: int, budget_s: float,
          out_dir: Path) -> dict[str, Any]:
    """Train with TRL; returns the curve, totals and the final model folder."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from policy.model import load_model, load_tokenizer

    origin = (cpu_seconds(), time.monotonic())
    from policy.precision import training_precision

    bf16 = training_precision(cfg.learner.precision, "cpu") == "bf16" and bf16_native()
    settings = grpo_settings(cfg, max_steps=max_steps, bf16=bf16, out_dir=str(out_dir / "trl"))
    per_step = cfg.training.batch_size // cfg.training.group_size
    rows = mixed_rows(tasks, cfg.envs.mix, max_steps * per_step, cfg.run.seed)
    tokenizer = load_tokenizer(cfg.model)
    tokenizer.padding_side = "left"
    model = load_model(cfg.model, "float32")
    with JudgeReward(cfg.judge, cfg.executor.sandbox,
                     concurrency=cfg.executor.concurrency) as reward:
        curve = make_curve_callback(reward, cfg.training.batch_size, budget_s, origin)
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=GRPOConfig(**settings),
                              train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                              callbacks=[curve])
        trainer.train()
        outcomes = dict(reward.outcomes)
        sandbox_cpu = reward.sandbox_cpu_s
    final = out_dir / "trl-final"
    trainer.model.save_pretrained(final)
    tokenizer.save_pretrained(final)
    last = curve.points[-1] if curve.points else {}
    return {"settings": {k: v for k, v in settings.items() if k != "output_dir"},
            "precision": "bf16 autocast, fp32 weights" if bf16 else "fp32",
            "setup_cpu_s": round(curve.began_cpu, 1), "setup_wall_s": round(curve.began_wall, 1),
            "curve": curve.points, "steps": last.get("step", 0),
            "samples": last.get("samples", 0), "cpu_s": last.get("cpu_s"),
            "wall_s": last.get("wall_s"), "train_wall_s": round(
                (last.get("wall_s") or 0) - curve.began_wall, 1),
            "outcomes": outcomes, "sandbox_cpu_s": round(sandbox_cpu, 1),
            "final_model": str(final)}
