"""Benchmark: step credit against trajectory credit, and repair tasks on against off, on the
repository domain's validation split only.

Consumes a variant name (`VARIANTS`: overrides on configs/agentic.toml) and a seed; runs it
with the learning ablation's short-protocol runner (`bench/learning/ablation.py`: `whet up`
on a written config, rounds at versions 0 and `--steps` on `--tasks` validation tasks).
Produces results/credit/<variant>-s<seed>.json (each validation task's outcome and reward at
both rounds); `--table` the markdown table (`ablation_table.table`: pass rate with its 95%
interval, the paired change since version 0 and against the default, sign test) and the
setting the default should take by it (`choice`). A variant other than the default starts
from the default run's warm-started model and takes its version-0 round, so all share one
version 0. `--dry-run` writes and validates every variant's config and runs nothing.
The held-out set is never touched.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.learning import ablation, ablation_table  # noqa: E402

BASE = ROOT / "configs" / "agentic.toml"
OUT = ROOT / "bench" / "repository" / "results" / "credit"
STEPS = 8
"Updates of the short protocol: configs/agentic.toml's whole RL stage."
TASKS = 60
"Validation tasks per round (configs/agentic.toml's split holds about 60)."
ALPHA = 0.05
"A variant replaces the default only when it gains at this sign-test p or below."

VARIANTS: dict[str, dict[str, dict]] = {
    "default": {},
    "step": {"learner": {"credit": "step"}},
    "no_repair": {"sampler": {"repair_tasks": False}},
}
("default: configs/agentic.toml as it is (trajectory credit, repair tasks on); each other "
 "variant changes one factor.")


def shared_warm_start(out_dir: Path, name: str, seed: int) -> dict:
    """Overrides that start a variant from the warm-started model of the default's run of
    the same seed (so its version-0 round is the variant's too); {} for the default, or
    before that run exists."""
    path = out_dir / f"default-s{seed}.json"
    if name == "default" or not path.exists():
        return {}
    model = ROOT / json.loads(path.read_text())["run_dir"] / "warmstart" / "model"
    if not model.is_dir():
        return {}
    return {"warmstart": {"enabled": False}, "model": {"path": str(model)}}


def overrides_of(name: str, seed: int, steps: int, tasks: int, out_dir: Path) -> tuple[dict, Path | None]:
    """A variant's overrides under the short protocol, and the default's result whose
    version-0 round it takes (None: it runs its own)."""
    over = ablation.merged(ablation.protocol(steps, tasks), VARIANTS[name],
                           shared_warm_start(out_dir, name, seed))
    shared = ablation.shared_initial(out_dir, name, seed) if "model" in over else None
    if shared:
        over = ablation.merged(over, {"evaluator": {"initial_round": False}})
    return over, shared


def choice(folder: Path, steps: int, alpha: float = ALPHA) -> str:
    """The setting the default follows: the variant that gained most against the default at
    the last round with sign-test p <= `alpha`, else the default as it is."""
    from envs.stats import paired_change

    results = ablation_table.load_results(folder)
    if "default" not in results:
        return "no default variant in the results: nothing to compare"
    last = str(steps)
    base = ablation_table.pooled(results["default"], last)
    best = None
    for name in sorted(set(results) - {"default"}):
        p = paired_change(base, ablation_table.pooled(results[name], last))
        if p.delta > 0 and p.p_value <= alpha and (best is None or p.delta > best[1].delta):
            best = (name, p)
    if best is None:
        return f"default stays: no variant gained on the default at v{last} with p <= {alpha}"
    name, p = best
    return (f"default follows {name} ({json.dumps(VARIANTS.get(name, {}))}): {p.delta:+.3f} "
            f"(+{p.gained}/-{p.lost}, p={p.p_value:.3f}) against the default at v{last}")


def dry_run(seed: int, steps: int, tasks: int, out_dir: Path) -> int:
    """Write and load every variant's config; print what each run would be. Runs nothing."""
    from bus.errors import ConfigError
    from runtime.config import load

    for name in VARIANTS:
        over, shared = overrides_of(name, seed, steps, tasks, out_dir)
        path = ablation.write_config(name, seed, over, out_dir, BASE)
        try:
            cfg = load(path)
        except ConfigError as exc:
            print(f"credit_table: {exc}", file=sys.stderr)
            return 2
        print(f"{name:10} {ablation._shown(path)}: credit={cfg.learner.credit} "
              f"repair_tasks={cfg.sampler.repair_tasks} steps={cfg.training.max_steps} "
              f"split={cfg.evaluator.split} tasks={cfg.evaluator.tasks_per_domain} "
              f"warm start={'shared' if not cfg.warmstart.enabled else 'own'} "
              f"v0={'shared' if shared else 'own'}")
    return 0


def main(args: argparse.Namespace) -> int:
    out_dir = Path(args.out_dir)
    if args.table:
        print(ablation_table.table(out_dir, args.steps))
        print()
        print(choice(out_dir, args.steps))
        return 0
    if args.dry_run:
        return dry_run(args.seed, args.steps, args.tasks, out_dir)
    if args.variant not in VARIANTS:
        print(f"credit_table: unknown variant {args.variant!r}; choose one of "
              f"{', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    over, shared = overrides_of(args.variant, args.seed, args.steps, args.tasks, out_dir)
    return ablation.run_status("credit_table", args.variant, args.seed, over, args.steps, out_dir,
                               args.keep_checkpoints, shared, BASE)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", nargs="?", default="default")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--out-dir", default=str(OUT))
    parser.add_argument("--keep-checkpoints", action="store_true")
    parser.add_argument("--table", action="store_true", help="build the table from the JSONs")
    parser.add_argument("--dry-run", action="store_true",
                        help="write and validate every variant's config; run nothing")
    sys.exit(main(parser.parse_args()))
