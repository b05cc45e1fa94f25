"""Why an actor process died, in one line, from the files it left in `<run dir>/logs/`.

Consumes an instance's JSON-lines event log (`<instance>.jsonl`: `actor.crashed` carries the
formatted exception) and its captured stdout and stderr (`<instance>.out`: a traceback that
came before logging was set up, such as a bad entry point or config); produces the last line
of the newest exception ("ModuleNotFoundError: No module named 'mine'"), or ''. Reads only
the files' tails. It decides nothing about restarts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bus import subjects

TAIL_BYTES = 256 * 1024
_GROUP_MARGIN = re.compile(r"^(\s*[|+](?=[ -])-?)+ ?")
"An exception group's left margin: nested `| ` bars, a `+ ` or `+-+` corner."
_GROUP_RULE = re.compile(r"^\s*\+[-+]*-{3,}( (\d+|\.\.\.) -+)?\s*$")
"A rule line between an exception group's parts (`+---- 1 ----`, `+------`)."


def unboxed(line: str) -> str:
    """`line` without an exception group's margin, or '' for a rule line between its parts;
    a plain traceback line comes back unchanged."""
    if _GROUP_RULE.match(line):
        return ""
    return _GROUP_MARGIN.sub("", line)


def _tail(path: Path, offset: int = 0) -> list[str]:
    """The lines of `path` after byte `offset`, at most the last TAIL_BYTES of them."""
    try:
        with path.open("rb") as f:
            f.seek(max(offset, f.seek(0, 2) - TAIL_BYTES))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def last_line(text: str) -> str:
    """The last non-empty line of `text` (a traceback's exception line, the innermost one of
    an exception group), stripped."""
    lines = [line for line in (unboxed(raw).strip() for raw in text.splitlines()) if line]
    return lines[-1] if lines else ""


def from_event_log(path: Path, since: float) -> str:
    """The exception line of the newest logged exception at or after `since` (Unix time)."""
    for raw in reversed(_tail(path)):
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("ts", 0) < since:
            break
        exception = (record.get("fields") or {}).get("exception")
        if isinstance(exception, str) and exception.strip():
            return last_line(exception)
    return ""


def from_output(path: Path, offset: int = 0) -> str:
    """The exception line of the last Python traceback written to `path` past `offset`;
    else its last line that is not a JSON log record (`sys.exit("why")`); else ''."""
    lines = [line for line in map(unboxed, _tail(path, offset)) if line.strip()]
    starts = [i for i, line in enumerate(lines)
              if line.startswith(("Traceback (most recent call last)",
                                  "Exception Group Traceback (most recent call last)"))]
    if starts:
        after = [line for line in lines[starts[-1] + 1:] if not line[0].isspace()]
        return after[-1].strip() if after else ""
    plain = [line for line in lines if not line.lstrip().startswith("{")]
    return plain[-1].strip() if plain else ""


def cause(logs: Path, instance: str, since: float, out_offset: int = 0) -> str:
    """One line saying why the process of `instance` started at `since` died, or '';
    its captured output starts at byte `out_offset` of `<instance>.out`."""
    return (from_event_log(logs / f"{subjects.token(instance)}.jsonl", since)
            or from_output(logs / f"{instance}.out", out_offset))
