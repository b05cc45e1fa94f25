"""Benchmark: the run's dead time: how long until the first update, and after the last round.

Consumes a config (default configs/default.toml) and `--set section.key=value` overrides; runs
`whet up` on it in a child process, as `make run` does after its set-up, or reads a finished
run (`--from-run`). From the run's own records (`metrics/train.csv`, the evaluator's
`evaluator.evaluated` events, the supervisor's `training.finished` and `stack.stopped`) it
writes one JSON: whole-stack CPU and wall seconds at the first update, and seconds from the
last round to the stop. `--first-only` stops the stack (SIGINT) once the first update is in.

    python bench/learning/dead_time.py [--config configs/default.toml] [--first-only] --out F.json
    python bench/learning/dead_time.py --from-run runs/<id> --out F.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def overlay(config: Path, settings: list[str]) -> Path:
    """A config file extending `config` with `section.key=value` settings."""
    if not settings:
        return config
    sections: dict[str, list[str]] = {}
    for item in settings:
        key, _, value = item.partition("=")
        section, _, name = key.rpartition(".")
        sections.setdefault(section, []).append(f"{name} = {value}")
    body = [f'extends = "{config}"'] + [f"\n[{s}]\n" + "\n".join(lines)
                                        for s, lines in sections.items()]
    path = Path(tempfile.mkdtemp(prefix="dead-time-")) / "config.toml"
    path.write_text("\n".join(body) + "\n")
    return path


def first_step(run_dir: Path) -> dict | None:
    """The first row of the run's train.csv, once written."""
    path = run_dir / "metrics" / "train.csv"
    if not path.exists():
        return None
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return rows[0] if rows else None


def rounds(run_dir: Path) -> list[dict]:
    """The evaluator's `evaluator.evaluated` events, whole lines only."""
    log = run_dir / "logs" / "evaluator-1.jsonl"
    out = []
    for line in log.read_text().splitlines() if log.exists() else []:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:  # a line still being written
            continue
        if event.get("event") == "evaluator.evaluated":
            out.append(event)
    return out


def supervisor_times(run_dir: Path) -> dict[str, float]:
    """Timestamps of the supervisor's events, first of each."""
    out: dict[str, float] = {}
    log = run_dir / "logs" / "supervisor.jsonl"
    for line in log.read_text().splitlines() if log.exists() else []:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        out.setdefault(event.get("event", ""), event.get("timestamp") or event.get("ts") or 0.0)
    return out


def from_run(run_dir: Path) -> dict:
    """The dead time of a finished run, from its own files."""
    first = first_step(run_dir)
    times = supervisor_times(run_dir)
    finished, stopped = times.get("training.finished"), times.get("stack.stopped")
    return {"run_dir": str(run_dir),
            "first_update": None if first is None else {
                "stack_cpu_s": float(first["cpu_s"]), "run_wall_s": float(first["wall_s"])},
            "rounds": [{"version": e["fields"]["policy_version"],
                        "overall": e["fields"]["overall"]} for e in rounds(run_dir)],
            "last_round_to_stopped_s": None if not (finished and stopped)
            else round(stopped - finished, 1)}


def main(args: argparse.Namespace) -> int:
    from runtime.config import load

    if args.from_run:
        report = {"command": " ".join(sys.argv), **from_run(Path(args.from_run).resolve())}
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report, indent=2))
        return 0
    config = overlay(Path(args.config).resolve(), args.set)
    runs = (ROOT / load(config).run.runs_dir).resolve()
    before = set(runs.iterdir()) if runs.exists() else set()
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "runtime.cli", "up", "--config", str(config)],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    run_dir, first, first_wall, seen, seen_at = None, None, None, 0, None
    while proc.poll() is None:
        time.sleep(1.0)
        if run_dir is not None and len(rounds(run_dir)) > seen:  # seen within a second
            seen, seen_at = len(rounds(run_dir)), time.monotonic()
        if run_dir is None and runs.exists():
            new = [p for p in runs.iterdir() if p not in before and p.is_dir()
                   and p.name != "latest"]
            run_dir = new[0] if new else None
        if run_dir is not None and first is None:
            first = first_step(run_dir)
            if first is not None:
                first_wall = time.monotonic() - began
                if args.first_only:
                    proc.send_signal(signal.SIGINT)
    ended = time.monotonic() - began
    events = rounds(run_dir) if run_dir else []
    report = {"command": " ".join(sys.argv), "config": str(args.config), "set": args.set,
              "run_dir": str(run_dir), "exit_code": proc.returncode,
              "first_update": None if first is None else {
                  "stack_cpu_s": float(first["cpu_s"]), "run_wall_s": float(first["wall_s"]),
                  "wall_s_from_command": round(first_wall, 1)},
              "rounds": [{"version": e["fields"]["policy_version"], "ts": e.get("ts"),
                          "overall": e["fields"]["overall"]} for e in events],
              "wall_s_from_command": round(ended, 1),
              "last_round_wall_s": None if seen_at is None else round(seen_at - began, 1),
              "last_round_to_exit_s": None if seen_at is None else round(ended - seen_at, 1)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "default.toml"))
    parser.add_argument("--set", action="append", default=[],
                        help="section.key=value (a TOML value), e.g. training.max_steps=2")
    parser.add_argument("--first-only", action="store_true", help="stop at the first update")
    parser.add_argument("--from-run", default="", help="read this finished run instead")
    parser.add_argument("--out", required=True)
    sys.exit(main(parser.parse_args()))
