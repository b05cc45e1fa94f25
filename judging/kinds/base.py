"""What a verifier kind declares: how its attempts are read, gated, run, scored and audited.

Consumes nothing; produces the `Kind` record that each module of `judging.kinds` fills in
once. The judging and gating code reads these fields instead of comparing kind names. The
defaults are what an unregistered kind gets (`judging.kinds.of`): read as a program, no job,
no expected outputs, no extra hack checks; the gates reject it before it is judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Kind:
    """One verifier kind, as every part of judging sees it."""

    name: str
    "The `Verifier.kind` string that names it on the wire."
    # --- the attempt (judging.extract, judging.judgement, actors.judge)
    attempt: Literal["program", "document", "workspace", "reply"] = "program"
    "What an attempt is read as: a Python program, a JSON document, a tool episode's final workspace, or the whole reply."
    entry_point: bool = False
    "The structure layer checks that the attempt defines `Task.entry_point`."
    prefix: bool = False
    "The attempt continues the prompt's code, `extra['prefix']`."
    turns: Literal["many", "one", "tools"] = "many"
    "How an attempt goes on: feedback turns after a failure, one reply, or a tool episode."
    # --- the gates (envs.gates)
    gated_by: Literal["reference", "rubric"] = "reference"
    "What the gates run: the reference (and its mutants), or the rubric's own checks."
    names_entry_point: bool = False
    "A task must name `Task.entry_point`."
    case_lists: tuple[str, ...] = ()
    "Verifier fields that hold JSON lists of cases."
    rule_lists: tuple[str, ...] = ()
    "Verifier fields that hold JSON lists of content rules (checked after the cases)."
    needs_hidden: bool = False
    "`verifier.hidden` must hold the test source."
    mutants: Literal["python", "prefixed", "json", "workspace"] = "python"
    "How the gates mutate the reference: as a program, as the prompt's continuation, as JSON, or a workspace's modules."
    # --- the job (judging.jobs)
    job: Literal["harness", "rubric", "none"] = "none"
    "Who builds its sandbox job: the harness, the rubric runner (`judging.rubric`), or nobody."
    mode: Literal["function", "check", "script", ""] = ""
    "The harness's mode for its job."
    measured: bool = False
    "Quality (lint, types, time) is measured when configured: single-file programs only."
    # --- the scoring (judging.layers, judging.judgement, judging.impossible)
    expected: Literal["expected", "expected_stdout", ""] = ""
    "The field of a case that holds its expected output, compared outside the sandbox."
    compare: Literal["value", "stdout", "check", "schema", "rubric"] = "value"
    "How a test passes: the returned value, the printed text, the test source's own asserts, the document's rules, or the rubric's score."
    # --- the hack checks (judging.hacks, judging.code_signs)
    visible_inputs: Literal["args", "calls", "stdin", "checks", ""] = ""
    "Where the visible inputs that special-casing compares with are read: case args, calls after their 'module:function', stdin texts, or the check's calls."
    script_signs: bool = False
    "Answers keyed on a visible stdin are looked for (`code_signs.script_answers`)."
    tamper_signs: bool = False
    "The workspace is audited for tampering (`judging.repo.tamper_signs`)."
    # --- the red team (judging.attacks)
    shape: Literal["function", "script", "document", "repository"] = "document"
    "The shape of attempt the red team writes its attacks in."
