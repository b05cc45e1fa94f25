"""`whet scale KIND=N ...`: change actor counts while a stack runs.

Consumes KIND=N pairs and a run or URL; produces `ScaleTarget`s in KV (`scale.<kind>`,
which the supervisor applies) and waits, unless told not to, until the live counts match
(read as `whet status` reads them).
"""

from __future__ import annotations

import time
from typing import Annotated

import anyio
import typer

from bus import subjects
from bus.errors import WhetError
from bus.messages import ScaleTarget
from runtime.cli import stack_status as status_mod
from runtime.cli.options import RunOpt, UrlOpt, friendly, open_bus

@friendly
def scale(
    targets: Annotated[list[str], typer.Argument(help="KIND=N pairs, e.g. executor=4.")],
    run: RunOpt = None, url: UrlOpt = None,
    wait: Annotated[float, typer.Option(help="Seconds to wait for the new count (0: don't).")] = 60.0,
) -> None:
    """Change actor counts while the stack runs."""
    wanted = {}
    for item in targets:
        kind, sep, count = item.partition("=")
        if not sep or not count.isdigit():
            raise WhetError(f"scale: {item!r}: expected KIND=N, e.g. executor=4")
        wanted[kind] = int(count)

    async def go() -> None:
        bus = await open_bus(run, url)
        try:
            for kind, count in wanted.items():
                await bus.kv_put(subjects.BUCKET_RUN, subjects.scale_key(kind),
                                 ScaleTarget(kind=kind, count=count, requested_at=time.time()))
            typer.echo("requested " + " ".join(f"{k}={v}" for k, v in wanted.items()))
            if wait <= 0:
                return
            with anyio.move_on_after(wait):
                while True:
                    snap = await status_mod.gather(bus)
                    if all(snap.live(k) == n for k, n in wanted.items()):
                        typer.echo("running " + " ".join(f"{k}={snap.live(k)}" for k in wanted))
                        return
                    await anyio.sleep(0.5)
            raise WhetError(f"scale: counts not reached within {wait:.0f} s; see 'whet status'")
        finally:
            await bus.close()

    anyio.run(go)


def register(app: typer.Typer) -> None:
    app.command()(scale)
