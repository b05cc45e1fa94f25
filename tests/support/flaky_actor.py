"""An actor for supervision tests that crashes before it is ready on its first starts.

Consumes nothing and publishes nothing. Each start counts itself in `<run dir>/flaky.starts`;
the first `CRASHES` starts raise before signalling readiness (as a missing dependency or a
bad config would), later ones signal readiness and wait for the stop.
"""

from __future__ import annotations

from pathlib import Path

import anyio

CRASHES = 2


async def run(bus, config, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
    counter = Path(bus.identity.run_dir) / "flaky.starts"
    starts = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(starts))
    if starts <= CRASHES:
        raise RuntimeError(f"flaky start {starts} of {CRASHES} failing starts")
    task_status.started()
    await bus.stopping.wait()
