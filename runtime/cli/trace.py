"""`whet trace ID` and `whet export`: read the trial records the monitor keeps.

Consumes `Trial` records from the trials stream (read-only replays: one subject per trial, so
a trace asks the server for that subject alone); produces a readable trial on the terminal,
JSON, JSON lines or Parquet. It writes nothing to the bus. (No `from __future__ import annotations`: typer reads the
option types, imported inside `register`, when the commands are defined.)
"""

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import anyio
import msgspec
import typer

from bus import subjects
from bus.errors import RunError, WhetError
from bus.messages import Trial
from monitoring.trials import ParquetSink, trial_row
from runtime.cli.options import RunOpt, UrlOpt, friendly, open_bus
from runtime.cli.render_trace import render_trial
from runtime.stack import rundir


class Format(str, Enum):
    """The file formats `whet trace` writes."""

    jsonl = "jsonl"
    parquet = "parquet"


async def find_trials(bus, trial_id: str, run_id: Optional[str] = None) -> list[Trial]:
    """Every record of `trial_id` (one per run that has it), oldest first."""
    found = []
    async for _, trial, _ in bus.replay(subjects.STREAM_TRIALS,
                                        subjects.trial_filter(run_id, trial_id), Trial,
                                        follow=False):
        if trial is not None and trial.trial_id == trial_id:
            found.append(trial)
    return sorted(found, key=lambda t: t.recorded_at)


def run_id_of(run: Optional[str]) -> str:
    """The run id `--run` names: a run directory's name, or the id itself."""
    try:
        return rundir.find(run).run_id
    except RunError:
        if run:
            return run
        raise WhetError("export: no run given and no runs/latest here; use --run ID or "
                        "--all-runs") from None


def register(app: typer.Typer) -> None:
    @app.command()
    @friendly
    def trace(trial_id: Annotated[str, typer.Argument(help="Trial id (the attempt id).")],
              run: RunOpt = None, url: UrlOpt = None,
              as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
              tokens: Annotated[bool, typer.Option(help="Include token ids and logprobs.")] = False) -> None:
        """Show one trial end to end: task, every turn, execution, verdict, who handled it."""

        async def go() -> list[Trial]:
            bus = await open_bus(run, url)
            try:
                return await find_trials(bus, trial_id)
            finally:
                await bus.close()

        found = anyio.run(go)
        if not found:
            raise WhetError(f"trace: no trial {trial_id!r} in the trial store (is a monitor "
                            "running? ids are attempt ids, e.g. from 'whet tail')")
        latest = found[-1]
        if len(found) > 1:
            typer.echo(f"trial {trial_id} is recorded in runs "
                       f"{', '.join(t.run_id for t in found)}; showing {latest.run_id}", err=True)
        if as_json:
            typer.echo(json.dumps(trial_row(latest, tokens=tokens), indent=2))
            return
        render_trial(latest)

    @app.command("export")
    @friendly
    def export(run: RunOpt = None, url: UrlOpt = None,
               fmt: Annotated[Format, typer.Option("--format", help="jsonl or parquet.")] = Format.jsonl,
               out: Annotated[Optional[Path], typer.Option(help="Output file (jsonl: default stdout).")] = None,
               all_runs: Annotated[bool, typer.Option("--all-runs", help="Every run on the server.")] = False,
               tokens: Annotated[bool, typer.Option(help="Include token ids and logprobs.")] = False) -> None:
        """Write the trials of a run (one row per trial, turns nested) as JSON lines or Parquet."""
        run_id = None if all_runs else run_id_of(run)
        if fmt is Format.parquet and out is None:
            out = Path(f"{run_id or 'all'}.trials.parquet")
        count = anyio.run(_export, run, url, run_id, fmt, out, tokens)
        typer.echo(f"exported {count} trials" + (f" to {out}" if out else ""), err=True)


async def _export(run: Optional[str], url: Optional[str], run_id: Optional[str], fmt: Format,
                  out: Optional[Path], tokens: bool) -> int:
    bus = await open_bus(run, url)
    sink = ParquetSink(out, tokens=tokens) if fmt is Format.parquet else None
    stream = open(out, "w") if (sink is None and out is not None) else sys.stdout
    count = 0
    try:
        async for _, trial, _ in bus.replay(subjects.STREAM_TRIALS, subjects.trial_filter(run_id),
                                            Trial, follow=False):
            if trial is None:
                continue
            row = trial_row(trial, tokens=tokens)
            if sink is not None:
                sink.write(row)
            else:
                stream.write(msgspec.json.encode(row).decode() + "\n")
            count += 1
    finally:
        await bus.close()
        if sink is not None:
            sink.close()
        elif stream is not sys.stdout:
            stream.close()
    return count
