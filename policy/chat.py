"""Chat prompts as token ids: the first prompt of an attempt and the feedback turns after it.

Consumes a task prompt, or feedback text and whether the previous completion closed its
turn; produces the token ids added to the context before the next sample (`Turn.prompt_ids`).
The context of a later turn is always the stored tokens of earlier turns plus these ids,
never a re-tokenisation of decoded text, so the learner sees exactly what was sampled.

It knows a chat format only through a render function (the tokenizer's chat template) and
an encoder; it does not sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

_MARK = "\x00WHET-MARK\x00"
_FEEDBACK = "\x00WHET-FEEDBACK\x00"

Render = Callable[[list[dict[str, str]], bool], str]


@dataclass(frozen=True)
class ChatFormat:
    """How a conversation becomes tokens for one tokenizer."""

    render: Render
    "Messages (and whether to open an assistant turn) to text."
    encode: Callable[[str], list[int]]
    "Text to token ids, special-token markers parsed, nothing added."
    decode: Callable[[Sequence[int]], str]
    "Token ids to text, special tokens left out."
    end_ids: frozenset[int]
    "Token ids that end an assistant turn."
    end_text: str
    "Text the template writes to close an assistant turn (e.g. '<|im_end|>')."

    def prompt_ids(self, prompt: str) -> list[int]:
        """Ids of the opening context: the user's prompt and an open assistant turn."""
        return self.encode(self.render([{"role": "user", "content": prompt}], True))

    def closes(self, completion_ids: Sequence[int], finish_reason: str) -> bool:
        """Whether a completion closed its own turn: it stopped on an end-of-turn token (a
        stop string leaves the turn open, for `feedback_ids` to close)."""
        return finish_reason == "stop" and bool(set(completion_ids[-1:]) & self.end_ids)

    def feedback_ids(self, feedback: str, closed: bool, role: str = "user") -> list[int]:
        """Ids that follow a completion: close its turn (unless it `closed` itself), add the
        feedback as a turn of `role` ('user', or 'tool' for a tool's result), open the next
        assistant turn."""
        before, after = self._feedback_frame(role)
        if closed and before.startswith(self.end_text):
            before = before[len(self.end_text):]
        return self.encode(before + feedback + after)

    def _feedback_frame(self, role: str = "user") -> tuple[str, str]:
        first = [{"role": "user", "content": "p"}, {"role": "assistant", "content": _MARK}]
        upto = self.render(first, False)
        cut = upto.index(_MARK) + len(_MARK)
        full = self.render(first + [{"role": role, "content": _FEEDBACK}], True)
        if full[:cut] != upto[:cut]:
            raise ValueError("chat template renders earlier turns differently once a turn is added")
        tail = full[cut:]
        before, _, after = tail.partition(_FEEDBACK)
        return before, after


def hf_chat_format(tokenizer: Any) -> ChatFormat:
    """The chat format of a Hugging Face tokenizer with a chat template."""
    end_ids = {tokenizer.eos_token_id}
    end_text = tokenizer.eos_token or ""

    def render(messages: list[dict[str, str]], open_turn: bool) -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=open_turn)

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    def decode(ids: Sequence[int]) -> str:
        return tokenizer.decode(list(ids), skip_special_tokens=True)

    return ChatFormat(render, encode, decode, frozenset(i for i in end_ids if i is not None),
                      end_text)


def char_chat_format(vocab: int) -> ChatFormat:
    """A character-level format over `vocab` ids for the fake engine: id 0 ends a turn and
    decodes to '|'; every other id is one character."""
    alphabet = "|abcdefghijklmnopqrstuvwxyz0123456789 .:\n[]"
    if vocab > len(alphabet):
        alphabet += "".join(chr(0x100 + i) for i in range(vocab - len(alphabet)))
    chars = alphabet[:vocab]
    index = {c: i for i, c in enumerate(chars)}

    def encode(text: str) -> list[int]:
        return [index.get(c, 1 + ord(c) % (vocab - 1)) for c in text]

    def decode(ids: Sequence[int]) -> str:
        return "".join(chars[i] for i in ids if i != 0)

    def render(messages: list[dict[str, str]], open_turn: bool) -> str:
        text = "".join(f"[{m['role'][0]}]{m['content']}|" for m in messages)
        return text + ("[a]" if open_turn else "")

    return ChatFormat(render, encode, decode, frozenset({0}), "|")
