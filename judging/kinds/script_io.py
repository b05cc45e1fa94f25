"""`script_io`: the attempt is a script reading stdin; its printed text is compared outside the sandbox.

The verifier's fields for this kind: the attempt is a Python script reading stdin (and files
from the case) and writing stdout. Case lists as in python_io, each case `{"stdin": str,
"files": {name: text}, "expected_stdout": str}`; `extra["compare"]` is "text" (trailing
whitespace ignored) or "json" (parsed values equal).
"""

from judging.kinds.base import Kind

KIND = Kind(
    "script_io", attempt="program", case_lists=("visible", "hidden"), job="harness",
    mode="script", measured=True, expected="expected_stdout", compare="stdout",
    visible_inputs="stdin", script_signs=True, shape="script",
)
