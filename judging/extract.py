"""Take the candidate out of a completion and check its structure (the first judging layer).

Consumes a `Task` and a completion (model text, perhaps markdown) or raw code; produces a
`Candidate`: the program to run (for `python_check`, the prompt prefix plus the completion),
and the structure checks: does it parse or compile, does it follow the output format, does it
define the entry point. The format is `extra["format"]` of the verifier: "any" (default:
raw code, or exactly one code block), "code_block" (exactly one fenced block) or "raw" (no
fences). A block left open at the end of an answer the model ended itself is closed there, as
CommonMark closes it; one the token limit cut is not. A `verifiers` reply is taken whole,
unchecked (its rubric judges it). It runs nothing.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

from bus.messages import LayerResult, Task
from judging import kinds

_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_CODE_LANGS = {"", "python", "py", "python3", "py3"}
_JSON_LANGS = {"", "json", "jsonc"}


@dataclass(frozen=True)
class Candidate:
    """What an attempt's latest turn gives to judge: the code (or JSON text) and whether it compiles and follows the format."""

    code: str
    "What runs: the program (prefix included for python_check), or the JSON text."
    offset_lines: int = 0
    "Lines of prefix before the completion's first line in `code`."
    compile_error: str = ""
    "Why it does not parse or compile ('' when it does)."
    format_ok: bool = True
    format_detail: str = ""
    defines_entry: bool = True
    value: object = field(default=None, compare=False)
    "The parsed document (structured tasks)."

    @property
    def compiles(self) -> bool:
        return not self.compile_error

    def structure(self, task: Task) -> LayerResult:
        """The structure layer: compiles, format, entry point (when the kind needs one)."""
        checks = [("compiles", self.compiles, self.compile_error),
                  ("format", self.format_ok, self.format_detail)]
        if kinds.of(task).entry_point:
            checks.append(("entry point", self.defines_entry,
                           "" if self.defines_entry else f"does not define {task.entry_point!r}"))
        failed = [f"{name}: {why}" for name, ok, why in checks if not ok]
        passed = len(checks) - len(failed)
        return LayerResult(name="structure", passed=passed, total=len(checks),
                           ok=not failed, detail="; ".join(failed)[:500])


def from_completion(task: Task, completion: str, ended: bool = True) -> Candidate:
    """The candidate in a model completion, with its format judged; `ended`: the model ended
    the answer itself (False when the token limit cut it: an open block is then unfinished)."""
    attempt = kinds.of(task).attempt
    if attempt == "reply":  # the whole reply is scored (judging.rubric)
        return Candidate(completion)
    structured = attempt == "document"
    langs = _JSON_LANGS if structured else _CODE_LANGS
    blocks = [body for lang, body in _FENCE.findall(completion) if lang.lower() in langs]
    fenced = "```" in completion
    rule = task.verifier.extra.get("format", "any")
    format_ok, detail = _format(rule, fenced, len(blocks), completion.count("```"), ended)
    if not blocks:
        text = completion
    elif structured:
        text = blocks[-1]
    else:
        defining = [b for b in blocks if _defines(b, task.entry_point)]
        text = (defining or blocks)[-1]
    cand = from_code(task, text)
    return Candidate(cand.code, cand.offset_lines, cand.compile_error, format_ok, detail,
                     cand.defines_entry, cand.value)


def _format(rule: str, fenced: bool, blocks: int, fences: int, ended: bool) -> tuple[bool, str]:
    # CommonMark: a fence still open at the end of the document closes there.
    closed = fences % 2 == 0 or ended
    if rule == "raw":
        return (not fenced, "" if not fenced else "expected raw code, got markdown fences")
    if fenced and not closed:
        return False, "the token limit cut the answer inside its code block"
    if fenced and blocks != 1:
        return False, f"expected exactly one code block, found {blocks} ({fences} fences)"
    if rule == "code_block" and not fenced:
        return False, "expected one fenced code block"
    return True, ""


def from_code(task: Task, code: str) -> Candidate:
    """The candidate for raw code (no markdown): for python_check, a continuation of the prompt."""
    kind = kinds.of(task)
    if kind.attempt == "reply":
        return Candidate(code)
    if kind.attempt == "workspace":
        return _workspace_candidate(code)
    if kind.attempt == "document":
        try:
            return Candidate(code, value=json.loads(code))
        except ValueError as exc:
            return Candidate(code, compile_error=f"not JSON: {exc}")
    prefix = task.verifier.extra.get("prefix", "") if kind.prefix else ""
    if prefix and not prefix.endswith("\n"):
        prefix += "\n"
    if prefix and _defines(code, task.entry_point):
        prefix += "\n\n"  # a whole function: it replaces the prompt's stub
    program = prefix + code
    error = _compile_error(program, prefix.count("\n"))
    entry = not task.entry_point or kind.mode == "script" or (not error and _defines(program, task.entry_point))
    return Candidate(program, prefix.count("\n"), error, defines_entry=entry)


def _workspace_candidate(text: str) -> Candidate:
    """repo_io: `text` is a workspace as JSON ({path: text}, or {"files": ..., "refused": ...}
    from a tool episode); the program is the importer over its modules (`judging.repo`)."""
    from judging import repo

    try:
        value = json.loads(text)
        files = repo.files_of(json.dumps(value.get("files", value) if isinstance(value, dict) else value))
        refused = [str(p) for p in value.get("refused", [])] if "files" in value else []
    except (ValueError, AttributeError, TypeError) as exc:
        return Candidate(text, compile_error=f"not a workspace: {exc}")
    program = repo.program_of(files)
    return Candidate(program, offset_lines=program.count("\n") + 1,
                     compile_error=repo.compile_errors(files),
                     value={"files": files, "refused": refused})


def _compile_error(program: str, offset: int) -> str:
    try:
        compile(program, "solution.py", "exec")
        return ""
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        where = f"line {line - offset}: " if line and line > offset else ""
        return f"{type(exc).__name__}: {where}{getattr(exc, 'msg', str(exc))}"


def _defines(code: str, name: str) -> bool:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return bool(re.search(rf"^(?:async\s+)?def\s+{re.escape(name)}\b", code, re.M))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False
