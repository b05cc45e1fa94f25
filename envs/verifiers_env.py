"""Environments users already have: a verifiers 0.4.0 taskset as a whetstone environment.

Consumes a taskset id (`[envs.use.<name>] verifiers = "my_taskset"`: an importable module
or package whose `__all__` exports one `vf.Taskset` subclass, the verifiers plugin
convention), loaded on the host as `vf eval` loads it (`load`), which runs the user's
module like a config. Produces `Task`s of verifier kind `verifiers` (`to_task`), so the judge
can score a reply with the task's own `@vf.reward` methods inside the sandbox
(`judging.rubric`). Supported: a plain taskset played as verifiers' `null` harness plays it,
one prompt, one reply, no tools; the rest is refused, naming the class (`task_problems`).
Model output never runs here. It does NOT gate tasks (`envs.gates` runs the rubric once on
an empty reply) or run any reward.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import itertools
import json
from pathlib import Path

from bus.errors import ConfigError
from bus.messages import Limits, Task, Verifier
from envs.config import EnvEntry
from envs.environment import Environment, split_of

RUBRIC_LIMITS = Limits(timeout_s=10.0, cpu_s=10.0, memory_mb=256, pids=16, disk_mb=16)
"Limits of one rubric run (the shim imports nothing heavy)."
MAX_SOURCE_BYTES = 512 * 1024
("Most bytes of module source shipped with every task: an execution request carries them "
 "twice (task and job) under the bus's 8 MB message limit.")
SUPPORTED = ("whetstone plays a plain verifiers taskset (SingleAgentEnv) as one prompt and "
             "one reply without tools, scored by the task's @vf.reward methods")


def _unsupported(name: str, what: str) -> ConfigError:
    return ConfigError("envs", f"use.{name}.verifiers", f"{what} is not supported: {SUPPORTED}")


def load(name: str, taskset_id: str):
    """The verifiers Env of `taskset_id`, loaded as `vf eval` loads it, once it is supported:
    `SingleAgentEnv` (the env every plain taskset gets) without a harness of its own; another
    `Env` (several agents, a user simulator, best of n) is refused.

    Read from verifiers 0.4.0 (site-packages/verifiers): the package root is `verifiers.v1`;
    `utils/loaders.py` (`load_environment(config) -> Env`, `environment_class`: the taskset
    package's exported `Env` subclass, else `SingleAgentEnv`; `default_harness_id`: its exported
    `Harness`, else "bash"); `taskset.py` (`Taskset.load()` yields `Task`s, `take(n)` bounds an
    infinite one); `task.py` (`TaskData` fields, `Task.key` defaults to the content hash of the
    data, `idx` included; `Task.score(trace, runtime=None)` calls the `@vf.reward`/`@vf.metric`
    hooks by parameter name with `task`, `trace`, `runtime`); `trace.py` (`Trace.reward` is the sum
    of score times weight). There is no SingleTurnEnv, Rubric, Parser or MultiTurnEnv in 0.4.0."""
    try:
        import verifiers.v1 as vf
    except ImportError as exc:
        raise ConfigError("envs", f"use.{name}.verifiers",
                          f"verifiers is not installed ({exc}); pip install 'whetstone[verifiers]'") from None
    try:
        vf.import_taskset(taskset_id)  # the loaders below fall back silently when it is missing
        env_class = vf.environment_class(taskset_id)
        harness = vf.default_harness_id(taskset_id)
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise ConfigError("envs", f"use.{name}.verifiers",
                          f"cannot load verifiers taskset {taskset_id!r}: {exc}") from None
    if env_class is not vf.SingleAgentEnv:
        raise _unsupported(name, f"{taskset_id!r} is played by {env_class.__name__}, an Env "
                                 "subclass (several agents or its own episode); only "
                                 "SingleAgentEnv")
    if harness != "bash":
        raise _unsupported(name, f"{taskset_id!r} ships its own harness ({harness!r})")
    try:
        env = vf.load_environment(vf.resolve_env_config({"taskset": {"id": taskset_id}}))
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise ConfigError("envs", f"use.{name}.verifiers",
                          f"cannot load verifiers taskset {taskset_id!r}: {exc}") from None
    return vf, env


def task_problems(vf, taskset, task) -> list[str]:
    """Why whetstone cannot play `task` of `taskset` (empty when it can): tools (`toolsets`),
    container tasks, `setup`/`finalize`/`stage_verifier` hooks, judges, no `@vf.reward`, or
    rewards that need a `runtime`."""
    cls, out = type(task), []
    if type(taskset).toolsets(taskset.config) or cls.toolsets(task.config):
        out.append(f"{cls.__name__} uses tools (toolsets)")
    if cls.NEEDS_CONTAINER:
        out.append(f"{cls.__name__} needs a container")
    for hook in ("setup", "finalize", "stage_verifier"):
        if getattr(cls, hook) is not getattr(vf.Task, hook):
            out.append(f"{cls.__name__} overrides {hook}() (it prepares a runtime)")
    if task.config.judges:
        out.append(f"{cls.__name__} is scored by judges (a model call)")
    rewards = task.hooks("reward")
    if not rewards:
        out.append(f"{cls.__name__} has no @vf.reward method")
    for fn in [*rewards, *task.hooks("metric")]:
        param = inspect.signature(fn).parameters.get("runtime")
        if param is not None and param.default is inspect.Parameter.empty:
            out.append(f"{cls.__name__}.{fn.__name__} needs a runtime")
    return out


def source_files(module_name: str) -> dict[str, str]:
    """The source files of the top-level module or package that holds `module_name`."""
    root = module_name.split(".")[0]
    spec = importlib.util.find_spec(root)
    if spec is None or spec.origin is None:
        raise ValueError(f"cannot find the source of module {root!r}")
    if spec.submodule_search_locations:
        folder = Path(next(iter(spec.submodule_search_locations)))
        paths = sorted(folder.rglob("*.py"))
        base = folder.parent
    else:
        paths, base = [Path(spec.origin)], Path(spec.origin).parent
    files = {str(p.relative_to(base)): p.read_text(encoding="utf-8") for p in paths
             if "__pycache__" not in p.parts}
    size = sum(len(text.encode()) for text in files.values())
    if size > MAX_SOURCE_BYTES:
        raise ValueError(f"module {root!r} has {size} bytes of source; at most {MAX_SOURCE_BYTES} "
                         "travel with each task")
    return files


def prompt_text(data) -> str:
    """The prompt as one user turn: the system prompt, then each message (role-tagged when
    the prompt holds more than one user message)."""
    if isinstance(data.prompt, str) or data.prompt is None:
        messages = [("user", data.prompt or "")]
    else:
        messages = [(m.role, m.content if isinstance(m.content, str) else
                     "".join(getattr(p, "text", "") for p in m.content or [])) for m in data.prompt]
    parts = [data.system_prompt] if data.system_prompt else []
    tagged = len(messages) > 1
    parts += [f"{role}: {text}" if tagged else text for role, text in messages]
    return "\n\n".join(p for p in parts if p)


def to_task(name: str, version: str, entry: EnvEntry, vf, task, files: str) -> Task:
    """The whetstone `Task` of one verifiers task: the prompt as text, the task's data as JSON
    and the module's source files. Its id comes from the content (`<name>/v<version>-L0-<digest>`:
    the data without its position, or the task's own `key` when its class overrides it), so a
    reordered dataset keeps its ids and splits."""
    data = task.data.model_dump(mode="json", exclude_none=True)
    data.pop("idx", None)
    own_key = type(task).key is not vf.Task.key
    body = task.key if own_key else json.dumps(data, sort_keys=True)
    tid = f"{name}/v{version}-L0-{hashlib.sha256(body.encode()).hexdigest()[:12]}"
    cls, data_cls = type(task), type(task.data)
    verifier = Verifier(kind="verifiers", extra={
        "module": cls.__module__, "task_class": cls.__qualname__,
        "data_class": data_cls.__qualname__, "data": json.dumps(data), "files": files})
    if data_cls.__module__ != cls.__module__:
        raise ConfigError("envs", f"use.{name}.verifiers",
                          f"{data_cls.__name__} must be defined in {cls.__module__} beside "
                          f"{cls.__name__} (the sandbox imports that one module)")
    return Task(task_id=tid, env=name, env_version=version, domain=name,
                prompt=prompt_text(task.data), verifier=verifier,
                split=split_of(tid, entry.heldout_share, entry.validation_share),  # type: ignore[arg-type]
                runtime="python", limits=RUBRIC_LIMITS)


def tasks(name: str, entry: EnvEntry) -> list[Task]:
    """Up to `entry.count` tasks of the entry's taskset, in its order."""
    vf, env = load(name, entry.verifiers)
    taskset = env.taskset
    version = str(getattr(importlib.import_module(entry.verifiers), "__version__", "1"))
    out: list[Task] = []
    files = ""
    for task in itertools.islice(iter(taskset.take(entry.count)), entry.count):
        problems = task_problems(vf, taskset, task)
        if problems:
            raise _unsupported(name, "; ".join(problems))
        if not files:
            try:
                files = json.dumps(source_files(type(task).__module__))
            except (ValueError, OSError) as exc:
                raise ConfigError("envs", f"use.{name}.verifiers", str(exc)) from None
        out.append(to_task(name, version, entry, vf, task, files))
    return out


def environment(name: str, entry: EnvEntry) -> Environment:
    """The whetstone Environment of a `[envs.use.<name>] verifiers = ...` entry."""
    return Environment(name=name, version="verifiers", domain=name,
                       summary=f"verifiers taskset {entry.verifiers}",
                       difficulty="fixed set, one rung", load_tasks=lambda: tasks(name, entry))
