"""The judge's configuration: the `[judge]` table, its `[judge.reward]` weights and the
optional `[judge.model_judge]` (a model asked what tests cannot settle; off by default).

Consumes nothing; declares how rewards are composed, how many turns and infrastructure
retries an attempt gets, and how much feedback a continuation carries. Validated with the
run config; importable without any heavy dependency.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from bus.section import Section

Weight = Annotated[float, msgspec.Meta(ge=0, le=10)]
QualityWeight = Annotated[float, msgspec.Meta(ge=0, le=1)]


class QualityConfig(Section):
    """Quality bonuses of a passing attempt, measured inside the sandbox (`judging.quality`).
    Every weight 0 (the default) turns them off: no measurement, no component."""

    lint: QualityWeight = 0.0
    "Bonus for code without lint findings (flake8 with ruff's default rules: E4, E7, E9, F)."
    types: QualityWeight = 0.0
    "Bonus for code without type-check errors (mypy, untyped functions checked too)."
    runtime: QualityWeight = 0.0
    "Bonus for hidden tests that take no more CPU than `slower_than` times the reference's."
    findings_to_zero: Annotated[int, msgspec.Meta(ge=1, le=100)] = 5
    "Lint findings (or type errors) at which that bonus reaches 0; it falls linearly from 0 findings."
    slower_than: Annotated[float, msgspec.Meta(ge=1, le=100)] = 2.0
    ("Runtime bonus is whole up to this many times the reference's CPU time and 0 at twice "
     "as many, so timing noise on fast code costs nothing.")
    time_s: Annotated[float, msgspec.Meta(gt=0, le=120)] = 8.0
    "Wall and CPU seconds added to a job's limits for the measurements (the tests' budget is untouched)."

    @property
    def on(self) -> bool:
        return self.total > 0

    @property
    def total(self) -> float:
        """The most quality can add to a reward."""
        return self.lint + self.types + self.runtime


class RewardConfig(Section):
    """How the layers become one reward, `[judge.reward]` (`judging.reward.compose`)."""

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
    quality: QualityConfig = QualityConfig()
    ("Bonuses for lint, type errors and runtime, given only to an attempt that passes "
     "([judge.reward.quality]); off by default.")
    crash_keeps_format: bool = True
    ("A failure the judge attributes to a crash (`model.runtime_error`) keeps the format "
     "bonus; false gives it none, so a program that crashes scores below one that runs and "
     "answers wrong.")
    hack: float | None = None
    ("Reward of an attempt flagged as a hack, replacing every other term; None is `minimum`. "
     "It must be strictly below the lowest reward an honest attempt can get (see `JudgeConfig`), "
     "so in a group a hack always gets a lower advantage than an honest failure.")

    def __post_init__(self) -> None:
        if self.minimum >= self.maximum:
            raise ValueError(f"minimum ({self.minimum}) must be below maximum ({self.maximum})")
        if self.hack is not None and not self.minimum <= self.hack < self.maximum:
            raise ValueError(f"hack ({self.hack}) must lie in [minimum, maximum)")
        if self.visible + self.hidden + self.robustness <= 0:
            raise ValueError("visible, hidden and robustness weights cannot all be 0")
        best = self.tests + self.format + self.quality.total
        if self.quality.on and best > self.maximum + 1e-9:
            raise ValueError(
                f"quality weights ({self.quality.total:g}) leave no room: tests + format + quality "
                f"= {best:g} exceeds maximum ({self.maximum:g}), so clipping would take quality "
                "back off a clean pass; lower judge.reward.tests or format by the quality total "
                "(configs/quality.toml shows one way)")
        if self.quality.total >= self.tests:
            raise ValueError(
                f"quality weights ({self.quality.total:g}) must stay below the tests weight "
                f"({self.tests:g}): correctness must outweigh quality")

    @property
    def hack_reward(self) -> float:
        """What a flagged hack scores."""
        return self.minimum if self.hack is None else self.hack

    def lowest_honest(self, max_turns: int) -> float:
        """The lowest reward an attempt not flagged as a hack can get in `max_turns` turns:
        code that does not compile (or passes nothing, if that is lower) on its last turn."""
        worst = min(self.compile_error, 0.0) - self.turn_penalty * (max_turns - 1)
        return min(max(worst, self.minimum), self.maximum)


DEFAULT_PROMPT = (
    "You review one attempt at a programming task that already passed the task's tests. "
    "Say whether it really does what the task asks beyond those tests: no special-casing of "
    "the visible inputs or expected outputs, no hard-coded answers, readable enough to "
    "maintain. Answer with one JSON object and nothing else: "
    '{"verdict": "ok" or "suspect", "confidence": a number from 0 to 1, '
    '"reason": "one sentence"}.')


class ModelJudgeConfig(Section):
    """A model asked, through any OpenAI-compatible endpoint (POST /v1/chat/completions),
    about attempts that passed the tests. Its answer is a flag for people, never a reward."""

    enabled: bool = False
    "Ask the model (`whet review --model-judge`, `--calibrate`)."
    base_url: str = ""
    "Endpoint root, e.g. 'http://127.0.0.1:8000' (the path /v1/chat/completions is added)."
    model: str = ""
    "Model name sent in the request."
    api_key_env: str = ""
    "Name of the environment variable holding the API key ('' sends no key); never the key."
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=600)] = 30.0
    "Seconds one request may take, connection included."
    retries: Annotated[int, msgspec.Meta(ge=0, le=5)] = 1
    "Re-asks after an outage (timeout, refused connection, 5xx, malformed answer)."
    prompt: str = DEFAULT_PROMPT
    "System prompt; it must ask for the JSON object {verdict, confidence, reason}."
    max_chars: Annotated[int, msgspec.Meta(ge=200, le=200_000)] = 8000
    "Most characters of the task and the attempt sent to the model."
    threshold: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    "Confidence below which the model abstains (its trial goes to people); None: `threshold_file`."
    threshold_file: str = ""
    "A file written by `whet review --calibrate` whose `threshold` is used when `threshold` is None."
    target_agreement: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.9
    "Agreement with people's labels that `--calibrate` chooses the threshold to reach."

    def __post_init__(self) -> None:
        if not self.enabled:
            return
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https:// when enabled, got "
                             f"{self.base_url!r}")
        if not self.model:
            raise ValueError("model must name the model to ask when enabled")
        if self.api_key_env and not self.api_key_env.replace("_", "").isalnum():
            raise ValueError(f"api_key_env must be an environment variable's name, got "
                             f"{self.api_key_env!r}")


class JudgeConfig(Section):
    """The judge's section, `[judge]`: turns, retries, feedback, and the reward."""

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
    model_judge: ModelJudgeConfig = ModelJudgeConfig()
    "The optional model judge: a flag for people on passing attempts, never a reward."
    truncated: Literal["judged", "fail"] = "judged"
    ("A training answer whose last turn was cut at the token limit (finish_reason 'length'). "
     "judged: judged on its text like any other (a code block the limit left open fails the format, "
     "code cut mid-line fails to compile, but one whose tests pass still earns their reward), "
     "and trained. fail: the model's failure whatever its text holds (`model.truncated`, "
     "the reward of code that does not compile: the lowest an honest answer gets), and "
     "trained. Held-out and validation answers are always judged, so rounds stay comparable; "
     "a tool episode's final workspace is judged either way.")
    session_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=600)] = 20.0
    ("Seconds a tool episode's executor has to answer one session request, beyond twice the "
     "task's own timeout; no answer drops the attempt (infra.session_lost).")

    def __post_init__(self) -> None:
        r = self.reward
        honest = r.lowest_honest(self.max_turns)
        if r.hack_reward >= honest:
            raise ValueError(
                f"reward.hack ({r.hack_reward:g}) must be below the lowest reward an honest attempt "
                f"can get ({honest:g}: compile_error {r.compile_error:g} minus turn_penalty "
                f"{r.turn_penalty:g} for each of {self.max_turns - 1} turns after the first, clipped "
                f"to minimum {r.minimum:g}), or a hack would tie or outrank an honest failure: lower "
                "judge.reward.hack (or minimum, which it defaults to), or raise compile_error, "
                "lower turn_penalty or judge.max_turns so that the honest floor stays above it")
