"""A scripted agent that solves a repository task, for demonstrations (`envs.demos`).

Consumes a repository task (its workspace and, since demonstrations are training data, the
reference workspace in its verifier), a seeded `random.Random` and a sandbox backend (to
choose a wrong first edit that the visible tests reveal); produces an agent for
`judging.episode.run_episode`: it lists the files, reads the failing test and the package's
modules, runs the tests, edits, runs them again and submits, in an order the rng varies.
With `wrong_first` its first edit is wrong (part of the fix only, or a changed condition),
the tests show it, and it repairs it. Each turn is one line of reasoning and one
`<tool_call>`, as the model would write it. It judges nothing and opens no session.
"""

from __future__ import annotations

import difflib
import random
import re
from dataclasses import dataclass
from typing import Callable

from bus.messages import Task
from judging import repo
from judging.episode import Agent, tool_text
from sandbox.session import count_tests, run_visible

_SWAPS = ((">=", "=="), (">=", ">"), ("<=", "<"), (" > ", " >= "), (" < ", " <= "),
          ("min(", "max("), ("max(", "min("), (" + ", " - "), (" - ", " + "),
          ("round(", "int("), ("<= 0", "< 0"), ("'-'", "''"))
"Text changes that turn a right fix into a plausible wrong one (besides integers off by one)."
_INT = re.compile(r"(?<![\w.])\d+(?![\w.])")
_PAIR = re.compile(r"\b(\w+)\((\w+), (\w+)\)")
_FAILED = re.compile(r"^(?:FAIL|ERROR): (\w+)", re.M)


@dataclass(frozen=True)
class Hunk:
    """One edit of one file: `old` occurs exactly once in the file before it."""

    path: str
    old: str
    new: str

    def apply(self, files: dict[str, str]) -> dict[str, str]:
        """`files` with this edit made."""
        return {**files, self.path: files[self.path].replace(self.old, self.new, 1)}


def hunks(before: dict[str, str], after: dict[str, str]) -> list[Hunk]:
    """The edits that turn `before` into `after` (files both hold), each `old` grown by
    neighbouring lines until it is unique in its file."""
    out = []
    for path in sorted(p for p in before if p in after and before[p] != after[p]):
        a, b = before[path].splitlines(keepends=True), after[path].splitlines(keepends=True)
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b).get_opcodes():
            if tag == "equal":
                continue
            while (not "".join(a[i1:i2]).strip() or before[path].count("".join(a[i1:i2])) != 1) \
                    and (i1 > 0 or i2 < len(a)):
                if i1 > 0:
                    i1, j1 = i1 - 1, j1 - 1
                else:
                    i2, j2 = i2 + 1, j2 + 1
            out.append(Hunk(path, "".join(a[i1:i2]), "".join(b[j1:j2])))
    return out


def wrong_edits(fix: list[Hunk]) -> list[tuple[list[Hunk], list[Hunk]]]:
    """(wrong first edit, the repair after it) candidates: part of a fix of several hunks,
    then each right hunk with one condition or operator changed."""
    out = []
    if len(fix) > 1:
        out.append((fix[:1], fix[1:]))
    for i, h in enumerate(fix):
        wrongs = [h.new.replace(old, new, 1) for old, new in _SWAPS if old in h.new]
        wrongs += [h.new[:m.start()] + str(int(m.group()) + step) + h.new[m.end():]
                   for m in _INT.finditer(h.new) for step in (1, -1)]
        wrongs += [h.new[:m.start()] + f"{m[1]}({m[3]}, {m[2]})" + h.new[m.end():]
                   for m in _PAIR.finditer(h.new)]
        wrongs += [h.new[:m.start()] + m[2] + h.new[m.end():] for m in _PAIR.finditer(h.new)
                   if m[1] in ("min", "max")]
        for wrong in dict.fromkeys(wrongs):
            if wrong not in (h.new, h.old):
                out.append(([*fix[:i], Hunk(h.path, h.old, wrong)],
                            [Hunk(h.path, wrong, h.new), *fix[i + 1:]]))
    return out


async def revealed_wrong_edit(task: Task, backend, fix: list[Hunk], rng: random.Random,
                              ) -> tuple[list[Hunk], list[Hunk]] | None:
    """A wrong first edit (and its repair) after which the visible tests fail, tried in an
    rng order; None when no candidate is caught by them."""
    candidates = wrong_edits(fix)
    rng.shuffle(candidates)
    for wrong, repair in candidates:
        files = dict(task.files)
        for h in wrong:
            files = h.apply(files)
        if any(files[h.path].count(h.old) != 1 for h in repair):
            continue
        result = await run_visible(backend, task, files)
        if not result.infra and result.visible_passed < result.visible_total:
            return wrong, repair
    return None


Thought = Callable[[str], str]
"The reasoning line of a turn, from the last tool message."


@dataclass(frozen=True)
class Step:
    """One turn: its reasoning line and its tool call."""

    thought: Thought
    call: str


def _said(text: str) -> Thought:
    return lambda last: text


def _after_run(last: str) -> str:
    passed, total = count_tests(last)
    failing = _FAILED.findall(last)
    if total and passed < total:
        return f"{passed} of {total} tests pass; {failing[0] if failing else 'one'} fails."
    return f"All {total} tests pass." if total else "The tests did not run."


def _edit_steps(hunks_: list[Hunk], files: dict[str, str], whole: bool,
                why: Callable[[Hunk], Thought]) -> tuple[list[Step], dict[str, str]]:
    """Steps making `hunks_` (one `replace` each, or one `write_file` per file), and the files after."""
    steps = []
    for h in hunks_:
        files = h.apply(files)
        if not whole:
            steps.append(Step(why(h), tool_text("replace", path=h.path, old=h.old, new=h.new)))
    if whole:
        for path in dict.fromkeys(h.path for h in hunks_):
            first = next(h for h in hunks_ if h.path == path)
            steps.append(Step(why(first), tool_text("write_file", path=path, content=files[path])))
    return steps, files


def _change(h: Hunk) -> str:
    old = [ln.strip() for ln in h.old.splitlines() if ln.strip()]
    new = [ln.strip() for ln in h.new.splitlines() if ln.strip()]
    gone = [ln for ln in old if ln not in new]
    added = [ln for ln in new if ln not in old]
    if gone and added:
        return f"`{gone[0][:70]}` should be `{added[0][:70]}`"
    return f"it lacks `{added[0][:70]}`" if added else f"`{gone[0][:70]}` should go"


def plan(task: Task, rng: random.Random, wrong: tuple[list[Hunk], list[Hunk]] | None = None
         ) -> list[Step]:
    """The turns of one demonstration: explore (list, read the test and the modules, run the
    tests) in an rng order, make the fix (or `wrong`'s first edit, a test run, its repair),
    run the tests, submit."""
    files = dict(task.files)
    fix = hunks(files, repo.files_of(task.verifier.reference))
    test_path = next(p for p in sorted(files) if repo.is_test_path(p) and p.endswith(".py")
                     and "test_" in p)
    touched = list(dict.fromkeys(h.path for h in fix))
    others = [p for p in sorted(files) if p.endswith(".py") and not repo.is_test_path(p)
              and p not in touched and not p.endswith("__init__.py")]
    modules = touched + rng.sample(others, rng.randint(0, len(others)))
    rng.shuffle(modules)

    def read(path: str, why: str) -> Step:
        ranged = rng.random() < 0.3
        return Step(_said(why), tool_text("read_file", path=path, start=1, end=80) if ranged
                    else tool_text("read_file", path=path))

    listing = Step(_said(rng.choice(["See which files the repository has.",
                                     "Look at the repository's files."])), tool_text("list_files"))
    first_run = Step(_said(rng.choice(["Run the tests to see what fails.",
                                       "Run the visible tests first."])), tool_text("run_tests"))
    test = read(test_path, "Read the tests to see what they expect.")
    explore = rng.choice([[listing, test, first_run], [first_run, listing, test],
                          [listing, first_run, test]])
    explore += [read(m, f"Read {m}.") for m in modules]
    whole = rng.random() < 0.5
    rerun = Step(_after_run, tool_text("run_tests"))
    steps = list(explore)
    if wrong is None:
        fixing, _ = _edit_steps(fix, files, whole, lambda h: _said(f"In {h.path}, {_change(h)}."))
        steps += fixing
    else:
        first, files = _edit_steps(wrong[0], files, whole,
                                   lambda h: _said(f"In {h.path}, {_change(h)}."))
        repair, _ = _edit_steps(wrong[1], files, whole, lambda h: lambda last: (
            f"{_after_run(last)[:-1]}: my change is not right yet. In {h.path}, {_change(h)}."))
        steps += [*first, Step(_said("Run the tests to check the change."), tool_text("run_tests")),
                  *repair]
    steps.append(Step(_said("Run the tests again to check the fix."), tool_text("run_tests")))
    steps.append(Step(lambda last: f"{_after_run(last)} Submit.", tool_text("submit")))
    return steps


def scripted_agent(steps: list[Step]) -> Agent:
    """An agent that plays `steps` in order, each thought written from the last tool message."""
    queue = list(steps)

    async def agent(messages: list[dict[str, str]]) -> str:
        step = queue.pop(0) if queue else Step(_said("Done."), tool_text("submit"))
        last = messages[-1]["content"] if messages and messages[-1]["role"] == "tool" else ""
        return f"{step.thought(last)}\n{step.call}"
    return agent


async def demo_agent(task: Task, backend, rng: random.Random, wrong_first: bool
                     ) -> tuple[Agent, bool]:
    """The agent of one demonstration, and whether its first edit is a wrong one (asked for
    with `wrong_first`, and found: some fixes have no wrong variant the tests reveal)."""
    wrong = None
    if wrong_first:
        fix = hunks(dict(task.files), repo.files_of(task.verifier.reference))
        wrong = await revealed_wrong_edit(task, backend, fix, rng)
    return scripted_agent(plan(task, rng, wrong)), wrong is not None
