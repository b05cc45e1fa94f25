"""The layers: who may import whom (`ALLOWED`, function-level imports counted), no circle
between modules, modules loaded by name only where kinds and environments are named in
config (`BY_NAME`); packages own their config and never import the wiring layer, actors take
only the composed config from it, and every actor's `run` carries its types."""

from __future__ import annotations

import ast
import importlib
import sys
import typing
from pathlib import Path

import pytest
from anyio.abc import TaskStatus

from bus.nats_bus import Bus
from runtime.config import RunConfig
from runtime.kinds import KINDS

pytestmark = pytest.mark.unit

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


TOP = ("bus", "sandbox", "judging", "policy", "envs", "monitoring", "actors", "runtime", "deploy")
"Our top-level packages: an import of anything else is not ours and not checked."
PACKAGES_BELOW = ("bus", "sandbox", "judging", "policy", "envs", "monitoring", "runtime.broker")
RUNTIME_BASE = ("runtime", "runtime.config", "runtime.sections", "runtime.kinds", "runtime.connect",
                "runtime.log", "runtime.terminal")
"The wiring layer's base; a new module directly in `runtime/` joins it."

ALLOWED: dict[str, tuple[str, ...]] = {
    "bus": (),
    "sandbox": ("bus",),
    "judging": ("bus",),
    "policy": ("bus",),
    "runtime.broker": ("bus",),
    "deploy": ("bus", "sandbox"),
    "envs": ("bus", "sandbox", "judging"),
    "monitoring": ("bus", "sandbox", "judging", "envs"),
    "runtime": PACKAGES_BELOW,
    "actors": ("bus", "sandbox", "judging", "policy", "envs", "monitoring", "runtime.config"),
    "runtime.stack": PACKAGES_BELOW + ("policy", "actors", "runtime"),
    "runtime.evaluate": PACKAGES_BELOW + ("actors", "runtime"),
    "runtime.cli": PACKAGES_BELOW + ("policy", "actors", "runtime", "runtime.stack",
                                     "runtime.evaluate"),
}
"""Layer -> the other layers (or single modules) it may import, lowest first: bus at the
bottom; sandbox, judging, policy and the broker on bus alone; deploy on sandbox (the images
it builds); envs on sandbox and judging; monitoring on envs; the runtime base composes the
packages' config sections; actors take only `runtime.config` from runtime; the stack, the
held-out round outside a stack (`runtime.evaluate`, which samples as a generator does) and the
CLI at the top (the CLI may import the stack and the round, never the other way). A module's
layer is the longest entry of `ALLOWED` its dotted name starts with; it may always import its
own layer."""

EXCEPTIONS: dict[tuple[str, str], str] = {
    ("judging.drive", "sandbox.runner"):
        "judging one attempt offline runs its job through the executor's own runner "
        "(one backend-failure wrapper); sandbox.runner imports only bus and sandbox.outcome",
}
"(importer, imported) pairs allowed across the table, each with its reason."

BY_NAME: dict[str, str] = {
    "runtime/stack/actor.py:resolve_target": "an actor kind's `run`, named in [actors.target] or runtime.kinds",
    "envs/registry.py:resolve": "an environment, named by `target` in [envs.use.*]",
    "envs/registry.py:shipped": "each environment module under envs/examples",
    "envs/verifiers_env.py:tasks": "a verifiers environment package named in config (its version)",
    "judging/harness/harness.py:run": "a task's required modules, inside the sandbox",
    "judging/harness/rubric_runner.py:_watched": "standard modules a rubric may patch, inside the sandbox",
    "judging/harness/rubric_runner.py:score": "an environment's rubric module, inside the sandbox",
    "sandbox/zygote_server.py:main": "the modules a zygote preloads, inside the sandbox",
}
"""'path:function' -> what it loads by name: the only places `importlib.import_module` or
`__import__` takes a name not written in the code (or one of ours); a new place fails."""


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_of(p): p for top in TOP for p in sorted((ROOT / top).rglob("*.py"))}


def layer_of(module: str) -> str:
    """The longest entry of `ALLOWED` that `module` is, or lies under."""
    return max((name for name in ALLOWED if module == name or module.startswith(name + ".")),
               key=len)


def known(name: str) -> str:
    """The module of ours that `name` is, or the nearest package holding it."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def edges(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, module of ours) for every import in the file, at any depth; `from p import x`
    counts x when it is a module. Parent packages imported implicitly are not counted."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                     for alias in node.names]
        else:
            continue
        out += [(node.lineno, known(name)) for name in names
                if name.split(".")[0] in TOP and known(name) not in ("", module)]
    return sorted(set(out))


GRAPH = {module: edges(module, path) for module, path in MODULES.items()}


def allowed(importer: str, imported: str) -> bool:
    if (importer, imported) in EXCEPTIONS:
        return True
    mine, theirs = layer_of(importer), layer_of(imported)
    return mine == theirs or theirs in ALLOWED[mine] or imported in ALLOWED[mine]


def test_every_import_follows_the_table():
    """Each import of one of our modules, function-level ones too, is one `ALLOWED` permits."""
    found = [f"{MODULES[m].relative_to(ROOT)}:{line} imports {target}: layer {layer_of(m)!r} may "
             f"import only {ALLOWED[layer_of(m)] or '(nothing of ours)'}, not {layer_of(target)!r}"
             for m, out in GRAPH.items() for line, target in out if not allowed(m, target)]
    assert found == [], "imports against the table in tests/test_layers.py:\n" + "\n".join(found)


def test_the_table_has_no_stale_exceptions():
    """Each exception names an import that exists and that the table alone would refuse."""
    for importer, imported in EXCEPTIONS:
        assert imported in {t for _, t in GRAPH.get(importer, [])}, (importer, imported)
        mine, theirs = layer_of(importer), layer_of(imported)
        assert mine != theirs and theirs not in ALLOWED[mine], (importer, imported)


def circles(graph: dict[str, list[tuple[int, str]]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (or a self-loop)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for _, w in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_circles_are_found():
    """The circle finder itself: a circle of three and a tail outside it."""
    graph = {"a": [(1, "b")], "b": [(1, "c")], "c": [(1, "a"), (2, "d")], "d": []}
    assert circles(graph) == [["a", "b", "c"]]


def test_no_circle_between_modules():
    """No module reaches itself through imports, function-level ones counted."""
    found = ["{" + ", ".join(c) + "} through " + ", ".join(
                f"{MODULES[m].relative_to(ROOT)}:{line} imports {t}"
                for m in c for line, t in GRAPH[m] if t in c)
             for c in circles(GRAPH)]
    assert found == [], "modules in a circle of imports:\n" + "\n".join(found)


def loads_by_name(path: Path) -> list[tuple[int, str]]:
    """(line, enclosing function) of each `import_module(...)` or `__import__(...)` whose
    name is not a string constant outside our packages."""
    out = []

    def walk(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.Call):
                func = child.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                arg = child.args[0] if child.args else None
                constant = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                if name in ("import_module", "__import__") and not (
                        constant and arg.value.split(".")[0] not in TOP):
                    out.append((child.lineno, where))
            walk(child, inner)

    walk(ast.parse(path.read_text(), str(path)), "<module>")
    return out


def test_modules_are_loaded_by_name_only_where_named():
    """`importlib.import_module` / `__import__` of a computed name (or of ours) only in `BY_NAME`."""
    found = [f"{path.relative_to(ROOT)}:{line} loads a module by name in {where}(): not a place "
             f"named in BY_NAME (tests/test_layers.py)"
             for path in MODULES.values() for line, where in loads_by_name(path)
             if f"{path.relative_to(ROOT)}:{where}" not in BY_NAME]
    assert found == [], "\n".join(found)
    places = {f"{path.relative_to(ROOT)}:{where}" for path in MODULES.values()
              for _, where in loads_by_name(path)}
    assert sorted(set(BY_NAME) - places) == [], "BY_NAME names places that load nothing by name"
