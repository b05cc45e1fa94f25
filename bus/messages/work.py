"""Work messages: tasks, assignments, attempts, execution requests and results, verdicts.

Consumes nothing; declares what carries one task from the sampler through the generator,
judge and executor to a verdict. No I/O; subjects live in `bus.subjects`.
"""

from __future__ import annotations

from typing import Literal

from bus.messages.base import Message, Part
from bus.messages.tools import StepCredit, ToolCall, ToolResult


# --- tasks -----------------------------------------------------------------------------


class Verifier(Part):
    """How an attempt at a task is checked. Written by an environment, read by the judge.

    `kind` names a registered kind: one module of `judging/kinds/` each, listed once in
    `judging.kinds`; each module's docstring says what the kind reads from these fields.

    `reference`, where a kind has one, is a correct attempt (the solvability gate runs it).
    """

    kind: str
    """Which kind of verifier this is: the name of a kind registered in `judging.kinds`
    (the gates reject any other)."""
    visible: str = ""
    "Tests shown to the model (source or JSON, as `kind` defines)."
    hidden: str = ""
    "Tests never shown to the model."
    reference: str = ""
    "Reference solution or reference outputs."
    extra: dict[str, str] = {}
    "Environment-specific verifier data (schemas, input generators, edge cases)."

    def budget(self, name: str, default: int) -> int:
        """One of a tool episode's budgets in `extra` (`max_steps`, `max_tokens`,
        `result_chars`); `default` when absent or not a whole number."""
        try:
            return int(self.extra.get(name, default))
        except ValueError:
            return default


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
    family: str = ""
    "Which of its environment's templates made it ('' if none): held-out sets are drawn by it."


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


# --- tool sessions (judge <-> the executor holding a workspace) ---------------------------


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


# --- demonstrations (the warm start's input; a file of JSON lines, never a bus subject) -----


class DemoMessage(Part):
    """One message of a demonstration, as the chat template renders it."""

    role: Literal["user", "assistant", "tool"]
    "'user' (the task prompt), 'assistant' (what the model should write: the only tokens the "
    "warm start trains on) or 'tool' (a tool call's result, exactly as the judge would send it)."
    content: str


class Demo(Message, tag="whet.demo.v1"):
    """A demonstration for supervised fine-tuning: one task from a training split, solved.

    Single-turn domains: the prompt and the gated reference solution in the answer format the
    judge reads. Tool domains: a scripted agent's episode (its calls, their real results from a
    sandbox session), whose final workspace passed the hidden tests."""

    task_id: str
    env: str
    "Environment name (`envs.registry`)."
    domain: str
    split: Literal["train"]
    "Always 'train': held-out and validation tasks never enter demonstrations."
    level: int
    "The task's rung."
    messages: list[DemoMessage]
    source: Literal["reference", "scripted"]
    "'reference': the gated reference answer; 'scripted': a scripted tool agent's episode."
    outcome: str = "pass"
    "The judge's outcome for the demonstration's answer (only passing ones are written)."
    family: str = ""
    repaired: bool = False
    "A scripted episode whose first edit was wrong, shown so by the tests, then repaired."
