"""Benchmark: is a bf16 run's policy its float32 master weights, or their bf16 rounding?

Consumes a finished run folder and one of its kept checkpoints (default: the newest). A bf16
learner keeps float32 master weights in the optimizer; its own forward, the generators and
the held-out rounds all use their nearest bf16 rounding (the module), which `whet
export-model` writes. Produces, in `--out`: `master_weights.json` with how much of the
master's change since version 0 the module holds (per kind of weight: norms of both changes,
cosine, projection, share of weights moved) and both weight sets evaluated by `whet eval` on
the validation split of the trained domains (greedy, float32 compute), paired per task; and
each evaluation's own JSON. It trains nothing and never reads the held-out split.

    python bench/learning/master_weights.py RUN [--tag step00000024] [--per-domain 60] --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.learning.learning_run import trained_envs  # noqa: E402
from envs.stats import sign_test  # noqa: E402


def weight_kind(name: str) -> str:
    return "norm" if "norm" in name else "embedding" if "embed" in name else "linear"


def changes(base: dict, master: dict, module: dict) -> dict:
    """Per kind of weight: |master - v0|, |module - v0|, their cosine, the module's
    projection on the master's change, and the share of weights the module moved. Version 0
    is the bf16 rounding of the initial weights (where both start)."""
    import torch

    sums: dict[str, list[float]] = {}
    for name, start in base.items():
        if name not in master or name not in module:
            continue
        v0 = start.detach().to(torch.bfloat16).float()
        full, rounded = master[name].float() - v0, module[name].float() - v0
        s = sums.setdefault(weight_kind(name), [0.0] * 5)
        s[0] += float((full * full).sum())
        s[1] += float((rounded * rounded).sum())
        s[2] += float((full * rounded).sum())
        s[3] += float((rounded != 0).sum())
        s[4] += float(full.numel())
    return {kind: {"master_change": round(a ** 0.5, 4), "module_change": round(b ** 0.5, 4),
                   "cosine": round(ab / (a * b) ** 0.5, 3) if a and b else None,
                   "projection": round(ab / a, 3) if a else None,
                   "share_moved_in_module": round(moved / n, 4)}
            for kind, (a, b, ab, moved, n) in sorted(sums.items())}


def evaluate(folder: Path, cfg: Path, envs: list[str], per_domain: int, out: Path) -> dict:
    """`whet eval` of `folder` on the validation split; each task's result."""
    cmd = [sys.executable, "-m", "runtime.cli", "eval", str(folder), "--config", str(cfg),
           "--split", "validation", "--per-domain", str(per_domain), "--out", str(out)]
    for env in envs:
        cmd += ["--env", env]
    began = time.monotonic()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    results = json.loads(out.read_text())["results"]
    print(f"master_weights: {folder.name}: {sum(r['outcome'] == 'pass' for r in results.values())}"
          f"/{len(results)} passed ({time.monotonic() - began:.0f} s)", flush=True)
    return results


def compare(module: dict, master: dict) -> dict:
    """The master against the module on the same tasks: passes, mean reward, gained/lost."""
    common = sorted(set(module) & set(master))
    passed = {name: {t for t in common if side[t]["outcome"] == "pass"}
              for name, side in (("module", module), ("master", master))}
    gained = len(passed["master"] - passed["module"])
    lost = len(passed["module"] - passed["master"])
    by_domain = {}
    for domain in sorted({module[t]["domain"] for t in common}):
        ids = [t for t in common if module[t]["domain"] == domain]
        by_domain[domain] = {side: sum(t in passed[side] for t in ids) for side in passed}
        by_domain[domain]["tasks"] = len(ids)
    mean = {side: round(sum(s[t]["reward"] for t in common) / len(common), 4)
            for side, s in (("module", module), ("master", master))}
    return {"tasks": len(common), "passes": {k: len(v) for k, v in passed.items()},
            "by_domain": by_domain, "mean_reward": mean, "master_gained": gained,
            "master_lost": lost, "sign_test_p": round(sign_test(gained, lost), 4)}


def main(args: argparse.Namespace) -> int:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    from policy.export import _full_model, _save_model, _states, export
    from policy.model import load_model, model_dir
    from runtime.config import load

    run = Path(args.run).resolve()
    cfg_path = run / "config.resolved.json"
    cfg = load(cfg_path)
    checkpoints = run / "checkpoints"
    tag = args.tag or (checkpoints / "latest").read_text().strip()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    master = get_fp32_state_dict_from_zero_checkpoint(str(checkpoints), tag=tag)
    module = dict(_states(checkpoints / tag)["module"])
    base = dict(load_model(cfg.model, "float32").named_parameters())
    summary = {"run": run.name, "tag": tag, "model": cfg.model.name,
               "module_is_nearest_rounding_of_master": all(
                   bool((master[k].bfloat16() == v).all()) for k, v in module.items() if k in master),
               "changes_since_version_0": changes(base, master, module)}
    work = Path(args.work or tempfile.mkdtemp(prefix="whet-master-"))
    module_dir = export(checkpoints, tag, cfg.model, work / "module")
    master_dir = work / "master"
    master_dir.mkdir(parents=True, exist_ok=True)
    _save_model(_full_model(model_dir(cfg.model), master, tag), model_dir(cfg.model), master_dir)
    envs = sorted(trained_envs(run))
    results = {name: evaluate(folder, cfg_path, envs, args.per_domain, out / f"eval_{name}.json")
               for name, folder in (("module", module_dir), ("master", master_dir))}
    summary["validation"] = compare(results["module"], results["master"])
    summary["command"] = " ".join(["python", "bench/learning/master_weights.py", *sys.argv[1:]])
    (out / "master_weights.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a finished run folder (runs/<id>) with its checkpoints")
    parser.add_argument("--tag", default="", help="checkpoint tag (default: the newest)")
    parser.add_argument("--per-domain", type=int, default=60)
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", default="", help="where the two model folders go (default: a temporary folder)")
    sys.exit(main(parser.parse_args()))
