"""The report of bench/vs_trl/: every figure recomputed from the committed per-seed JSON files.

    PYTHONPATH=. python bench/vs_trl/vs_trl_report.py bench/vs_trl/results/<label> [--check]

Consumes `seed-<n>.json` (written by vs_trl.py: each held-out task's [reward, outcome] for
the initial weights, TRL's and whetstone's final policies; both sides' clocks, updates,
samples, task-list hashes and whetstone's own held-out rounds); produces `report.json`:
per seed and pooled over seeds, the paired comparison of the final policies (tasks gained
and lost, the exact sign test's p, the mean reward difference with a 95% interval; and with
the seed the unit, `between_seeds`), each
against the initial weights, each policy's held-out answers by kind (passed, partial
credit, no test passed, does not compile; pooled, also per domain and rung: `by_stratum`),
the clocks side by side with their ratios, the
checks that both sides had the same tasks, updates and samples, and the whole-run CPU
whetstone took to reach TRL's final held-out reward. `--check` only compares with the report
on disk.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from envs.stats import mean_difference, mean_interval, sign_test  # noqa: E402

Results = dict[str, list]
"Task id -> [reward or None, outcome]."


def mean_reward(results: Results) -> float | None:
    """Mean reward over the tasks with one (an infrastructure drop has none)."""
    rewards = [r for r, _ in results.values() if r is not None]
    return round(statistics.mean(rewards), 4) if rewards else None


def pass_rate(results: Results) -> float | None:
    """Share of the tasks whose attempt passed."""
    return round(sum(o == "pass" for _, o in results.values()) / len(results), 4) if results else None


def paired(before: Results, after: Results) -> dict:
    """`after` against `before` on the tasks both scored: passes gained and lost with the
    exact two-sided sign test, and the mean reward difference (after - before) with its 95%
    interval (normal approximation, the task the unit)."""
    common = sorted(t for t in before.keys() & after.keys()
                    if before[t][0] is not None and after[t][0] is not None)
    gained = sum(after[t][1] == "pass" and before[t][1] != "pass" for t in common)
    lost = sum(before[t][1] == "pass" and after[t][1] != "pass" for t in common)
    out = {"tasks": len(common), "gained": gained, "lost": lost,
           "sign_test_p": round(sign_test(gained, lost), 4)}
    got = mean_difference({t: before[t][0] for t in common}, {t: after[t][0] for t in common})
    if got is not None:
        _, mean, low, high = got
        out.update(reward_diff=round(mean, 4), interval95=[round(low, 4), round(high, 4)])
    return out


def comparisons(heldout: dict[str, Results]) -> dict:
    """Each policy's held-out figures and the paired comparisons: whetstone (at TRL's update
    count) against TRL, each against the initial weights, and whetstone's final policy
    against TRL when it trained longer (`whetstone_final`)."""
    out = {"policies": {label: {"reward": mean_reward(r), "pass_rate": pass_rate(r), "tasks": len(r)}
                        for label, r in heldout.items()},
           "whetstone_vs_trl": paired(heldout["trl"], heldout["whetstone"]),
           "trl_vs_initial": paired(heldout["initial"], heldout["trl"]),
           "whetstone_vs_initial": paired(heldout["initial"], heldout["whetstone"])}
    if "whetstone_final" in heldout:
        out["whetstone_final_vs_trl"] = paired(heldout["trl"], heldout["whetstone_final"])
    return out


def ratio(whet: float | None, trl: float | None) -> float | None:
    """whetstone's figure over TRL's."""
    return round(whet / trl, 3) if whet is not None and trl else None


def clocks(records: list[dict]) -> dict:
    """Each side's clocks summed over `records`, and whetstone's over TRL's."""
    out: dict = {"trl": {}, "whetstone": {}, "whetstone_over_trl": {}}
    for clock in ("whole_run", "process", "evaluation", "training"):
        for unit in ("cpu_s", "wall_s"):
            key = f"{clock}.{unit}"
            sums = {side: round(sum(r[side]["clocks"][clock][unit] for r in records), 1)
                    if all(r[side]["clocks"][clock] for r in records) else None
                    for side in ("trl", "whetstone")}
            for side, value in sums.items():
                out[side][key] = value
            out["whetstone_over_trl"][key] = ratio(sums["whetstone"], sums["trl"])
    return out


def reach(record: dict) -> dict:
    """Whole-run CPU seconds whetstone took to reach TRL's final held-out reward, against
    TRL's whole-run CPU: from whetstone's own rounds when one reached it (the stack's CPU
    when that round was reported), else from its final policy (its whole run), else none."""
    target = mean_reward(record["heldout"]["trl"])
    whet, trl_cpu = record["whetstone"], record["trl"]["clocks"]["whole_run"]["cpu_s"]
    rounds = sorted((r for r in whet["rounds"] if r["reward"] is not None), key=lambda r: r["cpu_s"])
    hit = next((r for r in rounds if target is not None and r["reward"] >= target), None)
    at = whet.get("at_trl_updates")
    final = mean_reward(record["heldout"]["whetstone_final" if at else "whetstone"])
    at_reward = mean_reward(record["heldout"]["whetstone"]) if at else None
    between = [r["version"] for r in rounds if 0 < r["version"] < whet["final_version"]]
    between = sorted(set(between + ([at["updates"]] if at else [])))
    out = {"trl_final_reward": target, "trl_whole_run_cpu_s": trl_cpu, "whetstone_cpu_s": None,
           "by": None, "ratio": None, "intermediate_rounds": between}
    if hit is not None and not (at and at_reward is not None and at_reward >= target
                                and at["whole_run_cpu_s"] < hit["cpu_s"]):
        out.update(whetstone_cpu_s=hit["cpu_s"], by=f"whetstone's own round at version {hit['version']}")
    elif at and at_reward is not None and target is not None and at_reward >= target:
        out.update(whetstone_cpu_s=at["whole_run_cpu_s"],
                   by=f"its policy at version {at['updates']} (TRL's updates; the stack's CPU "
                      "then, the run's CPU after its last step and that policy's evaluation)")
    elif final is not None and target is not None and final >= target:
        out.update(whetstone_cpu_s=whet["clocks"]["whole_run"]["cpu_s"],
                   by="its final policy (this bench's evaluation)"
                   + ("" if between else "; no earlier round, so when it first reached it is "
                      "unknown: at most this"))
    else:
        out["by"] = f"not reached in {whet['updates']} updates"
    out["ratio"] = ratio(out["whetstone_cpu_s"], trl_cpu)
    return out


def checks(record: dict) -> dict:
    """Whether both sides had the same tasks, updates, samples and held-out tasks, and
    whetstone's final policy is its last update's. When whetstone trained longer
    (`settings.whetstone_updates`), its updates and samples are checked against that count,
    and `whetstone_compared_at_trl_updates` that its compared policy is TRL's count's."""
    trl, whet, listing = record["trl"], record["whetstone"], record["train_tasks"]
    n = record["settings"]["updates"]
    longer = record["settings"].get("whetstone_updates", n)
    at = whet.get("at_trl_updates")
    batch = record["settings"]["batch_size"]
    out = {"train_tasks_trl": trl["tasks"]["sha256"] == listing["sha256"],
           "train_tasks_whetstone": (sum((whet["pool"] or {}).values()) == listing["count"]
                                     and not whet["trained_outside_list"]),
           "updates": (trl["updates"] == n
                       and whet["updates"] == whet["final_version"] == longer),
           "whetstone_final_policy_is_last_update": whet["model_checkpoint"] == f"step{longer:08d}",
           "samples": (trl["samples"]["consumed"] == n * batch
                       and whet["samples"]["consumed"] == longer * batch),
           "heldout_tasks": record["heldout_tasks"]["same_for_every_policy"]}
    if longer != n or at is not None:
        out["whetstone_compared_at_trl_updates"] = (at is not None
                                                    and at["checkpoint"] == f"step{n:08d}")
    return out


KINDS = ("pass", "partial", "no_test_passed", "does_not_compile", "unscored")
"""Held-out answers by kind (`answer_kind`): passed; failed with partial credit (reward above
0.1: some tests, or some fields); failed with no test passed (0.1 at most: the program ran,
or the answer parsed); scored as an answer that does not compile (reward at most -0.4: the
judge's compile_error, truncation and hack rewards); no reward (a dropped attempt)."""


def answer_kind(reward: float | None, outcome: str) -> str:
    """One held-out answer's kind (`KINDS`)."""
    if outcome == "pass":
        return "pass"
    if reward is None:
        return "unscored"
    if reward <= -0.4:
        return "does_not_compile"
    return "partial" if reward > 0.1 else "no_test_passed"


def answer_kinds(results: Results) -> dict[str, int]:
    """How many of `results`' answers are of each kind (`KINDS`, every kind named)."""
    out = dict.fromkeys(KINDS, 0)
    for reward, outcome in results.values():
        out[answer_kind(reward, outcome)] += 1
    return out


def stratum(task_id: str) -> str:
    """'<domain> L<rung>' of a held-out task ('<seed>:' first when pooled), the rung read from
    its id ('<domain>/v1-L0-...': the generated environments name their tasks so); '<domain>'
    when the id names none."""
    domain, _, rest = task_id.split(":", 1)[-1].partition("/")
    rung = next((part for part in rest.split("-") if part[:1] == "L" and part[1:].isdigit()), "")
    return f"{domain} {rung}".strip()


def by_stratum(heldout: dict[str, Results]) -> dict[str, dict]:
    """Each policy's mean reward and passes per domain and rung (`stratum`), with the
    stratum's task count."""
    keys = {t: stratum(t) for t in heldout["trl"]}
    out: dict[str, dict] = {}
    for key in sorted(set(keys.values())):
        part = {label: {t: v for t, v in results.items() if keys.get(t) == key}
                for label, results in heldout.items()}
        out[key] = {"tasks": len(part["trl"]),
                    **{label: {"reward": mean_reward(r), "passes": answer_kinds(r)["pass"]}
                       for label, r in part.items()}}
    return out


def seed_report(record: dict) -> dict:
    """One seed's figures."""
    trl, whet = record["trl"], record["whetstone"]
    v0 = next((r["reward"] for r in whet["rounds"] if r["version"] == 0), None)
    hashes = lambda key: {k: record[key][k] for k in ("count", "sha256")}  # noqa: E731
    return {"seed": record["seed"], "train_tasks": hashes("train_tasks"),
            "heldout_tasks": hashes("heldout_tasks"),
            "updates": {"trl": trl["updates"], "whetstone": whet["updates"]},
            "samples": {"trl": trl["samples"], "whetstone": whet["samples"]},
            **comparisons(record["heldout"]), "clocks": clocks([record]), "reach": reach(record),
            "answers": {label: answer_kinds(results)
                        for label, results in record["heldout"].items()},
            "checks": checks(record),
            "initial_reward_two_paths": {"this_bench": mean_reward(record["heldout"]["initial"]),
                                         "whetstone_round_0": v0}}


def between_seeds(records: list[dict]) -> dict:
    """The seed the unit: each seed's whetstone - TRL mean held-out reward and passes, and
    the mean reward difference with its 95% Student-t interval over seeds (None for one
    seed). Runs differ by which behaviour they settle into, which the pooled interval (the
    task the unit) does not count; this one does, at the price of few units."""
    diffs, passes = [], []
    for r in records:
        whet, trl = r["heldout"]["whetstone"], r["heldout"]["trl"]
        diffs.append(round(mean_reward(whet) - mean_reward(trl), 4))
        passes.append(answer_kinds(whet)["pass"] - answer_kinds(trl)["pass"])
    out: dict = {"reward_diff": diffs, "pass_diff": passes, "mean_reward_diff": None,
                 "interval95": None}
    got = mean_interval(diffs)
    if got is not None:
        mean, low, high = got
        out.update(mean_reward_diff=round(mean, 4), interval95=[round(low, 4), round(high, 4)])
    return out


def pooled(records: list[dict]) -> dict:
    """Every seed's held-out tasks paired together (a task of seed s is `s:task`), clocks
    summed over seeds."""
    labels = ["initial", "trl", "whetstone"]
    labels += ["whetstone_final"] if all("whetstone_final" in r["heldout"] for r in records) else []
    heldout = {label: {f"{r['seed']}:{t}": v for r in records
                       for t, v in r["heldout"][label].items()}
               for label in labels}
    return {"seeds": [r["seed"] for r in records], **comparisons(heldout),
            "answers": {label: answer_kinds(results) for label, results in heldout.items()},
            "by_stratum": by_stratum(heldout),
            "between_seeds": between_seeds(records),
            "clocks": clocks(records), "reach_ratios": [reach(r)["ratio"] for r in records],
            "checks": {k: all(checks(r)[k] for r in records) for k in checks(records[0])}}


def summary(report: dict) -> list[str]:
    """The report in a few sentences."""
    p = report["pooled"]
    w, c = p["whetstone_vs_trl"], p["clocks"]["whetstone_over_trl"]
    s = p["between_seeds"]
    figures = lambda key: ", ".join(  # noqa: E731
        f"{label} {p['policies'][label][key]}" for label in ("initial", "trl", "whetstone"))
    return [f"seeds {p['seeds']}, protocol {report['protocol']}: held-out reward "
            f"{figures('reward')}; pass rate {figures('pass_rate')}",
            f"whetstone vs TRL over {w['tasks']} tasks: +{w['gained']}/-{w['lost']} passes "
            f"(sign test p {w['sign_test_p']}), reward difference {w.get('reward_diff')} "
            f"(95% {w.get('interval95')})",
            f"the seed the unit: whetstone - TRL reward per seed {s['reward_diff']}, mean "
            f"{s['mean_reward_diff']} (95% t {s['interval95']}); passes per seed {s['pass_diff']}",
            f"whetstone/TRL CPU: whole run {c['whole_run.cpu_s']}, training only "
            f"{c['training.cpu_s']}; wall: whole run {c['whole_run.wall_s']}, training only "
            f"{c['training.wall_s']}",
            f"whole-run CPU to reach TRL's final reward, whetstone/TRL per seed: "
            f"{p['reach_ratios']}",
            *([f"whetstone trained {report['per_seed'][0]['updates']['whetstone']} updates "
               f"against TRL's {report['per_seed'][0]['updates']['trl']}: the comparisons above "
               f"take its policy at TRL's count; its final policy against TRL: "
               f"+{p['whetstone_final_vs_trl']['gained']}/-{p['whetstone_final_vs_trl']['lost']} "
               f"passes (p {p['whetstone_final_vs_trl']['sign_test_p']}), reward "
               f"{p['whetstone_final_vs_trl'].get('reward_diff')} "
               f"(95% {p['whetstone_final_vs_trl'].get('interval95')}); its clocks count its "
               "whole run"] if "whetstone_final_vs_trl" in p else []),
            f"held-out answers by kind: {p['answers']}",
            f"same tasks, updates, samples, held-out set: {p['checks']}"]


NOTES = [
    "Whole run: the side's process from its start (imports, gating of the task list from the "
    "gate cache, model load, training, saving; for whetstone also its own held-out rounds) "
    "plus the evaluation of its final policy in a process of its own. CPU is the kernel's "
    "count at each process's exit (os.wait4: it and every descendant it reaped) plus the "
    "CPU its sandboxed jobs used (cgroup-measured; no process count shows them). The "
    "evaluations' own judged jobs count on neither side.",
    "Training only: TRL from trainer.train()'s start to its last step; whetstone from when "
    "every actor was ready (to the 30 s row before) to its last step, its own held-out rounds "
    "included (kind to TRL; clocks.training.shorter_by_at_most in the seed file bounds the row).",
    "Samples: both sides' updates consume batch_size judged attempts each; whetstone trains on "
    "those whose group's rewards differ and leaves the rest out, TRL gives them advantage 0 "
    "(samples.with_signal / samples.trained).",
    "whetstone's CPU to reach TRL's final reward comes from its own held-out rounds (the stack's "
    "CPU when the round was reported; its evaluator's path, not this bench's function: "
    "initial_reward_two_paths shows the difference at version 0) or else from its final policy.",
    "TRL trains synchronously on-policy (generate the batch, judge, one update); whetstone "
    "overlaps generation, judging and training with bounded staleness and picks tasks from the "
    "same list by its curriculum; TRL draws them by the mix weights.",
]
"How the figures were measured."

LONGER_NOTE = (
    "With --whetstone-updates, whetstone trains on past TRL's update count in the same run: "
    "'whetstone' is then its policy at TRL's count (a kept checkpoint, exported), compared at "
    "equal samples; 'whetstone_final' its last policy, whose evaluation its whole-run clock "
    "counts. Reaching TRL's final reward with the policy at TRL's count is charged the stack's "
    "CPU at that step, the run's CPU after its last step and that policy's evaluation.")
"The note of a report whose whetstone side trained longer than TRL's."


def build(out_dir: Path) -> dict:
    """The report of the seed files in `out_dir`."""
    paths = sorted(out_dir.glob("seed-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    if not paths:
        raise FileNotFoundError(f"{out_dir}: no seed-<n>.json files")
    records = [json.loads(p.read_text()) for p in paths]
    protocols = {r["protocol"] for r in records}
    if len(protocols) > 1:
        raise ValueError(f"{out_dir}: seed files of several protocols {sorted(protocols)}; "
                         "keep one protocol's seeds in a folder")
    report = {"protocol": records[0]["protocol"], "files": [p.name for p in paths],
              "per_seed": [seed_report(r) for r in records], "pooled": pooled(records)}
    report["summary"] = summary(report)
    report["notes"] = NOTES + ([LONGER_NOTE] if any(
        "at_trl_updates" in r["whetstone"] for r in records) else [])
    return report


def write(out_dir: Path) -> dict:
    """Build the report and write it as `out_dir/report.json`."""
    report = build(out_dir)
    (out_dir / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir", help="a folder of seed-<n>.json files")
    p.add_argument("--check", action="store_true", help="compare with report.json; 1 if it differs")
    args = p.parse_args(argv)
    out = Path(args.out_dir)
    try:
        report = build(out)
    except FileNotFoundError as exc:
        print(f"vs_trl_report: {exc}; run bench/vs_trl/vs_trl.py --out-dir {out} first",
              file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"vs_trl_report: {exc}", file=sys.stderr)
        return 2
    if args.check:
        kept = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
        if kept != json.loads(json.dumps(report)):
            print(f"vs_trl_report: {out}/report.json differs from what its seed files give", file=sys.stderr)
            return 1
        print(f"{out}/report.json: every figure recomputed from {', '.join(report['files'])}")
        return 0
    write(out)
    print("\n".join(report["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
