"""`whet exec`: run one command in a fresh sandbox and print its `ExecutionResult` as JSON.

Consumes command-line options (backend, runtime, limits, a folder of files) and the sandbox
section of a config file; produces one JSON document on stdout. It goes through the same
`open_backend` and `sandbox.runner.run_job` as the executor actor, so what it shows is what
the actor does. It does NOT touch the bus.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import anyio
import msgspec
import typer

from bus.errors import WhetError
from bus.messages import Job, Limits
from runtime import config as config_mod
from runtime import log as log_mod
from runtime.cli.options import friendly


def read_files(folder: Path) -> dict[str, bytes]:
    """Every regular file under `folder`, by path relative to it."""
    if not folder.is_dir():
        raise WhetError(f"exec: --files {folder}: not a folder")
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def register(app: typer.Typer) -> None:
    @app.command("exec", context_settings={"allow_interspersed_args": False})
    @friendly
    def exec_(
        command: Annotated[list[str], typer.Argument(help="The command, after `--`.")],
        backend: Annotated[Optional[str], typer.Option(help="local, docker or subprocess (default: the config's).")] = None,
        env: Annotated[str, typer.Option("--env", help="Runtime (environment spec), e.g. python, shell.")] = "python",
        timeout: Annotated[float, typer.Option(help="Wall-clock limit, seconds.")] = 10.0,
        memory: Annotated[int, typer.Option(help="Memory limit (swap included), MB.")] = 512,
        files: Annotated[Optional[Path], typer.Option(help="Folder whose files the job sees at /work.")] = None,
        stdin: Annotated[Optional[Path], typer.Option(help="File fed to the command's stdin.")] = None,
        config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Config file for [executor.sandbox].")] = None,
    ) -> None:
        """Run CMD in a fresh sandbox (same code path as the executor) and print the result."""
        from sandbox import open_backend
        from sandbox.runner import run_job

        cfg = config_mod.load(config) if config else config_mod.RunConfig()
        log_mod.configure(kind="cli", instance="exec", level="warning")  # stdout is the JSON
        sandbox = cfg.executor.sandbox
        if backend is not None:
            if backend not in ("local", "docker", "subprocess"):
                raise WhetError(f"exec: --backend {backend!r}: expected local, docker or subprocess")
            sandbox = msgspec.structs.replace(sandbox, backend=backend)
        limits = Limits(timeout_s=timeout, cpu_s=timeout, memory_mb=memory)
        job = Job(command=command, files=read_files(files) if files else {}, runtime=env,
                  stdin=stdin.read_bytes() if stdin else b"", limits=limits)

        async def go():
            try:
                opened = await open_backend(sandbox, slots=1)
            except (RuntimeError, OSError) as exc:
                raise WhetError(f"exec: the {sandbox.backend} sandbox cannot start: {exc}") from None
            try:
                return await run_job(opened, job)
            finally:
                await opened.aclose()

        result = anyio.run(go)
        typer.echo(msgspec.json.format(msgspec.json.encode(result), indent=2))
