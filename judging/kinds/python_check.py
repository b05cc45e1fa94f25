"""`python_check`: HumanEval style; the attempt continues the prompt and the task's `check` asserts.

The verifier's fields for this kind: HumanEval style. `hidden` is the test source defining
`check(candidate)`; `extra["prefix"]` is the prompt code the completion continues; `reference`
is the canonical completion.
"""

from judging.kinds.base import Kind

KIND = Kind(
    "python_check", attempt="program", entry_point=True, prefix=True, needs_hidden=True,
    mutants="prefixed", job="harness", mode="check", measured=True, compare="check",
    visible_inputs="checks", shape="function",
)
