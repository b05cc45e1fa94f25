"""The judge's configuration: the `[judge]` table and its `[judge.reward]` weights.

Consumes nothing; declares how rewards are composed, how many turns and infrastructure
retries an attempt gets, and how much feedback a continuation carries. Validated with the
run config; importable without any heavy dependency.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from bus.section import Section

Weight = Annotated[float, msgspec.Meta(ge=0, le=10)]


class RewardConfig(Section):
    compile_error: Annotated[float, msgspec.Meta(le=0)] = -0.5
    "Reward for code that does not parse or compile (replaces every other term)."
    tests: Weight = 0.9
    "Weight of the weighted test pass ratio."
    format: Weight = 0.1
    "Bonus when the attempt follows the required output format."
    turn_penalty: Weight = 0.05
    "Subtracted for each turn after the first."
    visible: Weight = 0.2
    "Weight of the visible tests inside the pass ratio."
    hidden: Weight = 0.6
    "Weight of the hidden tests inside the pass ratio."
    robustness: Weight = 0.2
    "Weight of edge-case and randomized tests inside the pass ratio."
    minimum: float = -1.0
    "Lowest total reward (clipped)."
    maximum: float = 1.0
    "Highest total reward (clipped)."
    hack: float | None = None
    ("Reward of an attempt flagged as a hack, replacing every other term; None is `minimum`. "
     "It may not exceed the lowest reward an honest attempt can get (see `JudgeConfig`), so in "
     "a group a hack never gets a higher advantage than an honest failure.")

    def __post_init__(self) -> None:
        if self.minimum >= self.maximum:
            raise ValueError(f"minimum ({self.minimum}) must be below maximum ({self.maximum})")
        if self.hack is not None and not self.minimum <= self.hack < self.maximum:
            raise ValueError(f"hack ({self.hack}) must lie in [minimum, maximum)")
        if self.visible + self.hidden + self.robustness <= 0:
            raise ValueError("visible, hidden and robustness weights cannot all be 0")

    @property
    def hack_reward(self) -> float:
        """What a flagged hack scores."""
        return self.minimum if self.hack is None else self.hack

    def lowest_honest(self, max_turns: int) -> float:
        """The lowest reward an attempt not flagged as a hack can get in `max_turns` turns:
        code that does not compile (or passes nothing, if that is lower) on its last turn."""
        worst = min(self.compile_error, 0.0) - self.turn_penalty * (max_turns - 1)
        return min(max(worst, self.minimum), self.maximum)


class JudgeConfig(Section):
    reward: RewardConfig = RewardConfig()
    "How the layers become one reward."
    max_turns: Annotated[int, msgspec.Meta(ge=1, le=16)] = 1
    "Turns an attempt may take; a failed turn with turns left goes back with feedback."
    max_retries: Annotated[int, msgspec.Meta(ge=0, le=10)] = 2
    "Re-runs on another executor after an infrastructure failure, before it is dropped."
    feedback_chars: Annotated[int, msgspec.Meta(ge=100, le=100_000)] = 2000
    "Most characters of feedback shown to the model for another turn."
    max_in_flight: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 64
    "Messages one judge instance holds at once, per input."
    session_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=600)] = 20.0
    ("Seconds a tool episode's executor has to answer one session request, beyond twice the "
     "task's own timeout; no answer drops the attempt (infra.session_lost).")

    def __post_init__(self) -> None:
        honest = self.reward.lowest_honest(self.max_turns)
        if self.reward.hack_reward > honest:
            raise ValueError(f"reward.hack ({self.reward.hack_reward}) must not exceed the lowest "
                             f"reward an honest attempt can get ({honest}): a hack would then "
                             "outrank an honest failure")
