"""`repo_io`: a tool episode on a repository; the final workspace's functions are called as in `python_io`."""

from judging.kinds.base import Kind

KIND = Kind(
    "repo_io", attempt="workspace", turns="tools", case_lists=("visible", "hidden"),
    mutants="workspace", job="harness", mode="function", expected="expected", compare="value",
    visible_inputs="calls", tamper_signs=True, shape="repository",
)
