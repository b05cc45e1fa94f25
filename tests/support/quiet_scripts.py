"""A test environment that a uniformly sampling policy sometimes solves: quiet scripts.

Consumes a seeded rng; produces `script_io` Drafts: read the lines on stdin and print
nothing. The empty program passes; a letter string such as `ab` (a name that is not
defined) fails with NameError. The fake engine (`policy.fake_engine`) with `fake_vocab = 4`
samples exactly these: its first token ends the turn with probability 1/4 (an empty,
correct script), otherwise it writes letters from 'abc'. So rewards differ within groups,
every attempt really runs in the executor's sandbox and is checked by the real judge, and
the learner has something to train on. Tests only (the chaos test); one rung.
"""

from __future__ import annotations

import json
import random

from bus.messages import Verifier
from envs.environment import Draft, Environment

WORDS = ("alpha", "beta", "gamma", "delta", "quiet", "noise", "line", "word")
REFERENCE = "import sys\nsys.stdin.read()\n"


def _stdin(rng: random.Random) -> str:
    return "".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3))) + "\n"
                   for _ in range(rng.randint(0, 4)))


def make_task(rng: random.Random, level: int) -> Draft:
    """One task: a few stdin texts, each expecting no output at all."""
    cases = [{"stdin": _stdin(rng), "expected_stdout": ""} for _ in range(4)]
    prompt = ("Write a Python script that reads its standard input and prints nothing at "
              "all: no output, no error.\n\nExample input:\n" + (cases[0]["stdin"] or "(empty)\n"))
    verifier = Verifier(kind="script_io", visible=json.dumps(cases[:1]),
                        hidden=json.dumps(cases[1:]), reference=REFERENCE,
                        extra={"compare": "text", "format": "raw"})
    return Draft(prompt=prompt, verifier=verifier, family="quiet")


ENVIRONMENT = Environment(
    name="quiet_scripts",
    version="1",
    domain="quiet",
    summary="Read stdin, print nothing (solvable by an empty program; tests only).",
    levels=1,
    difficulty="one rung",
    make_task=make_task,
)
