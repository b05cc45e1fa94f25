"""Every message that crosses the bus, declared once.

Consumes nothing; produces typed msgspec Structs that `bus.codec` turns into MessagePack.
It does no I/O and knows no subjects (those live in `bus.subjects`).

Rules for changing this file:
- Each top-level message carries its type and version in the tag field `t`
  (`whet.<name>.v<N>`). Evolve a message by adding fields with defaults at the end; a
  breaking change is a new tag and a new subject token.
- Anything a policy produced carries `policy_version` and a stable id, so a learner can tell
  how stale it is and a consumer can drop a duplicate.
- Token ids and logprobs travel as packed little-endian arrays (`bytes`), never as lists;
  `bus.codec.pack_ids`/`unpack_ids` and `pack_f32`/`unpack_f32` convert them.
- Unknown fields are ignored on decode, so an older reader accepts a newer writer's
  additions.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class Message(msgspec.Struct, kw_only=True, tag_field="t"):
    """Base of every top-level message; subclasses set `tag="whet.<name>.v<N>"`."""


class Part(msgspec.Struct, kw_only=True, frozen=True):
    """Base of structs nested inside messages: untagged, and frozen so they can be defaults."""


# --- tasks -----------------------------------------------------------------------------


class Verifier(Part):
    """How an attempt at a task is checked. Written by an environment, read by the judge.

    Kinds (the judging package implements each; environments produce them):

    - `python_io`: the attempt defines function `Task.entry_point`. `visible`, `hidden` and
      `extra["robustness"]` are JSON lists of cases `{"args": [...], "expected": value}`;
      only the args ever enter the sandbox, the judge compares return values outside it.
      `extra["compare"]` is "exact" (default), "float" (1e-6 relative) or "unordered".
    - `python_check`: HumanEval style. `hidden` is the test source defining
      `check(candidate)`; `extra["prefix"]` is the prompt code the completion continues;
      `reference` is the canonical completion.
    - `script_io`: the attempt is a Python script reading stdin (and files from the case)
      and writing stdout. Case lists as in python_io, each case
      `{"stdin": str, "files": {name: text}, "expected_stdout": str}`; `extra["compare"]`
      is "text" (trailing whitespace ignored) or "json" (parsed values equal).
    - `structured`: the attempt is a JSON document. `extra["schema"]` is a JSON Schema
      (subset: type, properties, required, items, enum, minimum, maximum, pattern) and
      `hidden` a JSON list of content rules `{"path": "a.b[0]", "equals": value}` (or
      "contains", "matches"). Nothing is executed.
    - `verifiers`: a task of a verifiers 0.4.0 taskset (`envs.verifiers_env`); the whole reply
      is scored in the sandbox by the task's `@vf.reward` methods (`judging.rubric`).
      `extra` holds `module`, `task_class`, `data_class`, `data` (the task data, JSON) and
      `files` (the module's source files, JSON); there is no reference.

    `reference`, where a kind has one, is a correct attempt (the solvability gate runs it).
    """

    kind: str
    "Which judge procedure reads this record, e.g. 'python_tests', 'io_diff', 'schema'."
    visible: str = ""
    "Tests shown to the model (source or JSON, as `kind` defines)."
    hidden: str = ""
    "Tests never shown to the model."
    reference: str = ""
    "Reference solution or reference outputs."
    extra: dict[str, str] = {}
    "Environment-specific verifier data (schemas, input generators, edge cases)."


class Limits(Part):
    """Resource limits for one sandboxed job. Defaults are finite on purpose."""

    timeout_s: float = 10.0
    "Wall-clock limit for the whole job."
    cpu_s: float = 10.0
    "CPU-time limit (RLIMIT_CPU) for the job's processes."
    memory_mb: int = 512
    "Memory limit, swap included."
    pids: int = 64
    "Most processes and threads alive at once."
    cpus: float = 1.0
    "CPU share, in cores."
    disk_mb: int = 64
    "Size of the writable scratch space."
    output_bytes: int = 65536
    "Most bytes kept of stdout and of stderr each; past it the job stops with output_limit."
    nofile: int = 256
    "Most open file descriptors."


class Task(Message, tag="whet.task.v1"):
    """A practice task. Environments produce it; it rides inside `TaskAssignment`."""

    task_id: str
    "Stable id, unique across environments ('<env>/<local id>')."
    env: str
    "Name of the environment that produced the task."
    env_version: str
    "Version of that environment; tasks of different versions never share an id."
    domain: str
    "Domain for curriculum and metrics (e.g. 'python', 'data', 'structured', 'humaneval')."
    prompt: str
    "What the model is shown."
    verifier: Verifier
    "How an attempt is checked."
    split: Literal["train", "heldout", "validation"] = "train"
    "Held-out and validation tasks are never sampled for training."
    difficulty: float = 0.0
    "Position on the environment's difficulty ladder, 0 is easiest."
    entry_point: str = ""
    "Name the attempt must define (a function, a script), if any."
    files: dict[str, str] = {}
    "Files placed beside the attempt, visible to it (inputs, fixtures)."
    runtime: str = "python"
    "Executor environment spec the task runs in."
    limits: Limits = Limits()
    "Limits for each execution of an attempt at this task."


class TaskAssignment(Message, tag="whet.assignment.v1"):
    """Sampler to generator: produce `group_size` attempts at `task`."""

    assignment_id: str
    "Stable id; doubles as the GRPO group id of the attempts it yields."
    task: Task
    "The task to attempt."
    group_size: int
    "How many independent attempts to sample."
    admitted_version: int
    "Policy version current when the sampler admitted this work."
    purpose: Literal["train", "eval"] = "train"
    "'eval' work is scored but never trained on."
    created_at: float = 0.0
    "Unix time of admission."


# --- attempts and execution -----------------------------------------------------------


class Turn(Part):
    """One model turn of an attempt: the context added before it, and what was sampled."""

    prompt_ids: bytes
    "Token ids (int32 LE) added to the context before sampling: the prompt, or feedback."
    completion_ids: bytes
    "Sampled token ids (int32 LE)."
    logprobs: bytes
    "Behaviour log-probabilities of `completion_ids` (float32 LE), one per token."
    completion: str
    "Decoded completion text."
    policy_version: int
    "Version of the weights that sampled this turn."
    generator: str = ""
    "Instance id of the generator that sampled this turn."
    finish_reason: str = ""
    "'stop', 'length' or an engine-specific reason."
    feedback: str = ""
    "Feedback shown to the model after this turn, if the attempt continued."
    execution: ExecutionResult | None = None
    "What running this turn's job produced (the judge records it; None if nothing ran)."
    executor: str = ""
    "Instance id of the executor that ran this turn's job ('' if none did)."


class Attempt(Message, tag="whet.attempt.v1"):
    """A trajectory at one task: generator to judge (to be checked), judge to executor (inside
    a request), judge to generator (a continuation), judge to learner (inside a verdict)."""

    attempt_id: str
    "Stable id: '<group_id>.<index>'."
    group_id: str
    "The assignment this attempt belongs to; attempts of a group share a task."
    index: int
    "Position within the group, 0-based."
    group_size: int
    "Attempts in the group."
    task: Task
    "The task attempted."
    turns: list[Turn]
    "Every turn so far, failed ones included."
    policy_version: int
    "Oldest policy version among the turns; staleness is measured from it."
    admitted_version: int = 0
    "Policy version when the sampler admitted the work."
    purpose: Literal["train", "eval"] = "train"
    "'eval' attempts are scored but never trained on."
    session: str = ""
    "Tool episodes: the executor instance holding the workspace ('' before it is opened)."
    workspace: dict[str, str] = {}
    "Tool episodes: the files the workspace held when the episode ended (what is judged)."
    refused: list[str] = []
    "Tool episodes: paths the episode tried to write outside its workspace."
    tool_calls: list[ToolCall] = []
    "Tool episodes: the call each turn made, in order (a malformed one as name '')."
    steps: list[StepCredit] = []
    """Tool episodes: each step's credit (the judge records one per turn): the workspace state
    it started from, the change in visible tests passing, and its tokens' span."""


class Job(Part):
    """One command to run in a fresh sandbox."""

    command: list[str]
    "argv of the command."
    files: dict[str, bytes] = {}
    "Files written under the job directory before start, read-only to the job."
    runtime: str = "python"
    "Executor environment spec (image) to run in."
    stdin: bytes = b""
    "Bytes fed to the command's stdin."
    limits: Limits = Limits()
    "Resource limits."
    expected_tests: int = 0
    "Test count the harness must report; 0 if the job reports none."


class ExecutionResult(Part):
    """What running one job produced. An expected outcome is a status, never an exception."""

    status: Literal[
        "ok", "nonzero_exit", "timeout", "oom", "output_limit", "killed", "sandbox_error"
    ]
    "How the job ended."
    exit_code: int | None = None
    "Exit code, if the process exited."
    signal: int | None = None
    "Signal number, if the process was killed by one."
    wall_s: float = 0.0
    "Wall-clock seconds from start to end."
    cpu_s: float = 0.0
    "CPU seconds used by all of the job's processes."
    peak_memory_mb: float = 0.0
    "Peak memory of the job."
    stdout: str = ""
    "Standard output, truncated to the output limit."
    stderr: str = ""
    "Standard error, truncated to the output limit."
    stdout_truncated: bool = False
    "True when stdout was cut."
    stderr_truncated: bool = False
    "True when stderr was cut."
    report: str = ""
    "Structured test report (JSON) written by a harness the attempt cannot modify."
    sandbox_failed: bool = False
    "True when the sandbox itself failed (launcher, daemon, cgroup, shared resource)."
    sandbox_error: str = ""
    "What failed in the sandbox, when `sandbox_failed`."
    backend: str = ""
    "Backend that ran the job ('local', 'docker', 'subprocess')."


class ExecutionRequest(Message, tag="whet.exec_request.v1"):
    """Judge to executor: run `job` (built from the attempt's latest turn) and report back."""

    request_id: str
    "Stable id: '<attempt_id>/t<turn>/r<retry>'."
    attempt: Attempt
    "The attempt the job checks; carried through to the judge."
    job: Job
    "What to run."
    retry: int = 0
    "How many times this turn was re-run after an infrastructure failure."
    avoid_executors: list[str] = []
    "Executor instances that failed this turn before; another is preferred."


class ExecutionDone(Message, tag="whet.exec_done.v1"):
    """Executor to judge: the request and what running it produced."""

    request: ExecutionRequest
    "The request, unchanged."
    result: ExecutionResult
    "What the sandbox produced."
    executor: str
    "Instance id of the executor that ran it."
    finished_at: float = 0.0
    "Unix time the job ended."


# --- tool episodes ------------------------------------------------------------------------


class ToolCall(Part):
    """One tool call the model made in a turn (parsed by the judge from its completion)."""

    name: str
    "Tool name: list_files, read_file, write_file, replace, run_tests or submit."
    arguments: dict[str, Any] = {}
    "The call's arguments, as the model wrote them (JSON values)."


class ToolResult(Part):
    """What one tool call did, as the episode's owner reports it."""

    name: str
    "The tool that ran ('' when the call could not be parsed)."
    ok: bool
    "False when the call was refused or failed (the output says why)."
    output: str = ""
    "Text returned to the model as the next message, trimmed to the episode's budget."
    visible_passed: int = -1
    "Visible tests passing after this call, when it ran them (-1 otherwise)."
    visible_total: int = -1
    "Visible tests run by this call (-1 when it ran none)."
    refused: bool = False
    "True when the call tried to write outside the workspace (a hack sign)."
    infra: str = ""
    "Set when the sandbox itself failed while running the call (never the model's fault)."
    passing: int = -1
    """Visible tests passing in the workspace after this call: this call's run of all of them,
    or a run made after a call that changed the workspace (not shown to the model), or carried
    from the call before; -1 when unknown."""
    digest: str = ""
    "Content hash of the workspace after this call (`sandbox.workspace.digest_of`)."


class StepCredit(Part):
    """One step of a tool episode, for per-step credit (`policy.credit`): recorded by the judge
    on the attempt, read by the learner with `[learner] credit = "step"`."""

    turn: int
    "The turn whose completion made this step's tool call."
    state: str
    "Content hash of the workspace when the step began: steps from equal states share a baseline."
    reward: float = 0.0
    "Change in visible tests passing over the step, as a share of the visible tests (0 if unknown)."
    passing: int = -1
    "Visible tests passing after the step (-1 if unknown)."
    total: int = -1
    "Visible tests in the suite (-1 if unknown)."
    next_state: str = ""
    "Content hash of the workspace after the step."
    start: int = 0
    "First token of the step's completion in the trajectory (every turn's prompt ids, then completion ids)."
    end: int = 0
    "One past its last token."


class SessionRequest(Message, tag="whet.session_request.v1"):
    """Judge to the executor owning an episode's workspace (request/reply on
    `subjects.session_subject(executor)`, or `SESSION_OPEN` to any executor): open the
    workspace of `task`, run one tool call in it, or close it (returning its files)."""

    session_id: str
    "The episode's session: the attempt id."
    op: Literal["open", "call", "close"]
    "What to do."
    task: Task | None = None
    "The task whose workspace to open (op 'open')."
    call: ToolCall | None = None
    "The tool call to run (op 'call')."
    step: int = 0
    "Tool calls made before this one; a repeated step is answered from the session's record."


class SessionReply(Message, tag="whet.session_reply.v1"):
    """Executor to judge: the result of a `SessionRequest`."""

    session_id: str
    "The session."
    executor: str
    "Instance id of the executor that owns the session."
    ok: bool = True
    "False when the session is unknown (its owner restarted) or the request was malformed."
    error: str = ""
    "Why not ok."
    result: ToolResult | None = None
    "The tool call's result (op 'call')."
    files: dict[str, str] = {}
    "The workspace's files (op 'close')."
    refused: list[str] = []
    "Paths the episode tried to write outside the workspace (op 'close')."
    digest: str = ""
    "Content hash of the workspace (ops 'open' and 'close')."
    setup_s: float = 0.0
    "Seconds the workspace took to set up (op 'open'); a cache restore is far below a build."
    visible_passed: int = -1
    "Visible tests passing in the workspace as opened (op 'open'; -1 if unknown)."
    visible_total: int = -1
    "Visible tests in the workspace as opened (op 'open'; -1 if unknown)."


# --- verdicts ----------------------------------------------------------------------------


class LayerResult(Part):
    """The result of one judging layer (structure, visible, hidden, robustness)."""

    name: str
    "Layer name."
    passed: int = 0
    "Checks that passed."
    total: int = 0
    "Checks run."
    ok: bool = False
    "Whether the layer passed as a whole."
    detail: str = ""
    "Short human-readable evidence."


class Verdict(Message, tag="whet.verdict.v1"):
    """Judge to learner, evaluator and trace store: the final judgement of an attempt."""

    verdict_id: str
    "Stable id; equal to the attempt id (one final verdict per attempt)."
    attempt: Attempt
    "The judged trajectory, tokens and behaviour logprobs included."
    outcome: Literal["pass", "fail", "hack", "dropped"]
    "'dropped' means an infrastructure failure: no reward, never trained on."
    reward: float | None
    "Total reward; None when dropped."
    components: dict[str, float] = {}
    "Each reward component by name."
    cause: str = ""
    "Why it failed ('' on pass): e.g. 'model.syntax_error', 'infra.sandbox'."
    evidence: str = ""
    "What the cause was read from."
    layers: list[LayerResult] = []
    "Each judging layer's result."
    trainable: bool = True
    "False for dropped and eval verdicts."
    judge: str = ""
    "Instance id of the judge."
    judged_at: float = 0.0
    "Unix time of the judgement."
    retries: int = 0
    "Re-runs after infrastructure failures before this verdict (a dropped one: all failed)."


# --- weights, actors, operations ---------------------------------------------------------


class WeightVersion(Message, tag="whet.weights.v1"):
    """Learner to generators (through KV): a published policy version and where its weights are."""

    version: int
    "Policy version, increasing from 0."
    object_name: str
    "Name of the weights object in the weights object store; '' for the initial weights."
    size: int = 0
    "Bytes of the weights object."
    sha256: str = ""
    "Hex SHA-256 of the weights object."
    dtype: str = "bfloat16"
    "Dtype of the stored tensors."
    step: int = 0
    ("Learner steps (batches consumed, trained or not) behind these weights; after a learner "
     "restart, those of its checkpoint. The sampler's admission budget counts them.")
    samples: int = 0
    "Samples trained on so far."
    created_at: float = 0.0
    "Unix time of publication."


class StepRecord(Message, tag="whet.step.v1"):
    """Learner to progress (`whet up`'s metrics, its stop at `max_steps`) and anyone watching,
    through KV whet-run (`learner.step.<step>`, see `bus.subjects.step_key`): one learner step,
    written once it is done. A step redone after a restart from a checkpoint replaces the
    record under its key (its `trained_at` differs). The `learner.step_completed` event
    carries the same figures, and the verdict ids, for people and `whet tail`."""

    step: int
    "Learner steps (batches consumed, trained or not) so far, this one included."
    policy_version: int
    "Policy version after this step (published, or due with the next publish)."
    trained_at: float
    "Unix time the update finished; with `step`, tells a redone step from a repeated record."
    groups: int = 0
    "Groups in the batch."
    samples: int = 0
    "Samples (verdicts) trained on in this step; the event names them."
    samples_total: int = 0
    "Samples trained on so far."
    left_out: dict[str, int] = {}
    "Verdicts consumed without training, by reason: 'dropped', 'stale', 'no_signal'."
    mean_reward: float | None = None
    "Mean reward of the batch's judged attempts (None if none)."
    pass_rate: float | None = None
    "Share of those that passed."
    hacks: int = 0
    "Attempts judged as hacks."
    staleness_mean: float | None = None
    "Mean versions the trained samples lagged behind the learner."
    staleness_max: int | None = None
    "Most versions a trained sample lagged."
    stale_rejected: int = 0
    "Samples rejected as older than the staleness bound."
    dropped: int = 0
    "Verdicts the judge dropped (infrastructure), never trained."
    no_signal: int = 0
    "Samples left out because their group's advantages were all zero."
    duplicates: int = 0
    "Redelivered verdicts skipped so far."
    late: int = 0
    "Group members that arrived after their group was trained, so far."
    step_s: float = 0.0
    "Seconds this step took: assemble, train, hold for eval, publish, checkpoint."
    idle_frac: float = 0.0
    "Share of the learner's time so far spent waiting for verdicts."
    held_for_eval_s: float = 0.0
    "Seconds held for held-out rounds so far (neither idle nor busy)."
    loss: float | None = None
    "Policy-gradient loss (token mean); None when nothing was trained."
    kl: float | None = None
    "KL to the reference policy (token mean), when `kl_coef` is above 0."
    clip_frac: float | None = None
    "Share of tokens whose ratio was clipped."
    masked_frac: float | None = None
    "Share of tokens masked out by the off-policy correction (IcePop)."
    is_weight: float | None = None
    "Mean importance weight of the tokens."
    behav_gap: float | None = None
    "Mean |log pi_prox - log pi_behav| of the tokens."
    grad_norm: float | None = None
    "Global gradient norm after the update (-1 if not finite)."
    tokens: float | None = None
    "Completion tokens trained on."
    train_s: float | None = None
    "Seconds of the DeepSpeed part of the step."
    optimizer_steps: float | None = None
    "Optimizer steps so far."


class LearnerRendezvous(Message, tag="whet.learner_rendezvous.v1"):
    """Learner rank 0 to the learner's other ranks (KV whet-run `learner.rendezvous`, see
    `policy.rendezvous`): where this generation of the learner's process group meets. Rank 0
    writes a new generation each time it starts, once its store listens; a rank joins each
    generation at most once, and a rank that joined an older one leaves when it sees it."""

    generation: int
    "Counts rank 0's starts on this bus; the record of a newer start has a higher one."
    host: str
    "Address the other ranks reach rank 0's c10d store at (their MASTER_ADDR)."
    port: int
    "TCP port of that store (their MASTER_PORT)."
    world_size: int
    "Ranks in the group, rank 0 included."
    instance: str = ""
    "Rank 0's actor instance."
    published_at: float = 0.0
    "Unix time rank 0 wrote this record."
    kind: str = ""
    "Rank 0's actor kind (with `instance`, the key of its heartbeats)."


class LearnerRankClaim(Message, tag="whet.learner_rank.v1"):
    """A learner rank other than 0 to rank 0 (KV whet-run `learner.rank.<rank>`): the
    generation this process joined, or, while it waits for a newer one, the last one taken
    before it. Rank 0 leaves its generation when another process claims one of its ranks
    (the process it met is gone), so the pair meets again under a new generation."""

    rank: int
    "The rank claimed."
    generation: int
    "Generation joined (state 'joined'), or the newest already taken (state 'waiting')."
    state: Literal["waiting", "joined"]
    "waiting: for a generation newer than `generation`; joined: it took `generation`."
    incarnation: str
    "Random id of this process, so a restarted rank differs from the one before."
    instance: str = ""
    "Actor instance of the rank."
    host: str = ""
    "Host name of the rank."
    at: float = 0.0
    "Unix time of the claim."
    kind: str = ""
    "Actor kind of the rank (with `instance`, the key of its heartbeats)."


class Heartbeat(Message, tag="whet.heartbeat.v1"):
    """Every actor to the registry (KV), every few seconds."""

    kind: str
    "Actor kind (sampler, generator, ...)."
    instance: str
    "Instance id, unique within the run."
    pid: int
    "OS process id."
    host: str
    "Host name."
    state: Literal["starting", "ready", "stopping", "stopped"]
    "Lifecycle state."
    started_at: float
    "Unix time the actor started."
    beat_at: float
    "Unix time of this beat."
    interval_s: float = 2.0
    "Seconds between beats; a registry entry older than three intervals is dead."
    processed: int = 0
    "Units of work handled since start."
    in_flight: int = 0
    "Units of work held now."
    policy_version: int = -1
    "Policy version the actor runs, where it runs one."
    stats: dict[str, float] = {}
    "Actor-specific gauges (tokens/s, jobs/s, step time)."
    ready_at: float = 0.0
    """Unix time this process became ready (its `run` signalled it started); 0 until then.
    The supervisor tells a crash before readiness (a crash loop) from one after by it."""


class ActorFailure(Message, tag="whet.actor_failure.v1"):
    """Supervisor to `whet status` (KV whet-run `supervisor.failing.<kind>`): a kind that
    crashed again and again before it was ready, which stopped the stack."""

    kind: str
    "Actor kind."
    instance: str
    "The instance whose crashes were counted."
    failures: int
    "Crashes in a row before readiness."
    cause: str
    "Last line of the last crash's exception (or its exit code)."
    log: str = ""
    "File holding the whole traceback."
    at: float = 0.0
    "Unix time of the last crash."


class ScaleTarget(Message, tag="whet.scale.v1"):
    """CLI to supervisor (through KV): desired instance count of one actor kind."""

    kind: str
    "Actor kind."
    count: int
    "Desired instances."
    requested_at: float = 0.0
    "Unix time of the request."


class Event(Message, tag="whet.event.v1"):
    """Every process to the events stream: one structured log line."""

    ts: float
    "Unix time."
    level: str
    "debug, info, warning, error or critical."
    event: str
    "Stable dotted past-tense name, e.g. 'actor.started'."
    actor: str = ""
    "Actor kind, or 'cli'/'supervisor'."
    instance: str = ""
    "Instance id."
    run_id: str = ""
    "Run the event belongs to."
    fields: dict[str, Any] = {}
    "Everything else bound to the event."


class DeadLetter(Message, tag="whet.dead_letter.v1"):
    """Any consumer to the dead-letter stream: a message that cannot be processed, and why."""

    subject: str
    "Subject the message arrived on."
    stream: str
    "Stream it was stored in."
    stream_seq: int
    "Its sequence number in that stream."
    consumer: str
    "Durable consumer that gave up on it."
    reason: str
    "Short machine-readable reason: malformed, schema_mismatch, max_deliveries, handler_error."
    error: str
    "Human-readable detail naming what was wrong and where."
    payload: bytes
    "The original payload, unchanged."
    deliveries: int = 0
    "Times it was delivered."
    instance: str = ""
    "Instance that dead-lettered it."
    at: float = 0.0
    "Unix time."


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


TOP_LEVEL: tuple[type[Message], ...] = (
    Task,
    TaskAssignment,
    Attempt,
    ExecutionRequest,
    ExecutionDone,
    Verdict,
    WeightVersion,
    StepRecord,
    LearnerRendezvous,
    LearnerRankClaim,
    Heartbeat,
    ActorFailure,
    ScaleTarget,
    Event,
    DeadLetter,
    SessionRequest,
    SessionReply,
    SamplerState,
    EvaluatorState,
    EvalRound,
    Trial,
    MetricsSnapshot,
)
"Every top-level message type, for codec checks and tests."


def tag_of(cls: type[Message]) -> str:
    """The wire tag of a message type, e.g. 'whet.task.v1'."""
    return cls.__struct_config__.tag  # type: ignore[return-value]
