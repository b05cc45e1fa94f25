"""The verdict of bench/vs_trl/vs_trl.py: the goal's ratios, the findings in sentences, the caveats.

Consumes the TRL side's and the whetstone side's results (plain dicts: curves, held-out
points with the CPU seconds at which each policy existed, samples and clocks); produces the
goal record (does whetstone reach TRL's final held-out reward in at most 0.7x TRL's CPU
seconds, with at least 1.3x its samples per second?), sentences that say which side wins
each, and the notes on how the two sides were measured. Pure functions; it measures nothing.
"""

from __future__ import annotations

GOAL_CPU_RATIO, GOAL_RATE_RATIO = 0.7, 1.3


NOTES = [
    "cpu_s on both sides is the stack's meter (runtime.stack.progress.stack_cpu_seconds): the "
    "process(es), reaped children and live children. CPU inside sandboxed jobs "
    "(cgroup-measured) counts on neither; whetstone.sandbox_cpu_s (every job of the run: "
    "gating, training, held-out) and trl.sandbox_cpu_s (the reward's jobs) give it apart.",
    "Kind to TRL: its clocks start when its model loads, after its imports and the gating of "
    "its training tasks (trl.intake) and leave out its held-out rounds (trl.heldout.eval_cpu_s); "
    "whetstone's start with the stack and include its imports in every process, its gating of "
    "every train and held-out candidate, and its held-out rounds (versions 0, every_versions, ...).",
    "CPU seconds inflate when other processes compete for the cores (torch's OpenMP threads "
    "spin while they wait): run both sides on an otherwise idle machine.",
    "whetstone's cpu_s_reached for a version is the stack's CPU when that version was "
    "published (train.csv); for version 0, when its round was reported (eval.csv).",
    "The initial weights, TRL's final policy and whetstone's final checkpoint "
    "(whetstone.final_eval) are evaluated here, one after another on the evaluator's path "
    "and tasks: that end comparison is like for like. whetstone's rounds during the run "
    "(whetstone.heldout) come from its own evaluator, whose greedy bf16 attempts share "
    "batches with training work; trl.heldout.initial is the same weights as whetstone's "
    "version 0, so the gap between those two is the noise of the two paths.",
    "TRL trains on-policy and synchronously (generate the batch, judge, one update); whetstone "
    "async overlaps generation, judging and training with bounded staleness and picks tasks "
    "by its curriculum, TRL draws the same gated pool by the mix weights.",
    "A dropped attempt is None for TRL: out of its group's baseline, advantage 0, but its "
    "tokens still count in TRL's loss normaliser; whetstone leaves it out of training.",
]


def goal(trl: dict, whet: dict) -> dict:
    """The issue's two ratios, and which side each favours. whetstone's held-out points are
    its evaluator's rounds and its final checkpoint evaluated here, whichever came first."""
    target = trl["heldout"]["final"]["reward"]
    points = [{**h, "source": "evaluator round"} for h in whet["heldout"]]
    if whet.get("final_eval"):
        points.append({**whet["final_eval"], "source": "final checkpoint, this bench's path"})
    reached = [h for h in sorted(points, key=lambda h: h["cpu_s_reached"] or 0.0)
               if h["reward"] is not None and target is not None and h["reward"] >= target]
    first = reached[0] if reached else None
    cpu_ratio = round(first["cpu_s_reached"] / trl["cpu_s"], 3) if first and trl["cpu_s"] else None
    rate = lambda side, clock: side["samples"] / side[clock] if side.get(clock) else None  # noqa: E731
    rates = {f"{name}_{clock}": rate(side, clock) for name, side in (("trl", trl), ("whetstone", whet))
             for clock in ("wall_s", "cpu_s")}
    ratio = lambda clock: (round(rates[f"whetstone_{clock}"] / rates[f"trl_{clock}"], 3)  # noqa: E731
                           if rates[f"whetstone_{clock}"] and rates[f"trl_{clock}"] else None)
    return {"trl_final_heldout_reward": target, "trl_cpu_s": trl["cpu_s"],
            "whetstone_reached_at_version": first["version"] if first else None,
            "whetstone_reached_by": first["source"] if first else None,
            "whetstone_cpu_s_to_reach": first["cpu_s_reached"] if first else None,
            "cpu_ratio": cpu_ratio, "cpu_ratio_goal": GOAL_CPU_RATIO,
            "cpu_goal_met": cpu_ratio is not None and cpu_ratio <= GOAL_CPU_RATIO,
            "samples_per_s": {k: round(v, 4) if v else None for k, v in rates.items()},
            "samples_per_s_ratio": ratio("wall_s"), "samples_per_cpu_s_ratio": ratio("cpu_s"),
            "samples_per_s_goal": GOAL_RATE_RATIO,
            "samples_per_s_goal_met": (ratio("wall_s") or 0) >= GOAL_RATE_RATIO}


def findings(g: dict, trl: dict, whet: dict) -> list[str]:
    """The measured outcome in sentences, saying where TRL wins."""
    out = []
    target, scored = g["trl_final_heldout_reward"], [h for h in whet["heldout"] if h["reward"] is not None]
    if target is None:
        out.append("TRL's final policy has no held-out reward (every attempt dropped).")
    elif g["whetstone_reached_at_version"] is None:
        best = max(scored, key=lambda h: h["reward"], default=None)
        out.append(f"TRL wins on held-out reward: whetstone never reached TRL's final {target:+.4f}"
                   + (f" (its best: {best['reward']:+.4f} at version {best['version']})." if best else "."))
    else:
        side = "whetstone wins" if g["cpu_goal_met"] else "TRL wins on CPU"
        out.append(f"{side}: whetstone reached TRL's final held-out reward {target:+.4f} at version "
                   f"{g['whetstone_reached_at_version']} after {g['whetstone_cpu_s_to_reach']} CPU s, "
                   f"{g['cpu_ratio']}x TRL's {g['trl_cpu_s']} CPU s (goal <= {GOAL_CPU_RATIO}).")
    ratio = g["samples_per_s_ratio"]
    if ratio is not None:
        side = "whetstone wins" if ratio >= GOAL_RATE_RATIO else "TRL wins on throughput"
        out.append(f"{side}: whetstone trained {ratio}x TRL's samples per wall second and "
                   f"{g['samples_per_cpu_s_ratio']}x per CPU second (goal >= {GOAL_RATE_RATIO}).")
    final = whet.get("final_eval")
    if final and final.get("reward") is not None and target is not None:
        side = "whetstone" if final["reward"] >= target else "TRL"
        pair = final["paired_with_trl_final"]
        out.append(f"Final policies on the same path: whetstone (version {final['version']}) "
                   f"{final['reward']:+.4f}, pass rate {final['overall']:.3f}; TRL {target:+.4f}, "
                   f"pass rate {trl['heldout']['final']['overall']:.3f}; {side} ahead (paired over "
                   f"{pair.get('tasks')} tasks: change {pair.get('reward_change')}, t {pair.get('t')}).")
    v0 = next((h for h in scored if h["version"] == 0), None)
    initial = trl["heldout"]["initial"]["reward"]
    if v0 is not None and initial is not None and abs(v0["reward"] - initial) > 1e-9:
        out.append(f"The initial weights scored {initial:+.4f} here and {v0['reward']:+.4f} in "
                   "whetstone's own version-0 round: differences below that are evaluation noise.")
    return out
