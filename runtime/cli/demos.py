"""`whet demos --config CONFIG --out FILE`: demonstrations for the warm start, from the
training split of the config's environments.

Consumes a run config (`[envs]` for the tasks, splits and gates, `[executor.sandbox]` and
`[judge]` for judging, `[warmstart]` for the default domains and demonstrations per task)
and the choice on the command line (`--domains`, `--per-task`, `--limit` tasks per domain);
produces FILE, JSON lines of `bus.messages.Demo`, and one summary line: demonstrations kept
and failed per domain, and the seconds it took. Bad input (a config that cannot be read, an
unknown domain) is one line and exit 2, before any task is gated. Wiring only: the tasks,
episodes and file are `envs.demos`'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import anyio
import typer

from bus.errors import WhetError
from envs.demos import Made, in_use, make_demos, write_demos
from runtime import config as config_mod
from runtime import log as log_mod
from runtime.cli.options import friendly
from runtime.config import RunConfig

ConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="Run config (its [envs], [executor.sandbox], [judge], [warmstart]).")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Write the demonstrations here (JSON lines of Demo).")]
DomainsOpt = Annotated[Optional[str], typer.Option(
    help="Comma-separated domains (default: [warmstart] domains, else every domain of the mix).")]
PerTaskOpt = Annotated[Optional[int], typer.Option(
    "--per-task", min=1, max=64, help="Episodes per tool task (default: [warmstart] per_task).")]
LimitOpt = Annotated[Optional[int], typer.Option(
    min=0, help="Most training tasks per domain, 0 all (default: [warmstart] tasks_per_domain).")]


def domains_of(cfg: RunConfig, given: str | None) -> list[str]:
    """The domains asked for, checked against the config's enabled environments."""
    names = [d.strip() for d in given.split(",") if d.strip()] if given is not None \
        else list(cfg.warmstart.domains)
    return in_use(cfg.envs, names)


async def demos_of(cfg: RunConfig, domains: list[str], per_task: int, limit: int = 0) -> Made:
    """The demonstrations of `cfg`'s training split: the in-process call of a warm start."""
    return await make_demos(cfg.envs, cfg.executor.sandbox, seed=cfg.run.seed, judge=cfg.judge,
                            domains=domains, per_task=per_task, limit=limit,
                            concurrency=cfg.executor.concurrency)


def summary(made: Made, out: Path) -> str:
    """One line: demonstrations written, and per domain kept, failed (why) and repaired."""
    parts = []
    for domain, t in sorted(made.domains.items()):
        why = f" ({', '.join(f'{k} {n}' for k, n in t.why.most_common(3))})" if t.why else ""
        parts.append(f"{domain}: {t.accepted} tasks, {t.kept} kept, {t.failed} failed{why}"
                     + (f", {t.repaired} repaired" if t.repaired else ""))
    return (f"whet demos: {len(made.demos)} demonstrations to {out} in {made.seconds:.1f} s ("
            + "; ".join(parts) + ")" + (f"; {len(made.errors)} bad task lines" if made.errors else ""))


@friendly
def demos(config: ConfigOpt, out: OutOpt, domains: DomainsOpt = None,
          per_task: PerTaskOpt = None, limit: LimitOpt = None) -> None:
    """Write demonstrations of the config's training tasks for the warm start."""
    log_mod.configure(kind="cli", instance="demos", level="warning")
    cfg = config_mod.load(config)
    chosen = domains_of(cfg, domains)
    if out.is_dir():
        raise WhetError(f"demos: --out {out}: a folder; give a file name")
    made = anyio.run(demos_of, cfg, chosen, per_task or cfg.warmstart.per_task,
                     cfg.warmstart.tasks_per_domain if limit is None else limit)
    for error in made.errors:
        typer.echo(f"whet demos: {error}", err=True)
    write_demos(out, made.demos)
    typer.echo(summary(made, out))


def register(app: typer.Typer) -> None:
    app.command("demos")(demos)
