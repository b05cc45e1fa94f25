"""`whet scale KIND=N ...`: change actor counts while a stack runs.

Consumes KIND=N pairs and a run or URL; produces `ScaleTarget`s in KV (`scale.<kind>`,
which the supervisor applies) and waits, unless told not to, until the live counts match
(read as `whet status` reads them). A pair that is not KIND=N, a count outside the config's
bounds or a kind the run cannot start is refused in one line before anything is written:
the known kinds are the built-in ones and the run config's `[actors] target` (without a run
folder, those beating on the bus).
"""

from __future__ import annotations

import difflib
import time
from typing import Annotated

import anyio
import typer

from bus import subjects
from bus.errors import WhetError
from bus.messages import Heartbeat, ScaleTarget
from runtime import config as config_mod
from runtime.cli import stack_status as status_mod
from runtime.cli.options import RunOpt, UrlOpt, friendly, open_bus
from runtime.kinds import KINDS
from runtime.stack import rundir

MOST = 64
"The most instances of one kind (the bound of `[actors] count`)."

@friendly
def scale(
    targets: Annotated[list[str], typer.Argument(help="KIND=N pairs, e.g. executor=4.")],
    run: RunOpt = None, url: UrlOpt = None,
    wait: Annotated[float, typer.Option(help="Seconds to wait for the new count (0: don't).")] = 60.0,
) -> None:
    """Change actor counts while the stack runs."""
    wanted = parse_targets(targets)
    known = run_kinds(run)
    if known is not None:
        refuse_unknown(wanted, known)

    async def go() -> None:
        bus = await open_bus(run, url)
        try:
            if known is None:
                beats = await bus.kv_items(subjects.BUCKET_ACTORS, Heartbeat)
                refuse_unknown(wanted, set(KINDS) | {b.kind for b in beats.values()})
            for kind, count in wanted.items():
                await bus.kv_put(subjects.BUCKET_RUN, subjects.scale_key(kind),
                                 ScaleTarget(kind=kind, count=count, requested_at=time.time()))
            typer.echo("requested " + " ".join(f"{k}={v}" for k, v in wanted.items()))
            if wait <= 0:
                return
            with anyio.move_on_after(wait):
                while True:
                    snap = await status_mod.gather_patiently(bus)
                    if all(snap.live(k) == n for k, n in wanted.items()):
                        typer.echo("running " + " ".join(f"{k}={snap.live(k)}" for k in wanted))
                        return
                    await anyio.sleep(0.5)
            raise WhetError(f"scale: counts not reached within {wait:.0f} s; see 'whet status'")
        finally:
            await bus.close()

    anyio.run(go)


def parse_targets(items: list[str]) -> dict[str, int]:
    """The counts by kind in KIND=N pairs; WhetError naming the first pair that is not one."""
    wanted: dict[str, int] = {}
    for item in items:
        kind, sep, count = item.partition("=")
        if not sep or not kind or not (count.isascii() and count.isdigit()):
            raise WhetError(f"scale: {item!r}: expected KIND=N with N a whole number, e.g. executor=4")
        if int(count) > MOST:
            raise WhetError(f"scale: {item!r}: at most {MOST} instances of a kind")
        if kind in wanted:
            raise WhetError(f"scale: {kind!r} is given twice; give each kind once")
        wanted[kind] = int(count)
    return wanted


def run_kinds(run: str | None) -> set[str] | None:
    """The kinds the run's config can start: the built-in ones and its `[actors] target`;
    None when there is no run folder to read it from."""
    try:
        cfg = config_mod.load(rundir.find(run).config_file)
    except WhetError:
        return None
    return set(KINDS) | set(cfg.actors.target)


def refuse_unknown(wanted: dict[str, int], known: set[str]) -> None:
    """WhetError naming the first kind in `wanted` that is not in `known` (with the closest
    known name, if one is close) and every known kind."""
    for kind in wanted:
        if kind not in known:
            close = difflib.get_close_matches(kind, sorted(known), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise WhetError(f"scale: unknown actor kind {kind!r}; {hint}"
                            f"known kinds: {', '.join(sorted(known))}")


def register(app: typer.Typer) -> None:
    app.command()(scale)
