"""Environment `data_scripts`: write a script that transforms CSV / JSON data.

Consumes a seeded rng and a rung; produces `script_io` Drafts verified by differential
testing: the reference script's output on random inputs is the expected output. Rung 0 is
plain lines on stdin; rungs 1-4 are tables (see `pipeline`). Expected outputs are computed
by running the trusted reference's `solve(text)` in this process; the sandbox runs only
attempts (and, in the gates, the reference and its mutants). It does not run attempts.
"""

from __future__ import annotations

import json
import random

from bus.messages import Verifier
from envs import phrasing
from envs.data_scripts import lines, pipeline, tables
from envs.environment import Draft, Environment

HIDDEN = 8
IMPORTS = "import csv\nimport io\nimport json\nimport sys\n\n\ndef solve(text):\n"


class Redundant(Exception):
    """A step that changes nothing on the drawn inputs: draw again."""


def _solver(body: str):
    scope: dict = {}
    exec(compile(IMPORTS + body, "<data_scripts>", "exec"), scope)  # trusted reference
    return scope["solve"]


def _example(cases: list[dict], trivial: set[str]) -> dict:
    """The case shown in the prompt: the shortest whose output is not a trivial one."""
    telling = [c for c in cases if c["expected_stdout"] not in trivial] or cases
    return min(telling, key=lambda c: len(json.dumps(c)))


def _main_line(source_file: str) -> str:
    reader = f"open({source_file!r}).read()" if source_file else "sys.stdin.read()"
    return f"\n\nprint(solve({reader}))\n"


def _same(solve, inputs: list[str], outputs: list[str]) -> bool:
    """Whether `solve` (a reference with one step dropped) still gives every output."""
    try:
        return all(solve(t) == o for t, o in zip(inputs, outputs))
    except Exception:  # noqa: BLE001 - failing without the step means the step matters
        return False


def _case(text: str, expected: str, source_file: str) -> dict:
    if source_file:
        return {"stdin": "", "files": {source_file: text}, "expected_stdout": expected}
    return {"stdin": text, "files": {}, "expected_stdout": expected}


_OPENERS = (
    "Write a Python script that reads {what} from {where} and does the following: {say}.",
    "Create a Python program. It reads {what} from {where}; it must {say}.",
    "Task: a script gets {what} on {where}. Make it {say}.",
    "Write a command-line Python script: input is {what} from {where}. It should {say}.",
    "Implement a Python script that takes {what} from {where} and will {say}.",
    "Using Python, build a small program that reads {what} from {where}; it should {say}.",
)


def _ended(text: str) -> str:
    return text if text.endswith("\n") or not text else text + "\n"


SKELETON = "```python\nline = input()\n# ... compute the answer from line ...\nprint(answer)\n```"
"Rung 0 shows how a script reads its line and prints; the scaffold fades after rung 1."


def _scaffold(rng: random.Random, level: int, source_file: str) -> str:
    if level == 0:
        return "\n\n" + phrasing.pick(rng, ("Start from this skeleton:", "Fill in this script:")) + \
            "\n" + SKELETON
    if level == 1 and not source_file:
        return "\n\nRead the whole input with `sys.stdin.read()` (it has several lines) and " \
               "print the result."
    return ""


def _prompt(rng: random.Random, what: str, source_file: str, say: str, example: dict,
            level: int = 2) -> str:
    where = f"the file `{source_file}` in the working directory" if source_file \
        else "standard input"
    opener = phrasing.pick(rng, _OPENERS).format(what=what, where=where, say=say)
    given = example["files"][source_file] if source_file else example["stdin"]
    shown = (f"Example input:\n```\n{_ended(given)}```\nExpected output:\n```\n"
             f"{_ended(example['expected_stdout'])}```")
    return f"{opener}\n\n{shown}{_scaffold(rng, level, source_file)}\n\n{phrasing.answer_script(rng)}"


def _table_parts(rng: random.Random, level: int):
    task = pipeline.table_task(rng, level)
    read = tables.READ_CODE[task.fmt].format(convert=pipeline.convert_code(task))
    step_code = [code for _, code, _ in task.steps]
    body = read + "".join(step_code) + task.output[1]
    ablations = [read + "".join(step_code[:i] + step_code[i + 1:]) + task.output[1]
                 for i in range(len(step_code))]
    said = "; ".join([s for _, _, s in task.steps] + [task.output[2]])
    compare = "json" if task.output[0] in ("json", "group") else "text"
    source_file = ""
    if level >= 3 and rng.random() < 0.4:
        source_file = f"{task.theme.name}.{'csv' if task.fmt == 'csv' else task.fmt}"
    what = f"{task.theme.name} data as {tables.FORMAT_WORDS[task.fmt]} (columns: " \
           f"{', '.join(task.theme.columns)})"
    edges = [tables.RENDER[task.fmt]([], task.theme.columns)]
    return task.family, body, ablations, said, pipeline.make_input(task), edges, compare, \
        source_file, what


def make_task(rng: random.Random, level: int) -> Draft:
    """One data-processing task at `level` (0: one line, 1: lines, 2-5: tables)."""
    for _ in range(30):
        if level <= 1:
            family, body, says, make = (lines.single_line_task if level <= 0
                                        else lines.line_task)(rng)
            edges = [] if level <= 0 else ["", "\n"]
            parts = (family, body, [], phrasing.pick(rng, says), make, edges, "text", "",
                     "one line of text" if level <= 0 else "text lines")
        else:
            parts = _table_parts(rng, level - 1)
        try:
            return _draft(rng, level, *parts)
        except Redundant:
            continue
    raise RuntimeError(f"data_scripts: no usable task at level {level}")


def _draft(rng: random.Random, level: int, family: str, body: str, ablations: list[str],
           say: str, make, edges: list[str], compare: str, source_file: str,
           what: str) -> Draft:
    solve = _solver(body)
    inputs = list(dict.fromkeys(make(rng) for _ in range(HIDDEN + 6)))[:HIDDEN + 1]
    if len(inputs) < 5:
        raise Redundant(family)
    outputs = [solve(t) for t in inputs]
    edge_outputs = [solve(t) for t in edges]
    if len(set(outputs)) < 3:
        raise Redundant(family)
    for weaker in map(_solver, ablations):
        if _same(weaker, inputs + edges, outputs + edge_outputs):
            raise Redundant(family)
    cases = [_case(t, o, source_file) for t, o in zip(inputs, outputs)]
    visible = _example(cases, set(edge_outputs))
    hidden = [c for c in cases if c is not visible]
    extra = {"compare": compare,
             "robustness": json.dumps([_case(t, o, source_file)
                                       for t, o in zip(edges, edge_outputs)])}
    reference = IMPORTS + body + _main_line(source_file)
    return Draft(prompt=_prompt(rng, what, source_file, say, visible, level),
                 verifier=Verifier(kind="script_io", visible=json.dumps([visible]),
                                   hidden=json.dumps(hidden), reference=reference, extra=extra),
                 entry_point="", files={}, family=family)


ENVIRONMENT = Environment(
    name="data_scripts",
    version="1",
    domain="data",
    summary="Write a script that transforms CSV / JSON input (script_io, differential tests).",
    levels=6,
    difficulty="rung 0 one input line (with a skeleton), rung 1 many lines; then tables with "
               "more steps (filter, sort, derive, head), richer outputs (CSV, JSON, grouped "
               "totals) and input formats (JSON, JSON lines, a named file)",
    make_task=make_task,
)
