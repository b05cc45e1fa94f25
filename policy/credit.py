"""Per-step credit as pure functions: group-relative advantages over steps that start from the
same workspace state, and the per-token advantages they give a trajectory.

Consumes, for each attempt of one group, its steps as (state hash, step reward) pairs (None
for an attempt left out of the group's advantage: dropped, or without a reward) and the
token spans of those steps; produces an advantage per step (`step_advantages`) and an
advantage per token (`token_advantages`). The hidden tests stay the objective; the steps
only shape it within it. Nothing here reads messages, models or the bus.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from policy.objective import group_advantages

Steps = Sequence[tuple[str, float]]
"One attempt's steps: (workspace state hash at the step's start, step reward)."


def step_advantages(attempts: Sequence[Steps | None], scale: bool = True) -> list[list[float] | None]:
    """Each step's reward minus the mean over the group's steps from the same state (divided by
    their std with `scale`); an attempt given as None stays None. Steps are pooled across the
    group's attempts by the workspace state they started from (`StepCredit.state`), each pool
    getting `objective.group_advantages` of its rewards: two attempts whose first steps start
    from the same workspace share that step's baseline, and a step whose state no other step
    shares gets 0 (no baseline, no signal)."""
    pools: dict[str, list[tuple[int, int]]] = {}
    for a, steps in enumerate(attempts):
        for s, (state, _) in enumerate(steps or ()):
            pools.setdefault(state, []).append((a, s))
    out: list[list[float] | None] = [None if steps is None else [0.0] * len(steps)
                                     for steps in attempts]
    for members in pools.values():
        rewards = [attempts[a][s][1] for a, s in members]  # type: ignore[index]
        for (a, s), adv in zip(members, group_advantages(rewards, scale)):
            out[a][s] = float(adv or 0.0)  # type: ignore[index]
    return out


def token_advantages(length: int, trajectory_advantage: float,
                     spans: Sequence[tuple[int, int]], advantages: Sequence[float],
                     weight: float = 1.0) -> np.ndarray:
    """Per-token advantages of a trajectory of `length` tokens: the trajectory's advantage,
    plus `weight` times the step's advantage inside each step's [start, end) span (cut to
    `length`, as the learner cuts trajectories to its context)."""
    out = np.full(length, trajectory_advantage, np.float32)
    for (start, end), adv in zip(spans, advantages):
        out[max(start, 0):max(min(end, length), 0)] += weight * adv
    return out
