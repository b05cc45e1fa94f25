"""`python_io`: the attempt defines a function; its return values are compared outside the sandbox.

The verifier's fields for this kind: the attempt defines function `Task.entry_point`.
`visible`, `hidden` and `extra["robustness"]` are JSON lists of cases `{"args": [...],
"expected": value}`; only the args ever enter the sandbox, the judge compares return values
outside it. `extra["compare"]` is "exact" (default), "float" (1e-6 relative) or "unordered".
"""

from judging.kinds.base import Kind

KIND = Kind(
    "python_io", attempt="program", entry_point=True, names_entry_point=True,
    case_lists=("visible", "hidden"), job="harness", mode="function", measured=True,
    expected="expected", compare="value", visible_inputs="args", shape="function",
)
