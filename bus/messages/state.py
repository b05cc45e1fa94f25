"""State and monitoring messages: sampler and evaluator state, held-out rounds, trials and
the monitor's metrics snapshots.

Consumes nothing; declares what the evaluator, sampler and monitor keep for others to read.
No I/O.
"""

from __future__ import annotations

from bus.messages.base import Message, Part
from bus.messages.work import Verdict


# --- task-side state -----------------------------------------------------------------------


class SamplerState(Message, tag="whet.sampler_state.v1"):
    """Sampler to itself across restarts (KV whet-run `sampler.state`): admission counters."""

    admitted: int = 0
    "Training attempts admitted (group_size per assignment)."
    judged: int = 0
    "Training attempts whose final verdict was counted."
    produced: int = 0
    "Counted verdicts that were trainable."
    next_seq: int = 0
    "Sequence number of the next assignment; assignment ids derive from it."
    counted: list[str] = []
    "Verdict ids counted since the previous save: a redelivery of one is not counted again."
    refunded: int = 0
    "Produced attempts refill gave back (members of finished groups without a signal)."
    open_groups: dict[str, dict[str, float | None]] = {}
    "refill: rewards so far of each group not yet finished (group id -> verdict id -> reward)."


class EvalPoint(Part):
    """One evaluation: held-out pass rates of one policy version."""

    version: int
    "Policy version of the attempts."
    pass_rates: dict[str, float] = {}
    "Held-out pass rate by domain."
    attempts: dict[str, int] = {}
    "Held-out attempts judged by domain."
    overall: float = 0.0
    "Pass rate over every held-out attempt of this version."
    rewards: dict[str, float] = {}
    "Mean judge reward of the held-out attempts by domain (partial credit shows here first)."
    reward: float | None = None
    "Mean judge reward over every held-out attempt of this version."
    train_reward: float | None = None
    "Mean training reward of attempts sampled by this version, if any were judged."
    complete: bool = True
    "False when the round timed out before every verdict arrived."


class TaskOutcome(Part):
    """The attempts at one held-out task in one round."""

    domain: str
    "Task domain."
    passed: int = 0
    "Attempts that passed."
    judged: int = 0
    "Attempts judged (dropped ones left out)."
    rung: int = 0
    "Rung of the task on its environment's ladder (`envs.strata.rung_of`)."


class HeldoutScore(Part):
    """Held-out pass rate of a set of tasks in one round, with its 95% interval and its change
    since the baseline version on the tasks both judged (`envs.stats` says how)."""

    rate: float = 0.0
    "pass@1: the mean over tasks of attempts passed / attempts judged."
    low: float = 0.0
    "Lower end of the 95% Wilson interval, the task as the unit."
    high: float = 1.0
    "Upper end of that interval."
    tasks: int = 0
    "Tasks with at least one judged attempt."
    attempts: int = 0
    "Attempts judged."
    paired: int = 0
    "Tasks judged both here and at the baseline version."
    gained: int = 0
    "Paired tasks whose pass rate rose since the baseline (failed then, pass now, at k = 1)."
    lost: int = 0
    "Paired tasks whose pass rate fell since the baseline."
    p_value: float = 1.0
    "Exact two-sided sign test of gained against lost (McNemar's at k = 1); 1 with neither."
    delta: float = 0.0
    "Mean change of the per-task pass rate over the paired tasks."


class EvalRound(Message, tag="whet.eval_round.v1"):
    """Evaluator to progress, the monitor and `whet status`, through KV whet-run
    (`evaluator.round.<round>.<version>`, see `bus.subjects.eval_round_key`): the held-out
    result of one policy version in one round, written once when the round is reported."""

    round: int
    "Policy version the round was published for."
    version: int
    "Policy version of these attempts (the round's own when the learner holds for eval)."
    overall: HeldoutScore
    "Every held-out task."
    trained: HeldoutScore | None = None
    "Tasks of the domains the mix trains on: where learning should show (None if none)."
    transfer: HeldoutScore | None = None
    "Tasks of the domains the mix never trains on: transfer (None if none)."
    domains: dict[str, HeldoutScore] = {}
    "Each domain."
    baseline_version: int = -1
    "Policy version the paired comparisons are made against (the first evaluated: 0)."
    samples_per_task: int = 1
    "Attempts sampled per task (k)."
    reward: float | None = None
    "Mean judge reward over every held-out attempt judged."
    rewards: dict[str, float] = {}
    "Mean judge reward by domain."
    train_reward: float | None = None
    "Mean training reward of attempts sampled by this version, if any were judged."
    complete: bool = True
    "False when the round timed out before every verdict arrived."
    dropped: int = 0
    "Attempts of the round the judge dropped (infrastructure)."
    tasks: dict[str, TaskOutcome] = {}
    "Every task's attempts, by task id: what the paired comparisons are computed from."
    reported_at: float = 0.0
    "Unix time the round was reported."
    split: str = "heldout"
    "The task set measured: 'heldout' (reported results) or 'validation' (for tuning)."
    rungs: dict[str, dict[int, HeldoutScore]] = {}
    "Each domain's tasks by rung (domain -> rung -> score), each paired with the baseline."


class EvaluatorState(Message, tag="whet.evaluator_state.v1"):
    """Evaluator to itself across restarts (KV whet-run `evaluator.state`); the learner's
    hold reads `last_reported`, `whet status` reads `latest_key`."""

    last_round: int = -1
    "Policy version of the last round published."
    last_reported: int = -1
    "Policy version of the newest round reported (the learner's hold waits for it)."
    history: list[EvalPoint] = []
    "Recent evaluations, oldest first."
    baseline_version: int = -1
    "Policy version of the first evaluation (normally 0), which every later one is paired with."
    baseline: dict[str, TaskOutcome] = {}
    "That evaluation's task outcomes, by task id."
    latest_key: str = ""
    "whet-run key of the newest `EvalRound` ('' before the first)."


# --- monitoring and traces -----------------------------------------------------------------


class Trial(Message, tag="whet.trial.v1"):
    """Recorder (the monitor) to the trials stream: one judged attempt, end to end.

    `verdict.attempt` carries the task and its prompt, every turn with its completion,
    feedback, execution result and the generator and executor instances that handled it;
    the verdict itself carries reward, outcome, cause, layers and the judge instance.
    """

    trial_id: str
    "The attempt id (equal to the verdict id)."
    run_id: str
    "Run the trial belongs to."
    verdict: Verdict
    "The final verdict, with the whole attempt inside."
    current_version: int = -1
    "Latest published policy version when the trial was recorded (-1 if none yet)."
    recorded_at: float = 0.0
    "Unix time of recording."
    recorder: str = ""
    "Instance id of the recorder."


class RewardStats(Part):
    """Summary of the rewards in one window (dropped verdicts have none and are left out)."""

    count: int = 0
    "Rewards in the window."
    mean: float = 0.0
    "Mean reward."
    std: float = 0.0
    "Standard deviation."
    p10: float = 0.0
    "10th percentile."
    p50: float = 0.0
    "Median."
    p90: float = 0.0
    "90th percentile."
    min: float = 0.0
    "Smallest reward."
    max: float = 0.0
    "Largest reward."


class PassRate(Part):
    """Pass rate of one (purpose, domain, difficulty) cell over the window."""

    purpose: str
    "'train' or 'eval'."
    domain: str
    "Task domain."
    difficulty: str
    "Difficulty bucket: the lower bound of the task's difficulty, as text."
    passed: int
    "Verdicts with outcome 'pass'."
    judged: int
    "Verdicts that were judged (dropped ones left out)."
    rate: float
    "passed / judged."


class QueueDepth(Part):
    """One durable consumer's backlog."""

    stream: str
    "Stream name."
    consumer: str
    "Durable consumer name ('' for a stream without consumers)."
    stored: int = 0
    "Messages stored in the stream."
    pending: int = 0
    "Messages not yet delivered to the consumer (its lag)."
    in_flight: int = 0
    "Delivered and not yet acked."
    redelivered: int = 0
    "Delivered more than once and not yet acked."


class MetricsSnapshot(Message, tag="whet.metrics.v1"):
    """Monitor to `whet status` and Prometheus (KV whet-run `monitor.metrics`): run health."""

    at: float
    "Unix time of the snapshot."
    monitor: str = ""
    "Instance id of the monitor."
    window_s: float = 0.0
    "Length of the window rates and rewards are computed over."
    verdicts: int = 0
    "Verdicts in the current window."
    outcomes_total: dict[str, int] = {}
    "'<purpose>.<outcome>' to count, since the monitor started."
    rates: dict[str, float] = {}
    """execution_success_rate, timeout_rate, infra_failure_rate, hack_rate, one
    `hack_rate.<kind>` per hack class seen, train_pass_rate and eval_pass_rate over the window."""
    reward: RewardStats = RewardStats()
    "Rewards of the current window."
    reward_previous: RewardStats = RewardStats()
    "Rewards of the window before it."
    reward_drift: dict[str, float] = {}
    "mean_delta (current - previous) and ks (Kolmogorov-Smirnov distance) of the two."
    pass_rates: list[PassRate] = []
    "Pass rate by purpose, domain and difficulty."
    staleness: dict[str, int] = {}
    """Version lag ('0', '1', ..., last bucket '<cap>+') to verdict count in the window: the
    policy version current when recorded minus the attempt's."""
    queues: list[QueueDepth] = []
    "Backlog of every work consumer."
    throughput: dict[str, float] = {}
    "Gauges summed or averaged over live actors (see bus.gauges)."
    heldout_pass_rate: float | None = None
    "Latest held-out pass rate the evaluator reported, if any."
    heldout_version: int = -1
    "Policy version that held-out pass rate belongs to."
    alerts: list[str] = []
    "Names of the alerts active now."
    alert_trials: dict[str, list[str]] = {}
    """Active alert name to the ids of the trials behind it in the current window
    (`whet trace ID`): the top-reward training verdicts for reward_rising_heldout_flat, the
    latest flagged verdicts for hack_rate and each `hack_rate.<kind>`."""
