"""The layers: packages own their config and never import the wiring layer, actors take
only the composed config from it, and every actor's `run` carries its types."""

from __future__ import annotations

import ast
import importlib
import typing
from pathlib import Path

from anyio.abc import TaskStatus

from bus.nats_bus import Bus
from runtime.config import RunConfig
from runtime.kinds import KINDS

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["bus", "sandbox", "policy", "judging", "envs", "monitoring"]
"Packages below the wiring layer: each owns its config section (on `bus.section.Section`)."


def imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import in a file, at any depth (functions and
    TYPE_CHECKING blocks too); `import a.b` gives ('a.b', [])."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            out.append((node.lineno, module, [alias.name for alias in node.names]))
    return out


def runtime_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    return [(line, module, names) for line, module, names in imports(path)
            if module == "runtime" or module.startswith("runtime.")]


def test_no_package_imports_the_wiring_layer():
    """No module of bus, sandbox, policy, judging, envs or monitoring imports `runtime`."""
    found = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
             for line, module, _ in runtime_imports(path)]
    assert found == []


def test_actors_take_only_the_composed_config_from_the_wiring_layer():
    """An actor module imports nothing from `runtime` but `RunConfig` from `runtime.config`."""
    found = [f"{path.relative_to(ROOT)}:{line} imports {names or ''} from {module}"
             for path in sorted((ROOT / "actors").glob("*.py"))
             for line, module, names in runtime_imports(path)
             if (module, names) != ("runtime.config", ["RunConfig"])]
    assert found == []


def test_every_actor_run_carries_its_types():
    """Each built-in kind's `run(bus: Bus, config: RunConfig, *, task_status: TaskStatus[None])`
    is annotated in full, so a type checker sees what an actor is handed."""
    for kind, target in KINDS.items():
        module, name = target.split(":")
        run = getattr(importlib.import_module(module), name)
        hints = typing.get_type_hints(run)
        assert hints == {"bus": Bus, "config": RunConfig, "task_status": TaskStatus[None],
                         "return": type(None)}, kind
