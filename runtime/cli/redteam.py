"""`whet redteam`: attack shipped environments by capability; a drop an attack causes is a miss.

Consumes `--domains` (environment names; default every shipped one), `--tasks N` per
environment, `--capabilities` (default all), a sandbox backend and an optional run config for
`[judge]`; produces a table per environment (and over all) of each capability's attacks:
flagged, held at most the task's honest failure, dropped, above it; then every miss, on
stdout (or JSON with `--json`); other breaches on stderr; exit status 1 when there is any
breach (a miss, anything passing an impossible variant, a reference failing its own task).
The rules are in `judging.redteam`. Wiring only.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import anyio
import typer

from bus.errors import ConfigError
from runtime import config as config_mod
from runtime import log as log_mod
from runtime.cli.judge import _prefer_this_python
from runtime.cli.options import friendly


def register(app: typer.Typer) -> None:
    @app.command("redteam")
    @friendly
    def redteam(
        domains: Annotated[str, typer.Option("--domains", help="Comma-separated environment names (default: all shipped).")] = "",
        tasks: Annotated[int, typer.Option("--tasks", min=1, max=200, help="Tasks per environment.")] = 2,
        seed: Annotated[int, typer.Option(help="Seed of the generated tasks.")] = 0,
        backend: Annotated[str, typer.Option("--backend", help="Sandbox backend: local, docker or subprocess.")] = "local",
        as_json: Annotated[bool, typer.Option("--json", help="Scores and every trial as JSON.")] = False,
        capabilities: Annotated[str, typer.Option("--capabilities", help="Comma-separated capabilities (default: all).")] = "",
        concurrency: Annotated[int, typer.Option(min=1, max=64, help="Attempts judged at once.")] = 4,
        config: Annotated[Path | None, typer.Option("--config", "-c", help="Run config for [judge].")] = None,
    ) -> None:
        """Attack each environment's tasks by capability, held against honest failure; exit 1 on a miss."""
        from envs import registry
        from judging import redteam as rt

        log_mod.configure(kind="cli", instance="redteam", level="warning")
        cfg = config_mod.load(config) if config else config_mod.RunConfig()
        names = chosen(domains, registry.shipped())
        picked = registry.first_tasks(names, tasks, seed=seed)
        keep = chosen_capabilities(capabilities)
        trials = anyio.run(_run, picked, backend, cfg, concurrency, keep)
        scores = rt.tally(trials, picked)
        if as_json:
            typer.echo(json.dumps({"scores": [_score(s) for s in scores],
                                   "trials": [{**dataclasses.asdict(t), "verdict": t.verdict} for t in trials]}))
        else:
            typer.echo(rt.table(scores))
            misses = [m for s in scores for m in s.misses]
            typer.echo(f"\nmisses ({len(misses)}):" + "".join(f"\n  {m}" for m in misses))
        breaches = [p for s in scores for p in s.problems]
        for line in (p for s in scores for p in s.problems if p not in s.misses):
            typer.echo(f"whet: {line}", err=True)
        typer.echo(f"redteam: {len(trials)} attempts over {sum(len(v) for v in picked.values())} tasks, "
                   f"{len(breaches)} breaches", err=True)
        if breaches:
            raise typer.Exit(1)


def chosen(domains: str, shipped: dict[str, str]) -> list[str]:
    """The environment names asked for, checked against what is shipped."""
    names = [n.strip() for n in domains.split(",") if n.strip()] or list(shipped)
    unknown = [n for n in names if n not in shipped]
    if unknown:
        raise ConfigError("redteam", "--domains", f"unknown environments {unknown}; shipped: {sorted(shipped)}")
    return names


def chosen_capabilities(text: str):
    """A filter of planned attacks by capability, or None for all (unknown names refused)."""
    from judging.attacks import CAPABILITIES

    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = sorted(names - set(CAPABILITIES))
    if unknown:
        raise ConfigError("redteam", "--capabilities", f"unknown {unknown}; known: {sorted(CAPABILITIES)}")
    return (lambda meta: meta["capability"] in names) if names else None


async def _run(picked, backend_name: str, cfg, concurrency: int, keep=None):
    from judging import redteam as rt
    from sandbox import open_backend
    from sandbox.config import SandboxConfig

    if backend_name == "subprocess":
        _prefer_this_python()
    backend = await open_backend(SandboxConfig(backend=backend_name))  # type: ignore[arg-type]
    try:
        return await rt.run(picked, backend, cfg.judge, concurrency=concurrency, keep=keep)
    finally:
        await backend.aclose()


def _score(score) -> dict:
    out = dataclasses.asdict(score)
    out["capabilities"] = {name: (None if c is None else {**dataclasses.asdict(c), "misses": c.misses})
                           for name, c in score.capabilities.items()}
    return out
