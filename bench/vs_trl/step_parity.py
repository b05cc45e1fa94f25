"""Benchmark: is one whetstone learner step TRL's step, on the same real batch?

    PYTHONPATH=. python bench/vs_trl/step_parity.py SEED_DIR [--precision bf16] --out FILE

Consumes a seed folder of `vs_trl.py` (`--work-dir`/seed-<n>: config.json and the whetstone
run's store and logs under runs/latest); rebuilds the batch its learner's first step took
(the version-0 weights; advantages and divisor as the learner makes them); takes one step on
it with whetstone's learner (`policy.ranks.RankGroup`: DeepSpeed, the run's precision unless
`--precision`; TRL's objective: one optimizer step per batch, the "batch_tokens" divisor,
whatever the run had) and with TRL's objective written out by hand on a plain transformers model
(float32, torch AdamW, the same clip): once as TRL has it, once times whetstone's off-policy
weight min(pi_learner/pi_behav, is_clip), each in float32 and under bf16 autocast (TRL's
`bf16=True` on a CPU). Produces JSON: the gradient norms (whetstone's also as its run logged
it) and how each step's weight change (whetstone's: its float32 master weights) agrees with
the float32 step of whetstone's objective (cosine, sign agreement). It changes no run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def logged_step(run_dir: Path, step: int) -> dict:
    """The learner's `learner.step_completed` fields of `step`."""
    from bench.vs_trl.vs_trl_whetstone import events

    return next(e["fields"] for e in events(run_dir, "learner")
                if e["event"] == "learner.step_completed" and e["fields"]["step"] == step)


def run_batch(run_dir: Path, cfg, step: int):
    """The learner's `Assembled` batch of the run's `step`: the groups it consumed then (from
    its step event), rebuilt from the run's store as the learner built them."""
    from bench.learning.rejudge_rounds import stored_verdicts
    from policy.batch import assemble
    from policy.groups import Group

    fields = logged_step(run_dir, step)
    ids = set(fields["trained"]) | {i for left in fields["left_out"].values() for i in left}
    groups: dict[str, Group] = {}
    for v in stored_verdicts(run_dir / "nats" / "jetstream"):
        if v.verdict_id in ids:
            g = groups.setdefault(v.attempt.group_id, Group(v.attempt.group_id,
                                                            v.attempt.group_size, 0.0))
            g.members[v.verdict_id] = (v, None)
    return assemble([groups[k] for k in sorted(groups)], version=step - 1,
                    max_staleness=cfg.training.max_staleness, scale=cfg.learner.scale_rewards,
                    max_len=cfg.model.max_context,
                    keep_no_signal=cfg.training.zero_signal == "keep")


def snapshot(module) -> dict:
    """Every weight in float32: DeepSpeed's float32 master copy where it keeps one (a bf16
    module), else the module's own; tied weights once."""
    from deepspeed.utils import safe_get_full_fp32_param

    out = {}
    for name, param in module.named_parameters():
        master = safe_get_full_fp32_param(param)
        out[name] = (param if master is None else master).detach().float().clone()
    return out


def changes(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in before}


async def whetstone_step(cfg, batch) -> tuple[dict, dict, dict]:
    """Weights before whetstone's step, their change, and the step's figures."""
    from policy.ranks import RankGroup

    with tempfile.TemporaryDirectory() as d:
        ranks = RankGroup(cfg.trainer, Path(d) / "ckpt")
        await ranks.start()
        try:
            before = snapshot(ranks.trainer.engine.module)
            stats = await ranks.call("train", batch.samples, batch.batch_tokens)
            after = snapshot(ranks.trainer.engine.module)
        finally:
            await ranks.close()
    return before, changes(before, after), stats


def reference_step(cfg, batch, weighted: bool, autocast: bool) -> tuple[dict, dict, float]:
    """Weights before TRL's objective by hand ("dapo": the batch's token sum over every
    completion token; ratio 1 on-policy) and their change after one step: float32 weights,
    the forward in float32 or under bf16 autocast (TRL's `bf16=True` on a CPU); times
    whetstone's off-policy weight when `weighted`."""
    import contextlib

    import torch

    from policy.model import load_model

    lc, temperature = cfg.learner, cfg.generator.sampling.temperature or 1.0
    model = load_model(cfg.model, "float32")
    model.train()
    before = snapshot(model)
    opt = torch.optim.AdamW(model.parameters(), lr=lc.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=lc.weight_decay)
    for s in batch.samples:
        ids = torch.from_numpy(s.ids)[None]
        with (torch.autocast("cpu", dtype=torch.bfloat16) if autocast
              else contextlib.nullcontext()):
            logits = model(ids).logits
        logits = logits[0, :-1].float() / temperature
        logp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
        mask = torch.from_numpy(s.sampled[1:]).float()
        weight = torch.ones_like(logp)
        if weighted:
            behav = torch.from_numpy(s.behav[1:]).float()
            weight = torch.exp(logp.detach() - behav).clamp(max=lc.is_clip)
        ratio = torch.exp(logp - logp.detach())
        (-(s.advantage * ratio * weight * mask).sum() / batch.batch_tokens).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), lc.grad_clip)
    opt.step()
    return before, changes(before, snapshot(model)), float(norm)


def agreement(start: dict, change: dict, ref_start: dict, ref_change: dict) -> dict:
    """How `change` agrees with the reference's: cosine, the share of the weights the
    reference moved that moved the same way, both norms, and how far the starts differ."""
    import torch

    keys = [k for k in ref_change if k in change]
    # float64: a float32 dot product over 135M changes of about 3e-5 each came out 3% short
    # (a step's cosine with itself 0.967)
    dw = torch.cat([change[k].flatten() for k in keys]).double()
    dr = torch.cat([ref_change[k].flatten() for k in keys]).double()
    moved = dr != 0
    return {"start_max_abs_diff": max(float((ref_start[k] - start[k]).abs().max()) for k in keys),
            "cosine": round(float(dw @ dr / (dw.norm() * dr.norm())), 5),
            "sign_agreement": round(float(((dw.sign() == dr.sign()) & moved).sum() / moved.sum()), 5),
            "change_norm": round(float(dw.norm()), 6),
            "reference_change_norm": round(float(dr.norm()), 6)}


REFERENCES = {"trl_times_whetstone_weight": (True, False), "trl": (False, False),
              "trl_bf16_autocast": (False, True),
              "trl_bf16_autocast_times_whetstone_weight": (True, True)}
"""The hand-written steps: label -> (whetstone's off-policy weight, bf16 autocast). The first
(float32, whetstone's objective exactly) is the one every step is compared with."""


def main(argv: list[str] | None = None) -> int:
    import msgspec
    import torch

    from runtime.config import load

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("seed_dir", type=Path)
    p.add_argument("--precision", default="", help="the learner's precision (default: the run's)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    cfg = load(str(args.seed_dir / "config.json"))
    ran = cfg.learner
    cfg = msgspec.structs.replace(cfg, learner=msgspec.structs.replace(
        ran, precision=args.precision or ran.precision, minibatches=1,
        loss_divisor="batch_tokens"))
    as_run = all(getattr(ran, k) == getattr(cfg.learner, k)
                 for k in ("precision", "minibatches", "loss_divisor"))
    run_dir = (args.seed_dir / "runs" / "latest").resolve()
    batch = run_batch(run_dir, cfg, 1)
    w_start, w_change, stats = asyncio.run(whetstone_step(cfg, batch))
    out = {"seed_dir": str(args.seed_dir), "step": 1, "precision": cfg.learner.precision,
           "samples": len(batch.samples), "batch_tokens": batch.batch_tokens,
           "loss_divisor": cfg.learner.loss_divisor,
           "whetstone": {k: round(stats[k], 6) for k in ("grad_norm", "loss", "is_weight",
                                                         "behav_gap")},
           "whetstone_in_the_run": {k: logged_step(run_dir, 1)[k] for k in ("grad_norm", "loss")},
           "settings_as_in_the_run": as_run,
           "run_settings": {k: getattr(ran, k) for k in ("precision", "minibatches",
                                                         "loss_divisor")},
           "against": "trl_times_whetstone_weight", "steps": {}}
    base = None
    for label, (weighted, autocast) in REFERENCES.items():
        start, change, norm = reference_step(cfg, batch, weighted, autocast)
        if base is None:
            base = start, change
            out["steps"]["whetstone"] = {"grad_norm": out["whetstone"]["grad_norm"],
                                         **agreement(w_start, w_change, *base)}
            del w_change
        out["steps"][label] = {"grad_norm": round(norm, 6), **agreement(start, change, *base)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
