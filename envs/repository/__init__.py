"""The repository environment: fix a defect in a small Python package through tools.

Consumes a seeded `random.Random` and a rung; produces a `Draft` whose `files` are the
workspace the model starts from (the package with the defect, `tests/` with the visible
unittest suite) and whose `repo_io` verifier holds the visible and hidden cases
(`{"args": ["module:function", *args], "expected": value}`, expected values computed on
the reference in this process), the reference workspace (JSON) and the episode budgets in
`extra`. Hidden cases never enter the workspace: the model sees them only as counts.

Rungs (`envs.repository.shop`): 0 a wrong condition or missing case where the failing test
points, 1 one module deeper, 2 a broken refactor or dependency across two modules.
It runs no sandbox; the gates and the judge do.
"""

from __future__ import annotations

import json
import random

from bus.messages import Limits, Verifier
from envs.environment import Draft, Environment
from envs.repository.agent import demo_agent
from envs.repository.cases import choose_visible, make_cases, unittest_file
from envs.repository.shop import make_project
from judging import repo
from judging.tools import catalog

BUDGETS = {"max_steps": "16", "max_tokens": "4096", "result_chars": "1500"}
"Episode budgets (verifier extra): tool calls, completion tokens, characters per result."


def make_task(rng: random.Random, level: int) -> Draft:
    project = make_project(rng, level)
    cases = make_cases(project, rng)
    visible, hidden = choose_visible(cases, rng)
    test_path = f"tests/test_{project.package}.py"
    start = {**project.broken, "tests/__init__.py": "", test_path: unittest_file(project.package, visible)}
    reference = {**start, **project.reference}
    strip = [{"args": c["args"], "expected": c["expected"]} for c in visible], \
            [{"args": c["args"], "expected": c["expected"]} for c in hidden]
    prompt = (f"You are working in a Python repository: the package `{project.package}/` and its "
              f"tests in `{test_path}`.\nIssue: {project.defect.symptom}.\n"
              "Find the defect and fix the package so that the tests pass. Do not edit, add or "
              "delete tests; stay inside the repository.\n\n" + catalog())
    extra = {"random_cases": "0", "touched": ",".join(project.touched),
             "defect": project.defect.kind, **BUDGETS}
    return Draft(prompt=prompt, entry_point=repo.ENTRY, files=start,
                 family=f"shop/{project.defect.kind}",
                 verifier=Verifier(kind="repo_io", visible=json.dumps(strip[0]),
                                   hidden=json.dumps(strip[1]),
                                   reference=json.dumps(reference, sort_keys=True), extra=extra))


ENVIRONMENT = Environment(
    name="repository", version="1", domain="repository",
    summary="Fix an injected defect in a small Python package, through tools (list, read, "
            "write, run tests, submit).",
    levels=3, difficulty="deeper faults: the failing module, one module below, across two modules",
    make_task=make_task, demo_agent=demo_agent,
    limits=Limits(timeout_s=10.0, cpu_s=10.0, memory_mb=256, pids=16, disk_mb=16))
