"""An actor for supervision tests that never gets ready: every start fails on an import.

Consumes nothing and publishes nothing. Its module imports, so preflight passes it; `run`
imports a module that does not exist (as a missing optional dependency would) and raises
ModuleNotFoundError before signalling readiness, on every start.
"""

from __future__ import annotations

import importlib

import anyio


async def run(bus, config, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
    importlib.import_module("no.such_module")
    task_status.started()
