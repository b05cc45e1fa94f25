"""`whet exec`: run one command in a fresh sandbox and print its `ExecutionResult` as JSON.

Consumes command-line options (backend, runtime, limits, a folder of files) and the sandbox
section of a config file; produces one JSON document on stdout and exits with the program's
status (`exit_status`); when the sandbox, not the program, failed, it says so on stderr and
exits 125. A runtime it does not know or a file it cannot read is one line and exit 2. It
goes through the same `open_backend` and `sandbox.runner.run_job` as the executor actor, so
what it shows is what the actor does. It does NOT touch the bus.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import anyio
import msgspec
import typer

from bus.errors import WhetError
from bus.messages import ExecutionResult, Job, Limits
from runtime import config as config_mod
from runtime import log as log_mod
from runtime.cli.options import friendly
from sandbox.envs import SPECS

SANDBOX_FAILED = 125
"The exit status when the sandbox failed, not the program (as `docker run` uses it)."


def read_files(folder: Path) -> dict[str, bytes]:
    """Every regular file under `folder`, by path relative to it."""
    if not folder.is_dir():
        raise WhetError(f"exec: --files {folder}: not a folder")
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(folder))] = read_input(path, "--files")
    return out


def read_input(path: Path, option: str) -> bytes:
    """The bytes of a file the command line names; WhetError naming it when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise WhetError(f"exec: {option} {path}: cannot read: {exc.strerror}") from None


def exit_status(result: ExecutionResult) -> tuple[int, str]:
    """The status `whet exec` exits with for `result`, and what to say on stderr ('' when
    the program's own exit status says it): its exit code, 128 + a signal that killed it,
    124 past its time limit, 125 when the sandbox failed."""
    if result.sandbox_failed or result.status == "sandbox_error":
        return SANDBOX_FAILED, f"the sandbox failed, not the program: {result.sandbox_error}"
    if result.status == "timeout":
        return 124, f"the program ran past its time limit (stopped after {result.wall_s:.1f} s)"
    code = result.exit_code if result.exit_code is not None else 128 + (result.signal or 9)
    notes = {"oom": "the program was killed for memory (its memory limit)",
             "output_limit": "the program wrote more output than the limit allows",
             "killed": f"the program was killed (signal {result.signal})"}
    if result.status in notes:
        return code or 1, notes[result.status]
    return code, ""


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
        if env not in SPECS:
            raise WhetError(f"exec: --env {env!r}: unknown runtime; expected one of {sorted(SPECS)}")
        limits = Limits(timeout_s=timeout, cpu_s=timeout, memory_mb=memory)
        job = Job(command=command, files=read_files(files) if files else {}, runtime=env,
                  stdin=read_input(stdin, "--stdin") if stdin else b"", limits=limits)

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
        code, note = exit_status(result)
        if note:
            typer.echo(f"whet exec: {note}", err=True)
        if code:
            raise typer.Exit(code)
