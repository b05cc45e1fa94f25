"""Benchmark: the learning ablation, one factor at a time from the default, on the
validation split only.

Consumes a variant name (a set of config overrides on configs/default.toml, `VARIANTS`) and
a seed; writes the variant's config (JSON extending the default) and runs it with `whet up`
(as learning_run.py does) under the short protocol: 12 updates, rounds at versions 0 and 12
on 60 validation tasks of each trained domain. Produces results/ablation/<variant>-s<seed>.json:
each validation task's outcome and reward at both rounds, samples trained, what was left
out, wall and CPU seconds (the whole stack's: this process's children). `--table` builds one
markdown table from the JSONs there: pass rate at v12 with its 95% interval, the paired
change against v0 and against the variant's base (the default it ran on), samples and CPU seconds.
A variant other than the default takes the version-0 round of `default-s<seed>.json` when
that is there (the same weights, tasks and greedy float32 sampling) instead of its own.
`--attach-initial RESULT EVAL` gives a result whose run had no version-0 round the one
`whet eval --split validation --out EVAL` measured on the initial weights.
It chooses nothing; the held-out set is never touched.

    python bench/learning/ablation.py default --seed 0
    python bench/learning/ablation.py --table [--out-dir bench/learning/results/ablation]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.learning.learning_run import _env, eval_rewards, heldout_by_version, read_csv  # noqa: E402

OUT = ROOT / "bench" / "learning" / "results" / "ablation"
BASE = ROOT / "configs" / "default.toml"
"The config a variant extends (other studies pass their own: bench/repository/credit_table.py)."
STEPS = 12
TASKS_PER_DOMAIN = 60

VARIANTS: dict[str, dict[str, dict]] = {
    "default": {},
    "staleness0": {"training": {"max_staleness": 0}},
    "staleness1": {"training": {"max_staleness": 1}},
    "staleness2": {"training": {"max_staleness": 2}},
    "zs_refill": {"training": {"zero_signal": "refill"}},
    "zs_keep": {"training": {"zero_signal": "keep"}},
    "div_batch_tokens": {"learner": {"loss_divisor": "batch_tokens"}},
    "div_sequence": {"learner": {"loss_divisor": "sequence"}},
    "div_constant": {"learner": {"loss_divisor": "constant"}},
    "uniform": {"sampler": {"out_of_band_weight": 1.0}},
    # truncated answers judged on their text: the default until a0648e7, when this table
    # chose "fail" (the runs then named trunc_fail are default-s0/s1 now, and the runs then
    # named default are trunc_judged-s0/s1)
    "trunc_judged": {"judge": {"truncated": "judged"}},
    # generator-versus-learner mismatch: both in float32 (KL 0 at identical weights,
    # results/mismatch.json) against the default's bf16 on both sides (KL 0.002)
    "fp32": {"learner": {"precision": "fp32"}, "generator": {"dtype": "float32"}},
    # issue 24: LoRA rank 16 against full fine-tuning at equal steps, two learning rates
    # (LoRA's best rate is commonly about 10x full fine-tuning's: 3e-5 here)
    "lora_lr3e-4": {"learner": {"lora": {"rank": 16}, "lr": 3e-4}},
    "lora_lr1e-4": {"learner": {"lora": {"rank": 16}, "lr": 1e-4}},
    # issue 23: a warm start by SFT on the gated reference answers of 60 training tasks per
    # domain, then the same RL; its version 0 is the warm-started model, so its round is its
    # own. lr 1e-4 as the repository warm start's (bench/repository/results/warmstart), not
    # compared
    "warmstart": {"warmstart": {"enabled": True, "tasks_per_domain": 60, "lr": 1e-4}},
    # the same warm start, then RL on training tasks it did not demonstrate (warmstart-s0's
    # RL stage practised the demonstrated ones: 311 of 383 attempts in groups of equal reward)
    "warmstart_fresh": {"warmstart": {"enabled": True, "tasks_per_domain": 60, "lr": 1e-4,
                                      "rl_pool": "undemonstrated"}},
    # the two factors that gained reward over two seeds each, together; compared with
    # staleness1 (the default since 0fb9ef0), whose runs pin the same staleness
    "staleness1_div_sequence": {"training": {"max_staleness": 1},
                                "learner": {"loss_divisor": "sequence"}},
    # TRL's GRPOTrainer's choices together (bench/vs_trl/short_as_trl.toml): on-policy,
    # zero-signal groups kept, TRL's "dapo" divisor, tasks drawn uniformly; against staleness1
    "as_trl": {"training": {"max_staleness": 0, "zero_signal": "keep"},
               "learner": {"loss_divisor": "batch_tokens"},
               "sampler": {"out_of_band_weight": 1.0}},
    # issue 22: two optimizer steps per batch, each on half of it (the clip against the
    # proximal policy): more updates from the same samples; against staleness1
    "minibatches2": {"training": {"max_staleness": 1}, "learner": {"minibatches": 2}},
    # issue 22: a flat ladder. With the frontier on rung 0 of rungs 0 and 1 the default ladder
    # draws rung 1 for 2 in 7 tasks (offsets 0 and +1 at 0.5 and 0.2), and 12 updates never
    # promote it; here both rungs are drawn alike whichever is the frontier. Against staleness1
    "ladder_flat": {"training": {"max_staleness": 1},
                    "sampler": {"ladder_offsets": [-1, 0, 1], "ladder_weights": [1.0, 1.0, 1.0]}},
    # issue 22: four optimizer steps per batch (a group each), every one clipped against the
    # weights before the batch's first; against minibatches2
    "minibatches4": {"training": {"max_staleness": 1}, "learner": {"minibatches": 4}},
    # issue 22: each task of a rung drawn once per pass (TRL's sampler goes through its
    # dataset so), the band ordering a pass; in bench/vs_trl's 40-task pools the default's
    # band drew one task for 6 of 40 groups (short_lean_mb2_trl1_reach10, seed 2)
    "without_replacement": {"sampler": {"without_replacement": True}},
    # issue 22: a pass spans the rungs the ladder reaches, not one rung: with the frontier on
    # rung 0 the ladder draws rung 1 for 2 in 7 tasks, so per rung a pass of rung 0 ends and
    # repeats before rung 1's tasks are all drawn (bench/vs_trl: rung-1 tasks drawn, 4 of 11)
    "without_replacement_ladder": {"sampler": {"without_replacement": True,
                                               "pass_over": "ladder"}},
    # issue 22: a turn ended by the stop string (the closing fence) is trained with the end
    # token after it, as TRL's GRPOTrainer trains its pad token (SmolLM2's end token) there;
    # TRL's answers then shortened (bench/vs_trl: 64 to 18 tokens by step 8) and stopped
    # ending at the stop string
    "end_token_at_stop": {"generator": {"sampling": {"end_token_at_stop": True}}},
    # issue 22: the bf16 learner's float32 master weights start from the float32 checkpoint,
    # not from their bf16 rounding: on the grid, a weight's bf16 copy (which samples and
    # trains) stays put until its moves add up to half a grid step (results/master_weights:
    # after 24 steps the module's change had cosine 0.62 with the master's)
    "master_from_checkpoint": {"learner": {"master_from_checkpoint": True}},
    # issue 22: the rung above the frontier drawn as often as the frontier (the default draws
    # it 2 in 7 while the frontier stays on rung 0, as it does all of a short run): in
    # bench/vs_trl's first runs whetstone drew rung 1 for fewer groups than TRL's rows on five
    # of six seeds (results/short_lean_mb2_default_trl1/draws.json)
    "ladder_even_above": {"sampler": {"ladder_weights": [0.1, 0.2, 0.5, 0.5]}},
    # issue 22: no format bonus for a crash. In a run whose data_scripts L0 stayed at 2 of 30
    # (results/answer_modes/master_from_grid-s0), 98 of its 208 data_scripts training answers
    # crashed (model.runtime_error), each scored 0.1 like a wrong answer that runs. Against
    # the default: pass -0.100 (+3/-27), fewer crashes on seed 1 only; not adopted
    "crash_no_format": {"judge": {"reward": {"crash_keeps_format": False}}},
    # the alternative to today's default (master_from_checkpoint true since that variant's
    # result, whose runs above were against the default of then, false): DeepSpeed's own
    # start, the master weights on the bf16 grid
    "master_from_grid": {"learner": {"master_from_checkpoint": False}},
}
("Each factor against the default of its base runs: staleness 2 (1 since 0fb9ef0), "
 "zero-signal groups dropped, the token mean, the sampler band, truncated answers scored as "
 "failures.")
BASES = {"staleness1_div_sequence": "staleness1", "as_trl": "staleness1",
         "minibatches2": "staleness1", "ladder_flat": "staleness1",
         "minibatches4": "minibatches2"}
"The result a variant is compared with when it is not `default`'s runs."


def protocol(steps: int, tasks: int) -> dict[str, dict]:
    """The short protocol's overrides: `steps` updates, rounds at 0 and `steps` on `tasks`
    validation tasks per trained domain (HumanEval has no validation split: it drops out)."""
    return {"training": {"max_steps": steps},
            "evaluator": {"split": "validation", "every_versions": steps,
                          "tasks_per_domain": tasks}}


def merged(*layers: dict) -> dict:
    """Nested dicts merged key by key, later layers winning (`runtime.config.merge`)."""
    from runtime.config import merge

    return functools.reduce(merge, layers, {})


def parse_set(items: list[str]) -> dict:
    """`section.key=value` pairs (a TOML value, else a string) as nested overrides."""
    out: dict = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip() or "." not in key:
            raise ValueError(f"--set {item!r}: expected section.key=value, e.g. model.name=tiny")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        *path, last = key.strip().split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def write_config(name: str, seed: int, overrides: dict, out_dir: Path, base: Path = BASE) -> Path:
    """The variant's config: JSON extending `base` (configs/default.toml), its runs under
    runs/ablation."""
    folder = out_dir / "configs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-s{seed}.json"
    base = os.path.relpath(base, folder)
    run = {"run": {"name": f"abl-{name}-s{seed}", "seed": seed, "runs_dir": "runs/ablation"}}
    path.write_text(json.dumps({"extends": base, **merged(overrides, run)}, indent=1) + "\n")
    return path


def outcomes(run_dir: Path, steps: int) -> dict[str, dict[str, dict]]:
    """Each validation task's outcome and reward at versions 0 and `steps`."""
    rounds = eval_rewards(run_dir)
    return {str(v): {task: {"outcome": o, "reward": r} for task, (r, o) in sorted(rounds[v].items())}
            for v in (0, steps) if v in rounds}


def left_out(run_dir: Path) -> dict[str, int]:
    """Verdicts the steps consumed without training, by reason, from the learner's events
    (a step redone after a restart counted once)."""
    steps: dict[int, dict] = {}
    for log in sorted((run_dir / "logs").glob("learner-*.jsonl")):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "learner.step_completed":
                steps[event["fields"]["step"]] = event["fields"]
    return {reason: sum(int(f.get(reason) or 0) for f in steps.values())
            for reason in ("no_signal", "stale_rejected", "dropped")}


def shared_initial(out_dir: Path, name: str, seed: int) -> Path | None:
    """The default variant's result of the same seed, whose version-0 round (the same initial
    weights, greedy in float32, on the same tasks) a variant takes instead of its own; none
    for a variant with a warm start, whose version 0 is the warm-started model."""
    path = out_dir / f"default-s{seed}.json"
    warm = VARIANTS.get(name, {}).get("warmstart", {}).get("enabled", False)
    if name == "default" or warm or not path.exists():  # a warm start has other weights at 0
        return None
    return path if "0" in json.loads(path.read_text()).get("tasks", {}) else None


def attach_initial(result_path: Path, eval_path: Path) -> dict:
    """Give a result that lacks its version-0 round the one `whet eval --out` measured on the
    initial weights with the variant's config (same tasks, judge and greedy float32
    sampling; dropped attempts stay out, as in a round); returns the result."""
    from runtime.evaluate.record import read

    result, measured = json.loads(result_path.read_text()), read(eval_path)
    if measured.split != "validation":
        raise SystemExit(f"ablation: {eval_path} measured the {measured.split!r} split, "
                         "not validation")
    result["tasks"]["0"] = {task: {"outcome": r.outcome, "reward": r.reward}
                            for task, r in sorted(measured.results.items())
                            if r.outcome != "dropped"}
    result["rounds"]["0"] = {d: s.rate for d, s in measured.domains.items()}
    result["initial_round_from"] = _shown(eval_path.resolve())
    result_path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def run_status(command: str, *args, **kwargs) -> int:
    """`run_variant(*args, **kwargs)` as a command's exit status: 0 when the run ended well,
    1 when it did not, 2 (with one line naming `command`) for a config error."""
    from bus.errors import ConfigError

    try:
        result = run_variant(*args, **kwargs)
    except ConfigError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    return 0 if result["exit_code"] == 0 else 1


def run_variant(name: str, seed: int, overrides: dict, steps: int, out_dir: Path,
                keep: bool = False, shared: Path | None = None, base: Path = BASE) -> dict:
    """Run one variant (extending `base`) to its last round and write its result JSON;
    returns it. The run's checkpoints and exported model are deleted after, unless `keep`.
    With `shared`, the version-0 round is that result's (the run skips its own)."""
    from runtime.config import load

    config = write_config(name, seed, overrides, out_dir, base)
    load(config)  # a bad override fails here, before anything starts
    began, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "runtime.cli", "up", "--config", str(config)],
                          cwd=ROOT, env={**_env(), "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    latest = ROOT / "runs" / "ablation" / "latest"
    run_dir = latest.resolve() if latest.exists() else None
    if run_dir is None or not run_dir.name.startswith(f"abl-{name}-s{seed}-") \
            or run_dir.stat().st_mtime < time.time() - (time.monotonic() - began) - 5:
        raise SystemExit(f"ablation: whet up exited with {proc.returncode} and made no run "
                         f"directory of its own under {latest.parent}")
    train = read_csv(run_dir / "metrics" / "train.csv")
    result = {"variant": name, "seed": seed, "base": BASES.get(name, "default"),
              "overrides": overrides, "config": _shown(config),
              "run_dir": _shown(run_dir), "exit_code": proc.returncode,
              "steps": len(train), "samples_trained": int(train[-1]["samples_total"]) if train else 0,
              "left_out": left_out(run_dir), "wall_s": round(time.monotonic() - began, 1),
              "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
              "rounds": {v: h["pass_rates"] for v, h in
                         ((str(v), h) for v, h in heldout_by_version(run_dir).items())},
              "tasks": outcomes(run_dir, steps)}
    stage = run_dir / "warmstart" / "stage.json"
    if stage.is_file():  # the warm start's seconds and CPU seconds, its demonstrations included
        result["warmstart"] = json.loads(stage.read_text())
    if shared is not None:
        initial = json.loads(shared.read_text())
        result["tasks"]["0"] = initial["tasks"]["0"]
        result["rounds"]["0"] = initial["rounds"].get("0")
        result["initial_round_from"] = _shown(shared)
    path = out_dir / f"{name}-s{seed}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    if not keep:  # gigabytes a run; its metrics, logs and config stay
        for folder in ("checkpoints", "model"):
            shutil.rmtree(run_dir / folder, ignore_errors=True)
    return result


def _shown(path: Path) -> str:
    """`path` relative to the repository when it lies inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(args: argparse.Namespace) -> int:
    from bench.learning.ablation_table import table

    out_dir = Path(args.out_dir)
    if args.list:
        for name, over in VARIANTS.items():
            print(f"{name:18} {json.dumps(over)}")
        return 0
    if args.table:
        print(table(out_dir, args.steps))
        return 0
    if args.attach_initial:
        result_path, eval_path = (Path(p) for p in args.attach_initial)
        attach_initial(result_path, eval_path)
        print(f"wrote {result_path}")
        return 0
    if args.variant not in VARIANTS:
        print(f"ablation: unknown variant {args.variant!r}; choose one of {', '.join(VARIANTS)} "
              "(--list shows their overrides)", file=sys.stderr)
        return 2
    try:
        extra = parse_set(args.set)
    except ValueError as exc:
        print(f"ablation: {exc}", file=sys.stderr)
        return 2
    overrides = merged(protocol(args.steps, args.tasks), VARIANTS[args.variant], extra)
    shared = shared_initial(out_dir, args.variant, args.seed)
    if shared:  # the initial weights on the same tasks were measured by the default's run
        overrides = merged(overrides, {"evaluator": {"initial_round": False}})
    return run_status("ablation", args.variant, args.seed, overrides, args.steps, out_dir,
                      args.keep_checkpoints, shared)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", nargs="?", default="default")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=STEPS, help="updates (the protocol: 12)")
    parser.add_argument("--tasks", type=int, default=TASKS_PER_DOMAIN,
                        help="validation tasks per trained domain (the protocol: 60)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="one more override (smoke runs: model.name=tiny)")
    parser.add_argument("--out-dir", default=str(OUT))
    parser.add_argument("--attach-initial", nargs=2, metavar=("RESULT", "EVAL"),
                        help="give RESULT (a variant's JSON without a version-0 round) the one "
                        "`whet eval --out EVAL` measured on the initial weights")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep the run's checkpoints and model (deleted by default)")
    parser.add_argument("--table", action="store_true", help="build the table from the JSONs")
    parser.add_argument("--list", action="store_true", help="list the variants")
    sys.exit(main(parser.parse_args()))
