"""One tool episode's session: a workspace that keeps its state, and the tools that act on it.

Consumes `ToolCall`s and a sandbox backend; produces `ToolResult`s. File tools (list, read
a range, write, replace) act on the `Workspace` folder on this host through its checked
paths; `run_tests` runs the visible unittest suite (or one test) as a sandboxed job with the
workspace's files, exactly as any other job (read-only to it, so a test run cannot change
the workspace). A path outside the workspace is refused and recorded. Results are trimmed to
`result_chars` and carry per-step credit (`Session`).
It does not parse model text (`judging.tools` does) or judge anything.
"""

from __future__ import annotations

import re
import time

from bus.messages import Job, Task, ToolCall, ToolResult
from sandbox.workspace import PathRefused, Workspace, WorkspaceCache

TEST_COMMAND = ["python3", "-B", "-m", "unittest"]
_RAN = re.compile(r"^Ran (\d+) tests?", re.M)
_FAILED = re.compile(r"^FAILED \((.*)\)", re.M)


def trim(text: str, budget: int) -> str:
    """`text` cut to `budget` characters, keeping its head and tail (errors end a test run)."""
    if len(text) <= budget:
        return text
    note = f"\n[... {len(text) - budget} characters trimmed ...]\n"
    keep = max(budget - len(note), 0)
    return text[: keep // 3] + note + text[len(text) - (keep - keep // 3):]


def count_tests(output: str) -> tuple[int, int]:
    """(passed, run) read from unittest's summary; (0, 0) when it printed none."""
    ran = _RAN.search(output)
    if ran is None:
        return 0, 0
    total = int(ran.group(1))
    failed = _FAILED.search(output)
    bad = sum(int(n) for n in re.findall(r"(?:failures|errors)=(\d+)", failed.group(1))) if failed else 0
    return max(total - bad, 0), total


def visible_tests_job(task: Task, files: dict[str, str], test: str = "") -> Job:
    """The sandboxed run of the visible tests over a workspace's files."""
    target = [test] if test else ["discover", "-s", "tests", "-t", "."]
    return Job(command=[*TEST_COMMAND, *target], files={p: t.encode() for p, t in files.items()},
               runtime=task.runtime, limits=task.limits)


async def run_visible(backend, task: Task, files: dict[str, str], test: str = "") -> ToolResult:
    """Run the visible tests in a sandbox; the sandbox's own failure is `infra`, not output."""
    result = await backend.run(visible_tests_job(task, files, test))
    if result.sandbox_failed:
        return ToolResult(name="run_tests", ok=False, output="the sandbox failed",
                          infra=result.sandbox_error[:500] or "sandbox failure")
    output = (result.stderr + result.stdout).strip()
    if result.status == "timeout":
        output += f"\n[stopped: the tests ran past {task.limits.timeout_s:g} s]"
    passed, total = count_tests(output)
    return ToolResult(name="run_tests", ok=True, output=output, visible_passed=passed,
                      visible_total=total)


async def prepare_workspace(backend, task: Task, ws: Workspace) -> dict:
    """What a prepared workspace records: its visible tests' first run (for step credit and
    the first observation), so a restored workspace needs no sandbox run."""
    first = await run_visible(backend, task, ws.files())
    if first.infra:
        raise RuntimeError(f"preparing the workspace of {task.task_id}: {first.infra}")
    return {"visible_passed": first.visible_passed, "visible_total": first.visible_total,
            "output": first.output}


async def open_session(cache: WorkspaceCache, backend, task: Task) -> "Session":
    """A session on a fresh copy of the task's prepared workspace."""
    started = time.perf_counter()
    ws = await cache.checkout(dict(task.files), lambda w: prepare_workspace(backend, task, w))
    return Session(task, ws, backend, setup_s=time.perf_counter() - started)


class Session:
    """A task's workspace and the results of the calls made on it so far. For per-step credit
    every result also says how many visible tests pass in the workspace after the call, and
    the workspace's content hash: a call that changed the workspace is followed by a run of the
    whole visible suite that the model is not shown (about 0.03 s of wall time and 0.01 s of
    sandbox CPU per write on the local backend, against seconds for a model turn:
    `bench/repository/step_credit_cost.py`, `bench/repository/results/step_credit.txt`); a call that changed nothing
    carries the count from before."""

    def __init__(self, task: Task, workspace: Workspace, backend, setup_s: float = 0.0) -> None:
        self.task, self.workspace, self.backend = task, workspace, backend
        self.setup_s = setup_s
        self.results: list[ToolResult] = []
        "Each call's result, in order (a repeated step is answered from here)."
        self.chars = task.verifier.budget("result_chars", 1500)
        self.digest = self.opened = workspace.digest()
        "Content hash of the workspace now, and as opened."
        self.passing = int(workspace.prepared.get("visible_passed", -1))
        "Visible tests passing in the workspace now (-1 if unknown)."

    async def call(self, call: ToolCall, step: int | None = None) -> ToolResult:
        """Run one call; `step` (calls made before it) makes a repeated request idempotent."""
        if step is not None and step < len(self.results):
            return self.results[step]
        try:
            result = await self._run(call)
        except PathRefused as exc:
            result = ToolResult(name=call.name, ok=False, output=str(exc), refused=call.name in (
                "write_file", "replace"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            result = ToolResult(name=call.name, ok=False, output=f"{type(exc).__name__}: {exc}")
        await self._follow(call, result)
        result = ToolResult(**{**_fields(result), "output": trim(result.output, self.chars),
                               "passing": self.passing, "digest": self.digest})
        self.results.append(result)
        return result

    async def _follow(self, call: ToolCall, result: ToolResult) -> None:
        """Keep `digest` and `passing` up to date after `call` (for per-step credit)."""
        digest = self.workspace.digest()
        if call.name == "run_tests" and not call.arguments.get("test") and result.visible_total >= 0:
            self.passing = result.visible_passed
        elif digest != self.digest:
            measured = await run_visible(self.backend, self.task, self.workspace.files())
            self.passing = -1 if measured.infra else measured.visible_passed
        self.digest = digest

    async def _run(self, call: ToolCall) -> ToolResult:
        args, ws, name = call.arguments, self.workspace, call.name
        if name == "list_files":
            return ToolResult(name=name, ok=True, output="\n".join(ws.listing()))
        if name == "read_file":
            lines = ws.read(str(args["path"])).splitlines()
            start = max(int(args.get("start", 1)), 1)
            end = min(int(args.get("end", len(lines))), len(lines))
            shown = [f"{i:4d} {lines[i - 1]}" for i in range(start, end + 1)]
            return ToolResult(name=name, ok=True, output="\n".join(shown) or "(no lines in range)")
        if name == "write_file":
            ws.write(str(args["path"]), str(args["content"]))
            return ToolResult(name=name, ok=True, output=f"wrote {args['path']}")
        if name == "replace":
            path, old, new = str(args["path"]), str(args["old"]), str(args["new"])
            ws.path(path, for_write=True)
            text = ws.read(path)
            if old not in text:
                return ToolResult(name=name, ok=False, output=f"{path}: the old text was not found")
            ws.write(path, text.replace(old, new, 1))
            return ToolResult(name=name, ok=True, output=f"replaced 1 occurrence in {path}")
        if name == "run_tests":
            return await run_visible(self.backend, self.task, ws.files(), str(args.get("test", "")))
        if name == "submit":
            return ToolResult(name=name, ok=True, output="submitted")
        return ToolResult(name=name, ok=False, output=f"unknown tool {name!r}")

    def close(self) -> dict[str, str]:
        """The workspace's files; the folder is removed."""
        files = self.workspace.files()
        self.workspace.remove()
        return files


def _fields(result: ToolResult) -> dict:
    return {f: getattr(result, f) for f in result.__struct_fields__}
