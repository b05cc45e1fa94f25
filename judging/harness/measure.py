"""Quality measurements of the candidate's source, run by the harness as separate processes.

Consumes the path of `solution.py` and the `quality` part of the job spec (which tools, the
lines of prompt prefix to leave out, a wall-clock allowance); produces one plain record per
tool: `{"findings": N, "first": [...]}` or `{"error": why}`. The tools are the sandbox
tree's own `flake8` (ruff's default rule set: E4, E7, E9, F) and `mypy`, run before any
candidate code has run, on a file the job cannot write, from a fresh scratch folder, with
no configuration file read: nothing the candidate does can change what they report. Only
findings on the candidate's own lines count (after `offset` lines of prompt prefix).
It does NOT turn findings into rewards: the judge does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time

LINT_RULES = "E4,E7,E9,F"
"ruff's default selection, spelled for flake8."
_LINE = re.compile(r"^[^:\n]*solution\.py:(\d+):(?:\d+:)?\s*(.*)$", re.MULTILINE)


def lint_argv(path: str, offset: int) -> list[str]:
    # A whole function in a check task redefines the prompt's stub: that is the format, not a finding.
    ignore = ["--extend-ignore=F811"] if offset else []
    return ["flake8", "--isolated", "--jobs=1", f"--select={LINT_RULES}", *ignore, path]


MYPY_CACHE = "/var/cache/whet-mypy"
MYPY_FLAGS = ("--no-error-summary", "--show-error-codes", "--check-untyped-defs",
              "--ignore-missing-imports", "--follow-imports=skip", "--config-file=",
              "--disable-error-code=var-annotated", "--disable-error-code=no-redef")
"As `sandbox.envs.MYPY_FLAGS`, which built the tree's read-only stub cache (a test keeps them equal)."


def types_argv(path: str) -> list[str]:
    # The tree's cache holds the stubs, checked once at build time; /dev/null writes nothing.
    cache = MYPY_CACHE if os.path.isdir(MYPY_CACHE) else "/dev/null"
    return ["mypy", *MYPY_FLAGS, f"--cache-dir={cache}", path]


def run_tool(argv: list[str], offset: int, wall_s: float, errors_only: bool) -> dict:
    """Run one tool; count the findings it prints past `offset`."""
    if shutil.which(argv[0]) is None:
        return {"error": f"{argv[0]} is not installed in this sandbox"}
    scratch = tempfile.mkdtemp(prefix="whet-q-")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch, "TMPDIR": scratch,
           "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, check=False, cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=max(wall_s, 0.1))
    except subprocess.TimeoutExpired:
        return {"error": f"{argv[0]} ran past {wall_s:.1f} s"}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    found = []
    for line_no, text in _LINE.findall(proc.stdout):
        if int(line_no) > offset and (not errors_only or text.startswith("error:")):
            found.append(f"{int(line_no) - offset}: {text}"[:200])
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and not _LINE.search(proc.stdout)):
        return {"error": f"{argv[0]} exited {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}"}
    return {"findings": len(found), "first": found[:5], "wall_s": round(time.monotonic() - started, 3)}


def measure(path: str, spec: dict) -> dict:
    """The lint and type records `spec` asks for."""
    offset = int(spec.get("offset", 0))
    deadline = time.monotonic() + float(spec.get("wall_s", 8.0))
    out = {}
    if spec.get("lint"):
        out["lint"] = run_tool(lint_argv(path, offset), offset, deadline - time.monotonic(), False)
    if spec.get("types"):
        out["types"] = run_tool(types_argv(path), offset, deadline - time.monotonic(), True)
    return out
