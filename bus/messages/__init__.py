"""Every message that crosses the bus, declared once.

Consumes nothing; produces typed msgspec Structs (declared by role in `work`, `tools`,
`control` and `state`, all importable from here) that `bus.codec` turns into MessagePack.
Rules for changing them: each top-level message carries its type and version in the tag
field `t` (`whet.<name>.v<N>`); evolve one by adding fields with defaults at the end (unknown
fields are ignored on decode, so an older reader accepts a newer writer's additions); a
breaking change is a new tag and a new subject token. Anything a policy produced carries
`policy_version` and a stable id. Token ids and logprobs travel as packed little-endian
arrays (`bytes`: `bus.codec.pack_ids`/`unpack_ids`, `pack_f32`/`unpack_f32`), never lists.
It does no I/O and knows no subjects (those live in `bus.subjects`).
"""

from __future__ import annotations

from bus.messages.base import Message, Part, tag_of
from bus.messages.control import (
    ActorFailure,
    DeadLetter,
    Event,
    Heartbeat,
    LearnerRankClaim,
    LearnerRendezvous,
    ScaleTarget,
    StepRecord,
    WeightVersion,
)
from bus.messages.state import (
    EvalPoint,
    EvalRound,
    EvaluatorState,
    HeldoutScore,
    MetricsSnapshot,
    PassRate,
    QueueDepth,
    RewardStats,
    SamplerState,
    TaskOutcome,
    Trial,
)
from bus.messages.tools import (
    StepCredit,
    ToolCall,
    ToolResult,
)
from bus.messages.work import (
    SessionReply,
    SessionRequest,
    Attempt,
    Demo,
    DemoMessage,
    ExecutionDone,
    ExecutionRequest,
    ExecutionResult,
    Job,
    LayerResult,
    Limits,
    Task,
    TaskAssignment,
    Turn,
    Verdict,
    Verifier,
)

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

__all__ = ["Message", "Part", "TOP_LEVEL", "tag_of",
           "ActorFailure",
           "Attempt",
           "DeadLetter",
           "Demo",
           "DemoMessage",
           "EvalPoint",
           "EvalRound",
           "EvaluatorState",
           "Event",
           "ExecutionDone",
           "ExecutionRequest",
           "ExecutionResult",
           "Heartbeat",
           "HeldoutScore",
           "Job",
           "LayerResult",
           "LearnerRankClaim",
           "LearnerRendezvous",
           "Limits",
           "MetricsSnapshot",
           "PassRate",
           "QueueDepth",
           "RewardStats",
           "SamplerState",
           "ScaleTarget",
           "SessionReply",
           "SessionRequest",
           "StepCredit",
           "StepRecord",
           "Task",
           "TaskAssignment",
           "TaskOutcome",
           "ToolCall",
           "ToolResult",
           "Trial",
           "Turn",
           "Verdict",
           "Verifier",
           "WeightVersion",
           ]
