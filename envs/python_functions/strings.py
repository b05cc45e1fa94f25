"""String transforms: one step at rung 0, chains of steps higher up.

Consumes a seeded rng and a rung; produces a `FunctionSpec`. Inputs are phrases built from
a word list with mixed case, padding and the characters the steps mention, so that every
step has something to do.
"""

from __future__ import annotations

import random

from envs.phrasing import pick
from envs.python_functions.spec import FunctionSpec

TEXT_NAMES = ("text", "s", "phrase", "line", "sentence", "word", "message")
WORDS = ("apple", "river", "stone", "cloud", "banana", "tiger", "lemon", "orbit", "pixel",
         "amber", "echo", "delta", "noise", "maple", "sugar", "radar", "kayak", "ocean")


def _steps(rng: random.Random) -> list[tuple[str, str, str]]:
    a, b = rng.choice("aeiou"), rng.choice("xz*#-")
    k = rng.randint(2, 6)
    c = rng.choice("aeinorst")
    return [
        ("strip", "r.strip()", "remove leading and trailing spaces"),
        ("case", "r.lower()", "convert it to lowercase"),
        ("case", "r.upper()", "convert it to uppercase"),
        ("reverse", "r[::-1]", "reverse it"),
        ("replace", f"r.replace({a!r}, {b!r})", f"replace every '{a}' with '{b}'"),
        ("vowels", "''.join(ch for ch in r if ch.lower() not in 'aeiou')", "remove every vowel"),
        ("spaces", "' '.join(r.split())", "collapse runs of spaces into one space and trim the ends"),
        ("cut", f"r[:{k}]", f"keep only the first {k} characters"),
        ("remove", f"r.replace({c!r}, '')", f"delete every '{c}'"),
        ("join", "'-'.join(r.split())", "join its words with '-' instead of spaces"),
    ]


_TERMINALS = (
    ("r", "return the result"),
    ("len(r)", "return the length of the result"),
    ("len(r.split())", "return how many words remain"),
)

_SINGLE = (
    ("r.upper()", "return `{p}` in uppercase", ("shout", "to_upper", "upper_text")),
    ("r[::-1]", "return `{p}` reversed", ("reverse_text", "backwards", "mirror")),
    ("len(r)", "return the number of characters in `{p}`", ("char_count", "text_length")),
    ("r + r", "return `{p}` repeated twice", ("twice", "double_text")),
    ("r.count('a')", "return how many times the letter 'a' appears in `{p}`",
     ("count_a", "a_count")),
    ("len(r.split())", "return the number of words in `{p}` (words are separated by spaces)",
     ("word_count", "count_words")),
    ("r[0] if r else ''", "return the first character of `{p}`, or '' if it is empty",
     ("first_char", "initial")),
    ("r == r[::-1]", "return True if `{p}` reads the same backwards, otherwise False",
     ("is_palindrome", "reads_same")),
)


def _make_args(rng: random.Random, extra_chars: str):
    def make(r: random.Random) -> list:
        words = [r.choice(WORDS) for _ in range(r.randint(0, 4))]
        words = [w.upper() if r.random() < 0.25 else w.capitalize() if r.random() < 0.3 else w
                 for w in words]
        if extra_chars and words and r.random() < 0.5:
            i = r.randrange(len(words))
            words[i] += r.choice(extra_chars)
        text = (" " * r.randint(1, 2)).join(words) if r.random() < 0.4 else " ".join(words)
        if r.random() < 0.4:
            text = " " * r.randint(1, 2) + text + " " * r.randint(0, 2)
        return [text]
    return make


def string_pipeline(rng: random.Random, level: int) -> FunctionSpec:
    """Rung 0: one operation; rung n: n chained steps, then a terminal."""
    param = pick(rng, TEXT_NAMES)
    if level == 0:
        code, say, names = pick(rng, _SINGLE)
        body = f"    r = {param}\n    return {code}\n"
        return FunctionSpec("strings.single", pick(rng, names), [param], body,
                            [say.format(p=param)], _make_args(rng, ""),
                            edge_args=[[""], ["a"]])
    options = _steps(rng)
    steps: list[tuple[str, str, str]] = []
    for _ in range(min(level, 4)):
        fresh = [o for o in options if o[0] not in {s[0] for s in steps}]
        steps.append(rng.choice(fresh))
    terminals = _TERMINALS[:2] if steps[-1][0] in ("join", "spaces") else _TERMINALS
    term_code, term_say = pick(rng, terminals)
    lines = [f"    r = {param}\n"] + [f"    r = {code}\n" for _, code, _ in steps]
    tail = f"    return {term_code}\n"
    ablations = ["".join(lines[:i + 1] + lines[i + 2:]) + tail for i in range(len(steps))]
    said = ", ".join(say for _, _, say in steps[:-1])
    said = f"{said} and then {steps[-1][2]}" if said else steps[-1][2]
    says = [f"take the string `{param}`, {said}; {term_say}",
            f"transform `{param}` in order: {'; '.join(s[2] for s in steps)}. Then {term_say}"]
    name = f"{pick(rng, ('clean', 'normalize', 'rewrite', 'format', 'mangle'))}_" \
           f"{pick(rng, ('text', 'string', 'words', 'input'))}"
    return FunctionSpec(f"strings.pipeline{len(steps)}", name, [param], "".join(lines) + tail,
                        says, _make_args(rng, "aeiouxz"), edge_args=[[""], ["  Echo  "]],
                        ablations=ablations)
