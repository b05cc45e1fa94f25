"""`script_io`: the attempt is a script reading stdin; its printed text is compared outside the sandbox."""

from judging.kinds.base import Kind

KIND = Kind(
    "script_io", attempt="program", case_lists=("visible", "hidden"), job="harness",
    mode="script", measured=True, expected="expected_stdout", compare="stdout",
    visible_inputs="stdin", script_signs=True, shape="script",
)
