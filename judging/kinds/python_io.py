"""`python_io`: the attempt defines a function; its return values are compared outside the sandbox."""

from judging.kinds.base import Kind

KIND = Kind(
    "python_io", attempt="program", entry_point=True, names_entry_point=True,
    case_lists=("visible", "hidden"), job="harness", mode="function", measured=True,
    expected="expected", compare="value", visible_inputs="args", shape="function",
)
