"""A stand-in for the part of verifiers 0.4.0 (`verifiers.v1`) that reward methods use.

Shipped into rubric jobs as `verifiers/v1/__init__.py` (and `pydantic.py` re-exports its
`BaseModel`, `Field`, `ConfigDict`), because the sandbox's runtime tree has Python and the
standard library but not verifiers, pydantic or the rest of their 47 packages. It runs as
the environment's module sees it: `class MyData(vf.TaskData)`, `class MyTask(vf.Task[MyData])`
with `@vf.reward(weight=...)` and `@vf.metric` methods, `vf.Taskset[MyTask]`, messages.
Covered: TaskData fields, `Task.score` as verifiers runs it without a runtime, and a `Trace`
of one prompt and one reply. Not: pydantic validation or coercion (values arrive as the
JSON the host dumped), judges, runtimes, tools; any other name of `verifiers.v1` is a
placeholder that raises when used, naming itself. Stdlib only; it runs no model output.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Mapping

__version__ = "0.4.0+whetstone-shim"
_MISSING = object()


class FieldInfo:
    """What `Field(...)` returns: a default, or a factory of one."""

    def __init__(self, default=_MISSING, default_factory=None) -> None:
        self.default, self.default_factory = default, default_factory

    def make(self, owner: str, name: str):
        if self.default_factory is not None:
            return self.default_factory()
        if self.default is _MISSING:
            raise TypeError(f"{owner}: field {name!r} is required")
        return copy.deepcopy(self.default)


def Field(default=_MISSING, *, default_factory=None, **_ignored) -> FieldInfo:  # noqa: N802
    return FieldInfo(default, default_factory)


def ConfigDict(**settings) -> dict:  # noqa: N802
    return dict(settings)


def _as_message(value):
    if isinstance(value, dict) and "role" in value:
        kind = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage,
                "tool": ToolMessage}.get(value["role"], Message)
        return kind(**value)
    return value


class BaseModel:
    """Fields from class annotations (every class in the MRO), defaults from class values."""

    model_config: dict = {}

    def __class_getitem__(cls, item):
        return cls

    @classmethod
    def _fields(cls) -> dict:
        out: dict = {}
        for klass in reversed(cls.__mro__):
            for name in klass.__dict__.get("__annotations__", {}):
                if not name.startswith("_") and name != "model_config":
                    out[name] = klass.__dict__.get(name, out.get(name, _MISSING))
        return out

    def __init__(self, **data) -> None:
        owner = type(self).__name__
        for name, default in self._fields().items():
            if name in data:
                value = data.pop(name)
            elif isinstance(default, FieldInfo):
                value = default.make(owner, name)
            elif default is _MISSING:
                raise TypeError(f"{owner}: field {name!r} is required")
            else:
                value = copy.deepcopy(default)
            if name in ("prompt", "content") and isinstance(value, list):
                value = [_as_message(v) for v in value]
            object.__setattr__(self, name, value)
        for name, value in data.items():  # extra fields (verifiers' WireTaskData keeps them)
            object.__setattr__(self, name, value)

    def model_dump(self, **_ignored) -> dict:
        return {name: getattr(self, name) for name in self._fields()}

    def model_copy(self, update=None, **_ignored):
        clone = copy.copy(self)
        for name, value in (update or {}).items():
            object.__setattr__(clone, name, value)
        return clone

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_dump()!r})"


def content_text(content) -> str:
    if isinstance(content, str) or content is None:
        return content or ""
    return "".join(p.get("text", "") if isinstance(p, dict) else str(getattr(p, "text", ""))
                   for p in content)


class Message(BaseModel):
    """A chat message as verifiers has it: a role and its content."""

    role: str = ""
    content: object = ""


class SystemMessage(Message):
    """A system message."""

    role: str = "system"


class UserMessage(Message):
    """A user message."""

    role: str = "user"


class AssistantMessage(Message):
    """An assistant message, with any tool calls."""

    role: str = "assistant"
    tool_calls: list = Field(default_factory=list)


class ToolMessage(Message):
    """A tool's result message."""

    role: str = "tool"
    name: str = ""


Messages = list


class TaskData(BaseModel):
    """A task's data: fields from annotations with defaults or `Field(default_factory=)`,
    values as the host dumped them (no validation or coercion)."""

    idx: int | None = None
    id: str | None = None
    name: str | None = None
    description: str | None = None
    prompt: object = None
    system_prompt: str | None = None

    @property
    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n\n".join(t for t in (content_text(m.content) for m in self.prompt or []) if t)


class TaskConfig(BaseModel):
    """A task's config: judges, stops, metrics and rewards by name."""

    judges: list = Field(default_factory=list)
    stops: dict = Field(default_factory=dict)
    metrics: dict = Field(default_factory=dict)
    rewards: dict = Field(default_factory=dict)


class Reward(BaseModel):
    """One recorded reward: its score and weight."""

    score: float = 0.0
    weight: float = 1.0

    @property
    def value(self) -> float:
        return self.score * self.weight


class Trace:
    """One prompt and one sampled reply, as verifiers' Trace presents them to scoring:
    `last_reply`, `messages`, `assistant_messages`, `transcript`, `rewards`, `metrics`, `info`,
    `record_reward`, `is_truncated`."""

    def __init__(self, data: TaskData, reply: str, finish_reason: str = "") -> None:
        prompt = data.prompt if isinstance(data.prompt, list) else [UserMessage(content=data.prompt or "")]
        system = [SystemMessage(content=data.system_prompt)] if data.system_prompt else []
        self.prompt_messages = [*system, *prompt]
        self.reply = AssistantMessage(content=reply)
        self.finish_reason = finish_reason
        self.task = type("TraceTask", (), {"data": data, "type": "", "key": None, "hash": None})()
        self.rewards: dict = {}
        self.metrics: dict = {}
        self.info: dict = {}
        self.errors: list = []
        self.root_reply = None
        self.ok = self.is_completed = True
        self.is_timeout = False
        self.stop_condition = None

    messages = property(lambda self: [*self.prompt_messages, self.reply])
    assistant_messages = property(lambda self: [self.reply])
    tool_messages = property(lambda self: [])
    last_message = property(lambda self: self.reply)
    num_turns = property(lambda self: 1)
    num_branches = property(lambda self: 1)
    has_error = property(lambda self: False)
    last_error = property(lambda self: None)
    is_truncated = property(lambda self: self.finish_reason == "length")
    reward = property(lambda self: sum(r.value for r in self.rewards.values() if r is not None))

    @property
    def last_reply(self) -> str:
        return (self.root_reply if self.root_reply is not None else content_text(self.reply.content)).strip()

    @property
    def transcript(self) -> str:
        return "\n\n".join(f"[{m.role}]\n{content_text(m.content)}" for m in self.messages)

    def record_metric(self, name: str, value: float) -> None:
        self.metrics[name] = float(value)

    def record_metrics(self, values: Mapping) -> None:
        for name, value in values.items():
            self.record_metric(name, value)

    def record_reward(self, name: str, value: float, weight: float = 1.0) -> None:
        self.rewards[name] = Reward(score=float(value), weight=float(weight))


def _mark(attr: str, **extra):
    def decorator(f):
        setattr(f, attr, True)
        for key, value in extra.items():
            setattr(f, key, value)
        return f
    return decorator


def reward(func=None, weight: float = 1.0, priority: int = 0):
    decorator = _mark("reward", reward_priority=priority, _vf_weight=weight)
    return decorator if func is None else decorator(func)


def metric(func=None, priority: int = 0):
    decorator = _mark("metric", metric_priority=priority)
    return decorator if func is None else decorator(func)


def stop(func=None, priority: int = 0):
    decorator = _mark("stop", stop_priority=priority)
    return decorator if func is None else decorator(func)


def intercept(func=None, priority: int = 0):
    decorator = _mark("intercept", intercept_priority=priority)
    return decorator if func is None else decorator(func)


def tool(func=None, name: str | None = None):
    decorator = _mark("tool", tool_name=name)
    return decorator if func is None else decorator(func)


def _decorated(obj, attr: str) -> list:
    """As verifiers' discover_decorated: tagged methods over the MRO, by priority then name."""
    names = {name for klass in type(obj).__mro__ for name, fn in vars(klass).items()
             if callable(fn) and hasattr(fn, attr)}
    methods = [m for name in names if hasattr(m := getattr(obj, name), attr)]
    methods.sort(key=lambda m: (-getattr(m, f"{attr}_priority", 0), m.__name__))
    return methods


async def _invoke_all(fns: list, available: dict) -> list:
    def call(fn):
        params = inspect.signature(fn).parameters
        return fn(**{name: available[name] for name in params if name in available})
    return await asyncio.gather(*(call(fn) for fn in fns))


class Task:
    """verifiers' Task as reward methods see it: `data`, `config`, the hooks and `score`."""

    NEEDS_CONTAINER = False
    scoring_deferred = False

    def __class_getitem__(cls, item):
        return cls

    def __init__(self, data: TaskData, config: TaskConfig | None = None) -> None:
        self.data = data
        self.config = config if config is not None else TaskConfig()

    def hooks(self, attr: str) -> list:
        return _decorated(self, attr)

    async def score(self, trace: Trace, runtime=None) -> None:
        """verifiers' Task.score without runtime or judges: metrics, then rewards, awaited
        together; a Mapping result is recorded under its keys, weights from `@vf.reward`."""
        available = {"task": self.data, "trace": trace}
        metrics, rewards = self.hooks("metric"), self.hooks("reward")
        for fn in rewards:
            trace.rewards[fn.__name__] = None
        for fn, result in zip(metrics, await _invoke_all(metrics, available)):
            if isinstance(result, Mapping):
                trace.record_metrics(result)
            else:
                trace.record_metric(fn.__name__, result)
        for fn, result in zip(rewards, await _invoke_all(rewards, available)):
            weight = getattr(fn, "_vf_weight", 1.0)
            if isinstance(result, Mapping):
                if trace.rewards.get(fn.__name__) is None:
                    trace.rewards.pop(fn.__name__, None)
                items = result.items()
            else:
                items = [(fn.__name__, result)]
            for key, value in items:
                trace.record_reward(key, value, weight)

    @classmethod
    def toolsets(cls, config) -> list:
        return []

    async def setup(self, trace, runtime) -> None:
        return None

    async def finalize(self, trace, runtime) -> None:
        return None


class Taskset:
    """verifiers' Taskset, as far as an environment module declares one."""

    INFINITE = False

    def __class_getitem__(cls, item):
        return cls

    def __init__(self, config=None) -> None:
        self.config = config

    def load(self):
        raise RuntimeError("tasks are loaded on the host, never inside the sandbox")

    @classmethod
    def toolsets(cls, config) -> list:
        return []


class _Unavailable:
    """A name of verifiers.v1 the shim does not provide: importable, fails when used."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"verifiers.v1.{self._name} is not available inside the "
                                  "whetstone sandbox (only the scoring API is)")

    def __getitem__(self, item):
        return self

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return self.__call__()

    def __mro_entries__(self, bases):
        return (object,)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Unavailable(name)
