"""Benchmark: does training stay stable far off policy, at staleness 4 and 8, with the default
off-policy correction?

One process, no bus: the learner's own `Trainer` (DeepSpeed on the CPU, the real objective
and correction) trains the tiny model on a verifiable toy task, side by side at staleness 0
(on-policy), 4 and 8. Every step t trains on a batch sampled by the weights of version
max(0, t - s): always the oldest the staleness bound admits, the worst case a rolling run
can hand the learner (a real run mixes lags up to s). Batches go through
`policy.batch.assemble` with `max_staleness = s`, as in the learner. Extra runs at the
largest staleness with other corrections (`--also icepop,none`) show what the correction
buys.

The task: each group shares a random 8-token prompt; a completion of `--tokens` sampled
tokens (temperature 1) scores the share of its tokens in a fixed target set: the 20% of the
vocabulary whose initial embeddings point furthest along a fixed random direction (about
0.2 for the untrained model, 1 at best; a direction the policy can learn within a few dozen
steps). Group-relative advantages as in training.

Reports per step: the batch's reward (of the behaviour weights that sampled it), KL from the
behaviour to the current weights on the batch's tokens (k3 estimate), gradient norm, masked
and clipped token shares and the mean importance weight; per run: the on-policy reward of
the current weights before the first and after the last step (fresh samples) and whether it
collapsed. No collapse: every loss and gradient norm finite, the largest gradient norm at
most 10x the run's median, and the final on-policy reward above the initial one.

    python bench/learning/staleness.py [--steps 30] [--staleness 0,4,8] [--also icepop,none]
                              [--out bench/learning/results/staleness.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402
import numpy as np  # noqa: E402

from bus.codec import pack_f32, pack_ids  # noqa: E402
from bus.messages import Attempt, Task, Turn, Verdict, Verifier  # noqa: E402
from policy.batch import assemble  # noqa: E402
from policy.groups import Group  # noqa: E402
from runtime.config import RunConfig  # noqa: E402

GROUP = 8
"Attempts per prompt."
TASK = Task(task_id="bench/staleness", env="bench", env_version="1", domain="toy", prompt="",
            verifier=Verifier(kind="python_io"))


def config(correction: str, lr: float) -> RunConfig:
    """The default learner section (bf16, ZeRO-1, truncated IS at 2) on the tiny model."""
    cfg = RunConfig()
    return msgspec.structs.replace(
        cfg, model=msgspec.structs.replace(cfg.model, name="tiny"),
        learner=msgspec.structs.replace(cfg.learner, correction=correction, lr=lr,
                                        micro_batch_size=64))


def sample(model, prompts, new: int, gen):
    """`new` tokens per row at temperature 1, with their log-probabilities."""
    import torch

    with torch.no_grad():
        out = model(input_ids=prompts, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1]
        ids, logps = [], []
        for _ in range(new):
            logp = torch.log_softmax(logits.float(), -1)
            tok = torch.multinomial(logp.exp(), 1, generator=gen)
            ids.append(tok)
            logps.append(logp.gather(-1, tok))
            out = model(input_ids=tok, past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1]
    return torch.cat(ids, 1), torch.cat(logps, 1)


def target_tokens(model, share: float, seed: int):
    """The `share` of the vocabulary whose initial embeddings point furthest along a fixed
    random direction: a target the policy can learn by moving its hidden state."""
    import torch

    emb = model.get_input_embeddings().weight.detach().float()
    direction = torch.randn(emb.shape[1], generator=torch.Generator().manual_seed(seed))
    along = emb @ direction
    return along >= torch.quantile(along, 1.0 - share)


def rewards_of(completions, target) -> list[float]:
    return target[completions].float().mean(1).tolist()


def verdicts(prompts, completions, logps, rewards, version: int, step: int) -> list[Group]:
    """The batch as judged groups, one group per prompt."""
    groups: dict[str, Group] = {}
    for row, reward in enumerate(rewards):
        gid = f"s{step}-g{row // GROUP}"
        turn = Turn(prompt_ids=pack_ids(prompts[row].tolist()),
                    completion_ids=pack_ids(completions[row].tolist()),
                    logprobs=pack_f32(logps[row].tolist()), completion="",
                    policy_version=version)
        attempt = Attempt(attempt_id=f"{gid}.{row % GROUP}", group_id=gid, index=row % GROUP,
                          group_size=GROUP, task=TASK, turns=[turn], policy_version=version)
        verdict = Verdict(verdict_id=attempt.attempt_id, attempt=attempt,
                          outcome="pass" if reward >= 0.5 else "fail", reward=reward)
        groups.setdefault(gid, Group(gid, GROUP, 0.0)).members[verdict.verdict_id] = (verdict, None)
    return list(groups.values())


def kl_behaviour_to_current(model, samples) -> float:
    """Mean k3 estimate of KL(behaviour || current) over the sampled tokens of `samples`."""
    import torch

    from policy.batch import collate
    from policy.objective import token_logprobs

    batch = {k: torch.from_numpy(v) for k, v in collate(samples, 0).items()}
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"]).logits
        cur = token_logprobs(logits[:, :-1], batch["targets"])
    log_r = (cur - batch["behav"]) * batch["mask"]
    k3 = (torch.exp(log_r) - 1 - log_r) * batch["mask"]
    return float(k3.sum() / batch["mask"].sum())


def run(name: str, staleness: int, correction: str, args: argparse.Namespace) -> dict:
    import torch

    from policy.model import load_model
    from policy.trainer import Trainer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1",
                      LOCAL_RANK="0")
    cfg = config(correction, args.lr)
    trainer = Trainer(cfg.trainer, Path(tempfile.mkdtemp(prefix="whet-stale-")))
    trainer.setup()
    behaviour = load_model(cfg.model, "float32")
    current = load_model(cfg.model, "float32")
    target = target_tokens(behaviour, args.target_share, args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    snapshots = [{k: v.detach().clone() for k, v in trainer.engine.module.state_dict().items()}]

    def on_policy_reward() -> float:
        current.load_state_dict(snapshots[-1])
        prompts = torch.randint(3, trainer.vocab_size, (64, 8), generator=gen)
        completions, _ = sample(current, prompts, args.tokens, gen)
        return statistics.mean(rewards_of(completions, target))

    start_reward = on_policy_reward()
    steps, began = [], time.monotonic()
    for t in range(args.steps):
        version = max(0, t - staleness)
        behaviour.load_state_dict(snapshots[version])
        prompts = torch.randint(3, trainer.vocab_size, (args.groups, 8), generator=gen)
        prompts = prompts.repeat_interleave(GROUP, 0)
        completions, logps = sample(behaviour, prompts, args.tokens, gen)
        rewards = rewards_of(completions, target)
        batch = assemble(verdicts(prompts, completions, logps, rewards, version, t), t,
                         staleness, True, 4096)
        current.load_state_dict(snapshots[-1])
        kl = kl_behaviour_to_current(current, batch.samples) if batch.samples else 0.0
        metrics = trainer.train(batch.samples) if batch.samples else {}
        snapshots.append({k: v.detach().clone()
                          for k, v in trainer.engine.module.state_dict().items()})
        steps.append({"step": t, "behaviour_version": version, "lag": t - version,
                      "reward": round(statistics.mean(rewards), 4), "kl_behav": round(kl, 5),
                      **{k: round(metrics[k], 5) for k in ("loss", "grad_norm", "masked_frac",
                                                           "clip_frac", "is_weight")
                         if k in metrics}})
        print(f"{name} step {t:3d} lag {t - version} reward {steps[-1]['reward']:.3f} "
              f"kl {kl:.4f} grad {metrics.get('grad_norm', float('nan')):.3f} "
              f"masked {metrics.get('masked_frac', 0.0):.3f}", flush=True)
    end_reward = on_policy_reward()
    trainer.close()
    return {"name": name, "staleness": staleness, "correction": correction,
            "seconds": round(time.monotonic() - began, 1), "start_reward": round(start_reward, 4),
            "end_reward": round(end_reward, 4), **verdict_on(steps, start_reward, end_reward),
            "steps": steps}


def verdict_on(steps: list[dict], start: float, end: float) -> dict:
    """The no-collapse criterion, with the numbers it was decided on."""
    norms = [s["grad_norm"] for s in steps if "grad_norm" in s]
    finite = all(math.isfinite(s.get(k, 0.0)) and s.get("grad_norm", 0.0) >= 0
                 for s in steps for k in ("loss", "grad_norm", "kl_behav"))
    median = statistics.median(norms) if norms else 0.0
    bounded = bool(norms) and max(norms) <= 10 * median
    return {"grad_norm_median": round(median, 4), "grad_norm_max": round(max(norms, default=0), 4),
            "kl_behav_max": max((s["kl_behav"] for s in steps), default=0.0),
            "masked_frac_mean": round(statistics.mean(s.get("masked_frac", 0.0) for s in steps), 4),
            "finite": finite, "grad_bounded": bounded, "reward_rose": end > start,
            "no_collapse": finite and bounded and end > start}


def main(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(args.threads)
    levels = [int(x) for x in args.staleness.split(",")]
    plan = [(f"s{s}-truncated", s, "truncated") for s in levels]
    plan += [(f"s{max(levels)}-{c}", max(levels), c) for c in args.also.split(",") if c]
    results = [run(name, s, c, args) for name, s, c in plan]
    summary = {"args": vars(args), "runs": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))
    base = results[0]["end_reward"] - results[0]["start_reward"]
    print(f"\n{'run':18} {'reward start->end':>18} {'gain/s0':>8} {'kl max':>8} "
          f"{'grad med/max':>14} {'masked':>7} {'s':>6}  no collapse")
    for r in results:
        gain = r["end_reward"] - r["start_reward"]
        print(f"{r['name']:18} {r['start_reward']:8.3f} -> {r['end_reward']:.3f} "
              f"{gain / base if base else float('nan'):8.2f} {r['kl_behav_max']:8.4f} "
              f"{r['grad_norm_median']:6.3f}/{r['grad_norm_max']:6.3f} "
              f"{r['masked_frac_mean']:7.3f} {r['seconds']:6.0f}  {r['no_collapse']}")
    return 0 if all(r["no_collapse"] for r in results) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--staleness", default="0,4,8")
    parser.add_argument("--also", default="icepop",
                        help="other corrections to run at the largest staleness")
    parser.add_argument("--groups", type=int, default=4, help="prompts per batch")
    parser.add_argument("--tokens", type=int, default=16, help="sampled tokens per attempt")
    parser.add_argument("--lr", type=float, default=1e-2,
                        help="high, so the policy moves far between versions (the hard case)")
    parser.add_argument("--target-share", type=float, default=0.2,
                        help="share of the vocabulary the reward counts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1 holds up best on a shared machine)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "learning" / "results" / "staleness.json"))
    sys.exit(main(parser.parse_args()))
