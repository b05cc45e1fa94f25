"""Benchmark: does TRL's final policy keep its lead over whetstone's once rounded to bf16?

Whetstone's learner computes with, publishes and exports the bf16 rounding of its float32
master weights (the module: policy/export.py). TRL keeps float32 weights. If what TRL learned
lay below bf16's step, its rounded policy would lose its lead. Consumes seed folders of `vs_trl.py`
(`--work-dir`/seed-<n>: config.json, trl/model, eval-trl.json, eval-whetstone.json); writes
TRL's policy rounded to bf16 beside it (trl/model-bf16), evaluates it with the bench's own
evaluation (`vs_trl_eval`, a process of its own) and produces JSON: per seed, the share of
weights each side moved in bf16 and held-out reward and passes of TRL float32, TRL rounded
and whetstone, paired per task. It trains nothing.

    python bench/vs_trl/rounded.py /tmp/vstrl/seed-1 [...] --out FILE
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def round_model(src: Path, dst: Path) -> None:
    """`src` (a float32 Hugging Face folder) saved again with every weight in bf16."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).to(torch.bfloat16)
    shutil.rmtree(dst, ignore_errors=True)
    model.save_pretrained(dst)
    for name in src.iterdir():
        if name.name.startswith("tokenizer") or name.name in ("chat_template.jinja",
                                                              "special_tokens_map.json"):
            shutil.copy(name, dst / name.name)


def moved_share(seed_dir: Path) -> dict[str, float]:
    """Share of weights whose bf16 value differs from the initial weights' rounding: TRL's
    rounded policy and whetstone's exported one. Not a step size: SmolLM2 ships float32
    weights, so TRL's start inside bf16 cells (a small move can cross a rounding boundary),
    whetstone's learner from their rounding (a move must reach half a step)."""
    import torch
    from safetensors.torch import load_file

    from policy.model import load_model
    from runtime.config import load

    cfg = load(seed_dir / "config.json")
    init = {k: v.to(torch.bfloat16) for k, v in load_model(cfg.model, "float32").state_dict().items()}
    sides = {"trl_bf16": seed_dir / "trl" / "model-bf16" / "model.safetensors",
             "whetstone": next(seed_dir.glob("runs/*/model/model.safetensors"))}
    out = {}
    for side, path in sides.items():
        state = load_file(path)
        shared = [k for k in state if k in init]
        moved = sum(int((state[k].to(torch.bfloat16) != init[k]).sum()) for k in shared)
        out[side] = round(moved / sum(init[k].numel() for k in shared), 4)
    return out


def summary(per_task: dict[str, list]) -> dict:
    rewards = [r for r, _ in per_task.values()]
    return {"reward": round(sum(rewards) / len(rewards), 4),
            "passes": sum(o == "pass" for _, o in per_task.values()), "tasks": len(rewards)}


def paired(a: dict[str, list], b: dict[str, list]) -> dict:
    """a against b on their shared tasks: reward difference, passes gained and lost."""
    shared = sorted(set(a) & set(b))
    diff = sum(a[t][0] - b[t][0] for t in shared) / len(shared)
    return {"reward_difference": round(diff, 4),
            "gained": sum(a[t][1] == "pass" and b[t][1] != "pass" for t in shared),
            "lost": sum(a[t][1] != "pass" and b[t][1] == "pass" for t in shared)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("seed_dirs", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    result = {"command": "PYTHONPATH=. python bench/vs_trl/rounded.py "
                         + " ".join(map(str, args.seed_dirs)) + f" --out {args.out}",
              "seeds": {}}
    for seed_dir in args.seed_dirs:
        rounded = seed_dir / "trl" / "model-bf16"
        round_model(seed_dir / "trl" / "model", rounded)
        out = seed_dir / "eval-trl_bf16.json"
        subprocess.run([sys.executable, "-m", "bench.vs_trl.vs_trl_eval", "--config",
                        str(seed_dir / "config.json"), "--label", "trl_bf16", "--out", str(out),
                        "--threads", str(args.threads), "--model", str(rounded)],
                       cwd=ROOT, check=True)
        evals = {side: json.loads((seed_dir / f"eval-{side}.json").read_text())["per_task"]
                 for side in ("trl", "trl_bf16", "whetstone")}
        result["seeds"][seed_dir.name] = {
            "moved_share_bf16": moved_share(seed_dir),
            **{side: summary(ev) for side, ev in evals.items()},
            "trl_bf16_vs_trl": paired(evals["trl_bf16"], evals["trl"]),
            "whetstone_vs_trl_bf16": paired(evals["whetstone"], evals["trl_bf16"]),
            "per_task": {t: {side: evals[side][t] for side in evals} for t in sorted(evals["trl"])}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for seed, r in result["seeds"].items():
        print(seed, {k: v for k, v in r.items() if k != "per_task"})


if __name__ == "__main__":
    main()
