"""JSON-lines files from outside (task files, samples files): their bytes as numbered lines.

Consumes a file's bytes (un-gzipped already) and its name; produces its non-blank lines with
their numbers, and an `InputError` for each line over `LINE_LIMIT` (skipped, never parsed).
A file that is empty, or is not UTF-8 text (a binary file), is refused whole: one
`InputError` at line 0, raised. It lives in `bus/`, beside the error tree, so the readers in
`judging` and `envs` share it without importing each other. It reads no file and parses no
JSON.
"""

from __future__ import annotations

from bus.errors import InputError

LINE_LIMIT = 1 << 20
"""The longest line a reader takes, in bytes (1 MiB). A task or an attempt must fit in one
message with room to spare (the embedded server's payload limit is 8 MiB)."""


def numbered_lines(data: bytes, source: str) -> tuple[list[tuple[int, str]], list[InputError]]:
    """(line number, text) of every non-blank line of `data` up to `LINE_LIMIT`, and an error
    naming each longer line; InputError when the file is empty or not UTF-8 text."""
    nul = data.find(b"\x00")
    if nul >= 0:
        raise InputError(source, 0, "", f"not a text file (a NUL byte at offset {nul}); "
                         "expected JSON lines in UTF-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(source, 0, "", f"not UTF-8 text (at byte {exc.start}); expected JSON "
                         "lines in UTF-8") from None
    lines, errors = [], []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        size = len(line.encode())
        if size > LINE_LIMIT:
            errors.append(InputError(source, line_no, "", f"a line of {size / 2**20:.1f} MiB, over "
                                     f"the {LINE_LIMIT // 2**20} MiB a line may hold"))
            continue
        lines.append((line_no, line))
    if not lines and not errors:
        raise InputError(source, 0, "", "the file is empty; expected one JSON record per line")
    return lines, errors
