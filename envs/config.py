"""Config sections of the task side: `[envs]` (with `[envs.gates]`), `[sampler]`, `[evaluator]`.

Consumes TOML tables (through `runtime.config`); declares typed, bounded sections. Importable
without torch or a bus connection. It does not load environments (`envs.registry` does).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from bus.section import Section
from sandbox.config import SandboxConfig

Share = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Positive = Annotated[float, msgspec.Meta(gt=0.0)]


class EpisodeBudgets(Section):
    """Budgets of a tool episode, `[envs.use.<name>] budgets = { max_steps = 6 }`: each one set
    replaces the environment's; unset ones stay as the environment made them."""

    max_steps: Annotated[int, msgspec.Meta(ge=1)] | None = None
    "Most tool calls in one episode."
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    "Most completion tokens over the episode's turns."
    result_chars: Annotated[int, msgspec.Meta(ge=1)] | None = None
    "Most characters of one tool result shown to the model."

    def set(self) -> dict[str, int]:
        """The budgets given, by name."""
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}


class EnvEntry(Section):
    """One enabled environment, `[envs.use.<name>]`: where its tasks come from, how many, its splits."""

    target: str = ""
    "'module:ATTRIBUTE' of an `Environment`; empty means the built-in of the entry's name."
    file: str = ""
    "A JSONL file of Task records to use instead of a generator (bad lines are reported)."
    verifiers: str = ""
    ("A verifiers 0.4.0 taskset id (an importable module exporting a `vf.Taskset` in `__all__`) "
     "to use instead of a generator; its `@vf.reward` methods score replies in the sandbox.")
    count: Annotated[int, msgspec.Meta(ge=0)] = 300
    "Tasks to generate (or, for a file, most tasks to read)."
    heldout_share: Share = 0.1
    "Share of its tasks set aside for evaluation, chosen by content hash (stable)."
    validation_share: Share = 0.0
    ("Share set aside for choosing settings (`[evaluator] split = \"validation\"`), chosen "
     "by content hash after the held-out share: never trained on, never held out.")
    all_heldout: bool = False
    "Every task is held out (a benchmark such as HumanEval): never trained on."
    levels: list[Annotated[int, msgspec.Meta(ge=0)]] = []
    "Rungs to generate; empty generates every rung evenly."
    gate: bool = True
    "Run the intake gates on its tasks."
    checks: list[Literal["determinism", "mutation"]] | None = None
    "Gates for this environment instead of `[envs.gates].checks` (a benchmark may skip mutation)."
    budgets: EpisodeBudgets = EpisodeBudgets()
    ("A tool environment's episode budgets in place of its own (`envs.repository.BUDGETS`); "
     "they are how an episode runs, not what the task is: task ids and splits stay the same.")
    enabled: bool = True
    "False keeps the entry in the file but unused."


class GateConfig(Section):
    """The intake gates, `[envs.gates]`."""

    checks: list[Literal["determinism", "mutation"]] = msgspec.field(
        default_factory=lambda: ["determinism", "mutation"])
    "Gates besides validity and solvability, which always run."
    min_kill_rate: Share = 0.8
    "Least share of mutants the tests must kill."
    max_mutants: Annotated[int, msgspec.Meta(ge=1, le=500)] = 12
    "Most mutants per task (every operator kind is represented); runs stop once decided."
    mutant_timeout_s: Positive = 5.0
    "Wall-clock limit of one mutant run (mutants may loop forever)."
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=256)] = 2
    "Sandboxed runs at once."
    seed: int = 0
    "Seed of the mutant choice."
    sandbox: SandboxConfig = SandboxConfig()
    "Backend the gates run references and mutants in."
    keep_reports: bool = True
    ("Keep gate reports on disk ($WHET_GATE_CACHE or ~/.cache/whetstone/gates, keyed by task, "
     "gates and the judging code), so later runs on this machine skip gating those tasks.")


class EnvsConfig(Section):
    """The environments section, `[envs]`: which are enabled, the training mix, the gates."""

    use: dict[str, EnvEntry] = msgspec.field(default_factory=lambda: {
        "python_functions": EnvEntry(), "data_scripts": EnvEntry(),
        "structured_output": EnvEntry(),
        "humaneval": EnvEntry(all_heldout=True, checks=["determinism"])})
    "Enabled environments by name (`[envs.use.<name>]`)."
    mix: dict[str, Share] = msgspec.field(
        default_factory=lambda: {"python": 0.4, "data": 0.3, "structured": 0.3})
    "Training mix by domain; a domain left out (or 0) is not trained on: it measures transfer."
    gates: GateConfig = GateConfig()
    "Intake gates."
    train_ids: str = ""
    ("A file of task ids, one a line ('#' lines skipped): training uses only the listed tasks "
     "of the enabled environments (held-out and validation are unaffected), so a benchmark "
     "can give another trainer exactly the same training set. Empty: every training task.")
    skip_ids: str = ""
    ("A file of task ids, one a line, that training leaves out (held-out and validation are "
     "unaffected): a warm start with `rl_pool = \"undemonstrated\"` lists the tasks it "
     "demonstrated. Empty: none left out.")


class SamplerConfig(Section):
    """The sampler's section, `[sampler]`: the curriculum's band, ladder and replay, the pool."""

    band_low: Share = 0.2
    "Lower bound of the 'just out of reach' band of pass rates."
    band_high: Share = 0.8
    "Upper bound of the band."
    out_of_band_weight: Share = 0.05
    ("Weight of a task outside the band (always or never solved) relative to one inside. 1 "
     "(with unmeasured_weight 1) turns the band off: tasks of a rung are chosen uniformly, "
     "while the mix, the ladder and replay (which still prefers solved tasks) stay as they "
     "are. band_low = 0, band_high = 1 is not the same: no task is then ever 'solved', "
     "which changes replay too.")
    unmeasured_weight: Annotated[float, msgspec.Meta(ge=0.0)] = 1.0
    "Weight of a task not measured yet relative to one inside the band."
    ladder_offsets: list[int] = msgspec.field(default_factory=lambda: [-2, -1, 0, 1])
    "Rungs sampled, relative to a domain's frontier rung."
    ladder_weights: list[Annotated[float, msgspec.Meta(ge=0.0)]] = msgspec.field(
        default_factory=lambda: [0.1, 0.2, 0.5, 0.2])
    "Weight of each offset (the ladder's shape)."
    promote_at: Share = 0.6
    "Frontier pass rate at which a domain's frontier moves one rung up."
    demote_at: Share = 0.1
    "Frontier pass rate under which it moves one rung down."
    min_rung_attempts: Annotated[int, msgspec.Meta(ge=1)] = 32
    "Attempts measured at the frontier since it last moved before it may move again."
    replay_share: Share = 0.1
    "Share of assignments replaying easy tasks (below the frontier, or solved) against forgetting."
    without_replacement: bool = False
    ("A task drawn rests until every task of its domain and rung has been drawn (a pass, as "
     "TRL's sampler goes through its dataset); the band then orders the draws of a pass "
     "instead of drawing in-band tasks again and again. Replay still repeats easy tasks. "
     "Off: in bench/vs_trl's 40-task pools one task made 6 of 40 groups.")
    pass_over: Literal["rung", "ladder"] = "rung"
    ("What a pass of `without_replacement` covers. rung: every task of the drawn task's "
     "domain and rung. ladder: every task of the rungs the ladder reaches from the domain's "
     "frontier; a rung whose tasks all rest is skipped until the others are drawn, so a pass "
     "practises each of those tasks once, whatever the ladder's weights.")
    rate_memory: Share = 0.7
    "Weight old attempts keep each time a task is measured again (pass rates follow the policy)."
    max_batch: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 64
    "Most assignments admitted at once."
    min_pool: Annotated[int, msgspec.Meta(ge=1)] = 8
    "Gated tasks needed before sampling starts."
    pool_per_domain: Annotated[int, msgspec.Meta(ge=0)] = 0
    ("Accepted training tasks per domain after which intake stops gating that domain (0: "
     "gate them all). A run of a few dozen steps practises a few hundred tasks at most, and "
     "gating costs seconds of sandbox time per task. Domains outside `mix` are never gated "
     "for training.")
    snapshot_s: Positive = 30.0
    "Seconds between saves of per-task pass rates (counters are saved with every change)."
    repair_tasks: bool = False
    ("Turn tool episodes the model failed (not infrastructure, not a hack) into repair tasks "
     "that start from the failed attempt's last workspace (`envs.repair`), added to the pool "
     "of the same domain and rung. Never from held-out or validation tasks.")
    max_repair_tasks: Annotated[int, msgspec.Meta(ge=0)] = 64
    "Most repair tasks added to the pool (the first ones are kept)."

    def __post_init__(self) -> None:
        if self.band_low >= self.band_high:
            raise ValueError("band_low must be below band_high")
        if len(self.ladder_offsets) != len(self.ladder_weights) or not sum(self.ladder_weights):
            raise ValueError("ladder_offsets and ladder_weights need the same length and a "
                             "positive total")
        if self.demote_at >= self.promote_at:
            raise ValueError("demote_at must be below promote_at")


class EvaluatorConfig(Section):
    """The evaluator's section, `[evaluator]`: which versions, which held-out tasks, how many samples."""

    every_versions: Annotated[int, msgspec.Meta(ge=1)] = 1
    "Evaluate every N-th policy version (version 0, the initial weights, included)."
    initial_round: bool = True
    ("Evaluate version 0, the initial weights. Off where another run measured them on the "
     "same tasks (an ablation's variants share one); paired comparisons then start at the "
     "first version evaluated.")
    tasks_per_domain: Annotated[int, msgspec.Meta(ge=1)] = 40
    "Held-out tasks per domain in each round (the same ones every round)."
    domain_tasks: dict[str, Annotated[int, msgspec.Meta(ge=1)]] = {}
    ("Held-out tasks per round for the domains named here, in place of `tasks_per_domain` "
     "(e.g. a smaller transfer set: `{ humaneval = 40 }`).")
    split: Literal["heldout", "validation"] = "heldout"
    ("The set the rounds measure: 'heldout' for results, 'validation' (the environments' "
     "`validation_share`) while choosing settings, so the held-out set is never tuned on.")
    samples_per_task: Annotated[int, msgspec.Meta(ge=1, le=64)] = 1
    """Attempts per held-out task per round (k). Above 1 the pass rate is the unbiased pass@1
    (the mean over tasks of passes / k), with less variance than one greedy attempt; they are
    sampled with `[generator.eval_sampling]`, whose temperature must then be above 0 (k greedy
    attempts would be one attempt k times)."""
    round_timeout_s: Positive = 3600.0
    "A round reports what it has after this long, marked incomplete."
    hold_learner: bool = False
    """The learner publishes no version after an evaluated one until that version's round is
    reported (or `hold_s` passed). Needed only where the generator's engine cannot pin a
    version (vllm): the torch engine samples a round from a copy pinned at the round's version
    while training goes on. Off with such an engine: rounds may mix versions; each attempt
    counts under the version that made it."""
    hold_s: Positive = 1800.0
    "Longest the learner holds for one round."
    window: Annotated[int, msgspec.Meta(ge=2, le=100)] = 3
    "Evaluations compared when looking for reward rising without held-out gains."
    reward_rise: Annotated[float, msgspec.Meta(ge=0.0)] = 0.05
    "Rise in mean training reward over the window that counts as rising."
    heldout_tolerance: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0
    "Held-out pass-rate gain at or under which held-out counts as not rising."
