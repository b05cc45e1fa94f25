"""`repo_io`: a tool episode on a repository; the final workspace's functions are called as in `python_io`.

The verifier's fields for this kind: a tool episode on a repository (`Task.files`); the final
workspace is judged. Case lists as in python_io, each case's `args[0]` the `'module:function'`
called; `reference` is the workspace that passes (JSON {path: text}).
"""

from judging.kinds.base import Kind

KIND = Kind(
    "repo_io", attempt="workspace", turns="tools", case_lists=("visible", "hidden"),
    mutants="workspace", job="harness", mode="function", expected="expected", compare="value",
    visible_inputs="calls", tamper_signs=True, shape="repository",
)
