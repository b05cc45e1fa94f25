"""The run directory: where one run keeps its config, server store, logs, pid and URL.

Consumes a `RunConfig`; produces `runs/<run_id>/` with
- `config.resolved.json`  the config as validated at start;
- `nats.url`              the server the run uses (embedded or configured);
- `nats/`                 the embedded server's JetStream store and log;
- `logs/<instance>.jsonl` one JSON-lines event log per process;
- `supervisor.pid`        the process `whet down` signals, with its start time and run id
                          (`runtime.stack.pidfile`), so a reused pid is never signalled;
- `failure.json`          why the run stopped, when a kind's crash loop stopped it;
- `supervisor.cause`      why the supervisor stopped on an error, one line
                          (`runtime.stack.stop_cause`);
- `checkpoints/`          the learner's kept DeepSpeed checkpoints (`[learner] checkpoint_dir`);
- `model/`                the final policy as a Hugging Face folder, written by the learner
                          when it stops (`policy.export`; `whet export-model` for others);
- `review/`               people's labels and the model judge's opinions (`whet review`);
and the `runs/latest` link. It starts nothing.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from bus.errors import RunError
from runtime.config import RunConfig, dump
from runtime.stack import pidfile


@dataclass(frozen=True)
class RunDir:
    """A run's folder and the files in it (config, server URL, pid, NATS data)."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def config_file(self) -> Path:
        return self.path / "config.resolved.json"

    @property
    def url_file(self) -> Path:
        return self.path / "nats.url"

    @property
    def pid_file(self) -> Path:
        return self.path / "supervisor.pid"

    @property
    def failure_file(self) -> Path:
        """The `ActorFailure` (JSON) of a kind whose crash loop stopped the run."""
        return self.path / "failure.json"

    @property
    def cause_file(self) -> Path:
        """One line: why the supervisor stopped on an error (`runtime.stack.stop_cause`)."""
        return self.path / "supervisor.cause"

    @property
    def nats_dir(self) -> Path:
        return self.path / "nats"

    def url(self) -> str:
        try:
            return self.url_file.read_text().strip()
        except OSError:
            raise RunError(f"{self.path}: no nats.url; is the run started?") from None

    def supervisor(self) -> pidfile.Holder:
        """The run's live supervisor (by `supervisor.pid`), or why that file is stale."""
        return pidfile.holder(self.pid_file, self.run_id)

    def remove_live_files(self) -> None:
        """Remove `supervisor.pid` and `ready`, the files that say the stack runs; never
        raises (it runs on the way out, perhaps on a full disk)."""
        for path in (self.pid_file, self.path / "ready"):
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass

    def clear_stale(self) -> str:
        """Why `supervisor.pid` names no live supervisor of this run (a supervisor killed
        before it could clean up), once that file and `ready` are removed; '' when it names
        the live supervisor, or there is none."""
        stale = self.supervisor().stale
        if stale:
            self.remove_live_files()
        return stale

    def supervisor_pid(self) -> int | None:
        """The pid of the run's live supervisor; None when none runs."""
        record = self.supervisor().record
        return record.pid if record else None


def create(cfg: RunConfig) -> RunDir:
    """Make a fresh run directory, write the resolved config, point `latest` at it."""
    root = Path(cfg.run.runs_dir)
    run_id = f"{cfg.run.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    path = root / run_id
    path.mkdir(parents=True)
    (path / "config.resolved.json").write_bytes(dump(cfg))
    latest = root / "latest"
    tmp = root / f".latest-{run_id}"
    tmp.symlink_to(run_id)
    os.replace(tmp, latest)
    return RunDir(path.resolve())


def find(run: str | None, runs_dir: str = "runs") -> RunDir:
    """The run named `run` (an id or a path), or the latest one."""
    if run:
        candidate = Path(run)
        if not candidate.is_dir():
            candidate = Path(runs_dir) / run
    else:
        candidate = Path(runs_dir) / "latest"
    if not candidate.is_dir():
        raise RunError(f"no run at {candidate}; start one with 'whet up'")
    return RunDir(candidate.resolve())
