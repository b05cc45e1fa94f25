"""Benchmark: whetstone head to head with TRL's GRPOTrainer, every figure from this run's own files.

    PYTHONPATH=. python bench/vs_trl/vs_trl.py --seeds 1 2 3 \\
        [--protocol <a name of PROTOCOLS>] [--trl-minibatches N] \\
        --out-dir bench/vs_trl/results/<label>

Per seed: fix one training task list (gated as the sampler gates it, sha256 recorded) that
both sides train on (`[envs] train_ids`); train with TRL (`vs_trl_grpo.py`) and with `whet up`,
each in a child process, for the same updates of the same samples, seed, settings and stop
strings; evaluate the initial weights and both final policies with one function on the same
held-out tasks (`vs_trl_eval.py`); write `seed-<n>.json` (settings, hashes, both sides'
clocks: whole run and training only, samples, updates, each held-out task's result). Then
`vs_trl_report.py` writes `report.json` from those files alone. Protocols: `short.toml`,
`short_lean_mb2.toml`, `short_as_trl.toml` and `smoke.toml` beside this file; `full` is
configs/default.toml. `--trl-minibatches` sets TRL's optimizer steps per batch apart from
whetstone's (the protocol's `learner.minibatches`): each side at its own setting.
`--whetstone-updates N` (more than the protocol's updates) lets whetstone train on past TRL's
update count in the same run: its policy at TRL's count (a kept checkpoint, exported) is the
one compared at equal samples, its final policy the one its whole-run clock and the reach of
TRL's final reward count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from bench.vs_trl import vs_trl_report  # noqa: E402
from bench.vs_trl.clock import ChildRun, run_timed  # noqa: E402
from bench.vs_trl.task_list import digest, gated_train_tasks, write_ids  # noqa: E402
from bench.vs_trl.vs_trl_eval import heldout_tasks  # noqa: E402
from bench.vs_trl.vs_trl_whetstone import whetstone_side  # noqa: E402

PROTOCOLS = {p.stem: p for p in sorted(HERE.glob("*.toml"))} | {
    "full": ROOT / "configs" / "default.toml"}
"Each protocol's config: every TOML file beside this one, by its stem, and `full`."


class ChildFailed(Exception):
    """A side's process exited with an error; its log says why."""


DRAIN_S = 60.0
"""whetstone's actors get this long to stop (default 10 s): on a busy machine the learner's
last checkpoint and model export at its stop took longer, and were cut short."""


def seed_config(protocol: Path, seed: int, runs_dir: Path):
    """The protocol's config with this seed, runs under `runs_dir`, no Prometheus port (a
    bench run must not collide with another run's monitor) and `DRAIN_S` to stop in."""
    import msgspec

    from runtime.config import load

    cfg = load(protocol)
    rep = msgspec.structs.replace
    return rep(cfg, run=rep(cfg.run, seed=seed, runs_dir=str(runs_dir)),
               monitor=rep(cfg.monitor, prometheus_port=0),
               supervisor=rep(cfg.supervisor, drain_s=max(cfg.supervisor.drain_s, DRAIN_S)))


def restricted(cfg, ids_file: Path):
    """`cfg` training on the listed tasks only: the list is the pool, so no pool limit."""
    import msgspec

    rep = msgspec.structs.replace
    return rep(cfg, envs=rep(cfg.envs, train_ids=str(ids_file)),
               sampler=rep(cfg.sampler, pool_per_domain=0))


def shared_settings(cfg) -> dict:
    """The settings both sides hold equal, as whetstone names them."""
    import msgspec

    tr, lc, gen = cfg.training, cfg.learner, cfg.generator
    return {"model": cfg.model.path or cfg.model.name, "seed": cfg.run.seed,
            "updates": tr.max_steps, "batch_size": tr.batch_size, "group_size": tr.group_size,
            "lr": lc.lr, "minibatches": lc.minibatches, "clip_eps": lc.clip_eps,
            "kl_coef": lc.kl_coef,
            "scale_rewards": lc.scale_rewards, "grad_clip": lc.grad_clip,
            "temperature": gen.sampling.temperature, "top_p": gen.sampling.top_p,
            "max_new_tokens": gen.sampling.max_new_tokens, "stop": list(gen.sampling.stop),
            "eval_max_new_tokens": gen.eval_sampling.max_new_tokens, "mix": cfg.envs.mix,
            "heldout_per_domain": cfg.evaluator.tasks_per_domain,
            "heldout_domain_tasks": cfg.evaluator.domain_tasks,
            "whetstone_rounds_every": (cfg.evaluator.every_versions  # 0: no evaluator
                                       if cfg.actors.count.get("evaluator") else 0),
            "judge": msgspec.to_builtins(cfg.judge)}


def child_env() -> dict[str, str]:
    """The environment every child runs in: this tree importable, tokenizers quiet."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}


def run_child(what: str, argv: list[str], log: Path) -> ChildRun:
    """Run one side's command; ChildFailed naming its log when it fails."""
    print(f"{what}: {' '.join(argv[1:])}  (log {log})", flush=True)
    run = run_timed([sys.executable, *argv], log, cwd=ROOT, env=child_env())
    if run.returncode != 0:
        raise ChildFailed(f"{what} exited with {run.returncode}; see {log}")
    print(f"{what}: {run.clocks()}", flush=True)
    return run


def evaluate_all(config: Path, models: dict[str, str], work: Path, threads: int) -> dict:
    """Each model (label: folder, '' for the initial weights) evaluated in a child process."""
    out = {}
    for label, model in models.items():
        result = work / f"eval-{label}.json"
        argv = ["-m", "bench.vs_trl.vs_trl_eval", "--config", str(config), "--label", label,
                "--out", str(result), "--threads", str(threads)]
        run = run_child(f"evaluation of {label}", argv + (["--model", model] if model else []),
                        work / f"eval-{label}.log")
        record = json.loads(result.read_text())
        out[label] = {**record, "clocks": {
            "wall_s": run.wall_s, "cpu_s": round(run.cpu_s + record["gate_sandbox_cpu_s"], 1)}}
    return out


def side_clocks(run: ChildRun, sandbox_cpu_s: float, evaluation: dict, training: dict) -> dict:
    """A side's clocks: its process (with its sandboxed jobs), the evaluation of its final
    policy, the two together (the whole run) and training only."""
    process = {"wall_s": run.wall_s, "cpu_s": round(run.cpu_s + sandbox_cpu_s, 1)}
    return {"process": process, "evaluation": evaluation, "training": training,
            "whole_run": {k: round(process[k] + evaluation[k], 1) for k in ("wall_s", "cpu_s")}}


def at_updates(curve: list[dict], n: int, tag: str, clocks: dict, evaluation: dict) -> dict:
    """Whetstone's policy at TRL's update count `n`, in a run that went on: its checkpoint,
    the stack's CPU when step `n` was recorded, the run's CPU after its last step's stamp
    (its stop, which a run ending at `n` would also spend, and every sandboxed job's CPU,
    which the stack's stamps leave out: for step `n`, an overcount by the later steps' jobs),
    the evaluation of that policy, and their sum: the whole-run CPU charged to that policy."""
    at = next(p for p in curve if p["step"] == n)
    tail = round(max(clocks["process"]["cpu_s"] - curve[-1]["cpu_s"], 0.0), 1)
    return {"updates": n, "checkpoint": tag, "stack_cpu_s": at["cpu_s"],
            "after_last_step_cpu_s": tail,
            "evaluation": evaluation,
            "whole_run_cpu_s": round(at["cpu_s"] + tail + evaluation["cpu_s"], 1)}


def prepare(cfg, work: Path) -> tuple[dict, dict[str, list[str]], Path]:
    """Fix the training task list and gate the held-out tasks (so neither side nor any
    evaluation pays for those gates); write the config both sides run. The list's record,
    the held-out ids by domain and the config's path."""
    import anyio

    from runtime.config import dump

    began = time.monotonic()
    tasks, gate_cpu = anyio.run(gated_train_tasks, cfg)
    ids, sha = write_ids(work / "train_ids.txt", tasks)
    heldout, heldout_gate_cpu = anyio.run(heldout_tasks, cfg)
    listing = {"count": len(ids), "sha256": sha, "ids": ids,
               "by_domain": {d: len(ts) for d, ts in tasks.items()},
               "wall_s": round(time.monotonic() - began, 1),
               "gate_sandbox_cpu_s": round(gate_cpu + heldout_gate_cpu, 1)}
    config = work / "config.json"
    config.write_bytes(dump(restricted(cfg, work / "train_ids.txt")))
    return listing, {d: [t.task_id for t in ts] for d, ts in heldout.items()}, config


TRL_KEPT = ("updates", "samples", "tasks", "tasks_drawn", "precision",
            "prompt_ids_match_generator", "outcomes", "sandbox_cpu_s", "curve")
WHETSTONE_KEPT = ("updates", "final_version", "model_checkpoint", "samples", "pool",
                  "trained_outside_list", "sandbox_cpu_s", "rounds", "curve")
"What each side's record keeps in the seed file."


def trl_config(config: Path, minibatches: int) -> Path:
    """The config TRL's side runs: `config`, with `minibatches` optimizer steps per batch
    when given (0: the protocol's)."""
    if not minibatches:
        return config
    values = json.loads(config.read_text())
    values["learner"]["minibatches"] = minibatches
    path = config.with_name("config-trl.json")
    path.write_text(json.dumps(values, indent=1))
    return path


def checkpoint_interval(updates: int, protocol_every: int) -> int:
    """The largest divisor of `updates` not above the protocol's checkpoint interval: a
    checkpoint then falls at `updates`, and saves come about as often as the protocol's."""
    return max(d for d in range(1, max(1, min(updates, protocol_every)) + 1) if updates % d == 0)


def whetstone_config(config: Path, updates: int) -> Path:
    """The config whetstone's side runs for `updates` updates, more than the protocol's: it
    keeps a checkpoint at the protocol's update count (`checkpoint_interval`, the last two
    kept), so that policy can be exported and compared at equal samples."""
    values = json.loads(config.read_text())
    n, learner = values["training"]["max_steps"], values["learner"]
    values["training"]["max_steps"] = updates
    learner["checkpoint_every"] = checkpoint_interval(n, learner.get("checkpoint_every", n))
    learner["keep_checkpoints"] = max(learner.get("keep_checkpoints", 2),
                                      -(-(updates - n) // learner["checkpoint_every"]) + 1)
    path = config.with_name("config-whetstone.json")
    path.write_text(json.dumps(values, indent=1))
    return path


def export_version(run_dir: Path, version: int, out: Path, log: Path) -> str:
    """Write the run's kept checkpoint of `version` as a model folder (`whet export-model`);
    its checkpoint tag."""
    from policy.export import kept, pick

    tag = pick(kept(run_dir / "checkpoints"), version).tag
    run_child(f"export of whetstone's version {version}",
              ["-m", "runtime.cli", "export-model", str(run_dir), "--version", str(version),
               "--out", str(out)], log)
    return tag


def run_seed(protocol: str, seed: int, work: Path, threads: int,
             trl_minibatches: int = 0, whetstone_updates: int = 0) -> dict:
    """Both sides and the evaluations for one seed (the initial weights, TRL's final policy,
    whetstone's at TRL's update count and, when it trained longer, its final one); the
    seed's record."""
    cfg = seed_config(PROTOCOLS[protocol], seed, work / "runs")
    listing, heldout, config = prepare(cfg, work)
    n = cfg.training.max_steps
    longer = whetstone_updates > n
    settings = {**shared_settings(cfg),
                "trl_minibatches": trl_minibatches or cfg.learner.minibatches,
                "whetstone_updates": whetstone_updates if longer else n}
    print(f"seed {seed}: {listing['count']} training tasks, sha256 {listing['sha256'][:16]}",
          flush=True)
    trl_run = run_child("TRL", ["-m", "bench.vs_trl.vs_trl_grpo",
                                "--config", str(trl_config(config, trl_minibatches)),
                                "--out-dir", str(work / "trl"), "--threads", str(threads)],
                        work / "trl.log")
    trl = json.loads((work / "trl" / "trl.json").read_text())
    whet_config = whetstone_config(config, whetstone_updates) if longer else config
    whet_run = run_child("whetstone", ["-m", "runtime.cli", "up", "--config", str(whet_config)],
                         work / "whetstone.log")
    run_dir = (work / "runs" / "latest").resolve()
    models = {"initial": "", "trl": str(work / "trl" / "model"),
              "whetstone": str(run_dir / "model")}
    if longer:
        at_n = work / f"whetstone-v{n}"
        tag = export_version(run_dir, n, at_n, work / "export.log")
        models.update(whetstone=str(at_n), whetstone_final=str(run_dir / "model"))
    evals = evaluate_all(config, models, work, threads)
    heldout_ids = sorted(t for ts in heldout.values() for t in ts)
    whet = whetstone_side(run_dir, set(listing["ids"]), set(heldout_ids))
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # gigabytes; model/ stays
    final_eval = evals["whetstone_final" if longer else "whetstone"]["clocks"]
    whet_clocks = side_clocks(whet_run, whet["sandbox_cpu_s"], final_eval, whet["training"])
    if longer:
        whet["at_trl_updates"] = at_updates(whet["curve"], n, tag, whet_clocks,
                                            evals["whetstone"]["clocks"])
    return {
        "seed": seed, "protocol": protocol, "config": str(PROTOCOLS[protocol].relative_to(ROOT)),
        "settings": settings, "train_tasks": listing,
        "heldout_tasks": {"count": len(heldout_ids), "sha256": digest(heldout_ids),
                          "by_domain": heldout, "same_for_every_policy": all(
                              e["tasks"] == heldout for e in evals.values())},
        "trl": {**{k: trl[k] for k in TRL_KEPT}, "clocks": side_clocks(
            trl_run, trl["sandbox_cpu_s"], evals["trl"]["clocks"], trl["training"])},
        "whetstone": {**{k: whet[k] for k in WHETSTONE_KEPT}, "clocks": whet_clocks,
                      **({"at_trl_updates": whet["at_trl_updates"]} if longer else {})},
        "initial_evaluation": evals["initial"]["clocks"],
        "heldout": {label: e["per_task"] for label, e in evals.items()},
    }


def main(args: argparse.Namespace) -> int:
    from runtime import log as log_mod

    log_mod.configure(kind="bench", instance="vs_trl", level="warning")
    from bench.vs_trl.vs_trl_grpo import bf16_native

    out = Path(args.out_dir)
    other = [p.name for p in sorted(out.glob("seed-*.json"))
             if json.loads(p.read_text()).get("protocol") != args.protocol]
    if other:
        print(f"vs_trl: {out} holds seed files of another protocol ({', '.join(other)}); "
              "give another --out-dir", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="vs-trl-"))
    machine = {"cpus": os.cpu_count(), "threads": args.threads, "bf16_native": bf16_native()}
    for seed in args.seeds:
        try:
            record = run_seed(args.protocol, seed, work / f"seed-{seed}", args.threads,
                              args.trl_minibatches, args.whetstone_updates)
        except ChildFailed as exc:
            print(f"vs_trl: seed {seed}: {exc}", file=sys.stderr)
            return 1
        record = {**record, "machine": machine, "command": " ".join(["bench/vs_trl/vs_trl.py",
                                                                      *sys.argv[1:]])}
        path = out / f"seed-{seed}.json"
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {path}", flush=True)
    report = vs_trl_report.write(out)
    print("\n".join(report["summary"]))
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="one run per seed")
    p.add_argument("--protocol", choices=sorted(PROTOCOLS), default="short")
    p.add_argument("--out-dir", required=True, help="where seed-<n>.json and report.json go")
    p.add_argument("--work-dir", default="", help="runs, models and logs (default: a temp dir)")
    p.add_argument("--trl-minibatches", type=int, default=0,
                   help="TRL's optimizer steps per batch (default: the protocol's, as whetstone)")
    p.add_argument("--whetstone-updates", type=int, default=0,
                   help="whetstone trains this many updates, more than the protocol's (TRL's); "
                        "its policy at TRL's count is compared at equal samples (default: as TRL)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="torch threads of the TRL process and of each evaluation")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main(parse()))
