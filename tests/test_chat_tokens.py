"""Token in, token out: a tool episode's contexts are stored ids plus `feedback_ids`, each a
prefix of the next, equal to the chat template's rendering, and only sampled ids are trained."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from actors.generator import make_turn, next_context
from bus.codec import unpack_ids
from bus.messages import Attempt
from envs.environment import generate
from envs.repository import ENVIRONMENT
from judging.episode import tool_text
from policy.batch import trajectory
from policy.chat import ChatFormat, hf_chat_format
from policy.config import ModelConfig
from policy.engine import Sample
from policy.model import load_tokenizer

pytestmark = pytest.mark.unit

# (completion text, whether the model closed its turn with <|im_end|>, the tool's answer)
EPISODE = [
    (tool_text("list_files"), False, "pkg/__init__.py\npkg/cart.py\ntests/test_pkg.py"),
    ("Let me look at the cart first.", True,
     "error: No tool call found. Write exactly one <tool_call>{...}</tool_call>."),
    (tool_text("read_file", path="pkg/cart.py", start=1, end=3), False,
     "   1 def total(items):\n   2     return sum(items[1:])\n   3 "),
    (tool_text("replace", path="pkg/cart.py", old="items[1:]", new="items"), False,
     "replaced 1 occurrence in pkg/cart.py"),
    (tool_text("run_tests"), False, "....\n---\nRan 4 tests in 0.001s\n\nOK"),
    (tool_text("submit"), False, ""),
]


@pytest.fixture(scope="module")
def chat() -> ChatFormat:
    return hf_chat_format(load_tokenizer(ModelConfig(name="smollm2-135m")))


def sampled(chat: ChatFormat, text: str, closed: bool) -> Sample:
    """What the engine returns for `text`: its ids (through the stop string, or the end token
    when the model `closed` its turn), the text cut at the stop string."""
    ids = chat.encode(text) + (sorted(chat.end_ids)[:1] if closed else [])
    shown = text.split("</tool_call>")[0]
    return Sample(ids, [-0.5] * len(ids), shown, "stop", 0)


def play(chat: ChatFormat, episode=EPISODE) -> tuple[Attempt, list[list[int]]]:
    """The episode as the generator builds it: each turn's context (stored ids and the
    feedback ids), the attempt after the last turn."""
    [task] = generate(ENVIRONMENT, 1, seed=5)
    prompt = chat.prompt_ids(task.prompt)
    contexts = [prompt]
    attempt = Attempt(attempt_id="a", group_id="g", index=0, group_size=1, task=task,
                      turns=[], policy_version=0)
    added = prompt
    for text, closed, answer in episode:
        turn = msgspec.structs.replace(make_turn(added, sampled(chat, text, closed), "t"),
                                       feedback=answer or "(no output)")
        attempt = msgspec.structs.replace(attempt, turns=[*attempt.turns, turn])
        added, context = next_context(attempt, chat)
        contexts.append(context)
    return attempt, contexts[:-1]


def conversation(attempt: Attempt, chat: ChatFormat, upto: int) -> list[dict[str, str]]:
    """The messages of the first `upto` turns, each assistant turn its sampled ids decoded."""
    messages = [{"role": "user", "content": attempt.task.prompt}]
    for turn in attempt.turns[:upto]:
        messages.append({"role": "assistant", "content": chat.decode(unpack_ids(turn.completion_ids))})
        messages.append({"role": "tool", "content": turn.feedback})
    return messages


def test_each_turns_context_is_a_prefix_of_the_next(chat):
    """Earlier turns' ids are never re-tokenised: every context starts with the one before it
    and its sampled completion."""
    attempt, contexts = play(chat)
    for n in range(1, len(contexts)):
        before = contexts[n - 1] + unpack_ids(attempt.turns[n - 1].completion_ids).tolist()
        assert contexts[n][:len(before)] == before, f"turn {n}"


def test_each_context_equals_the_templates_rendering_of_the_conversation(chat):
    """Stored ids plus feedback ids are exactly the tokens of the chat template's rendering
    (tool results as role 'tool', a turn the model closed not closed twice)."""
    attempt, contexts = play(chat)
    for n, context in enumerate(contexts):
        rendered = chat.encode(chat.render(conversation(attempt, chat, n), True))
        assert context == rendered, f"turn {n}: {chat.decode(context)[-200:]!r}"


def test_where_they_differ_the_sampled_ids_win(chat):
    """A model may sample a split the tokenizer would not make (here one id per character):
    re-encoding the text would change those tokens, and their logprobs would no longer be the
    sampled ones; the stored context keeps the ids the model sampled."""
    [task] = generate(ENVIRONMENT, 1, seed=5)
    text = tool_text("list_files")
    split = [i for c in text for i in chat.encode(c)]
    assert chat.decode(split) == text and split != chat.encode(text)
    turn = msgspec.structs.replace(make_turn(chat.prompt_ids(task.prompt),
                                             Sample(split, [-0.5] * len(split), text, "stop", 0), "t"),
                                   feedback="pkg/cart.py")
    attempt = Attempt(attempt_id="a", group_id="g", index=0, group_size=1, task=task,
                      turns=[turn], policy_version=0)
    _, context = next_context(attempt, chat)
    start = len(unpack_ids(turn.prompt_ids))
    assert context[start:start + len(split)] == split
    rendered = chat.encode(chat.render(conversation(attempt, chat, 1), True))
    assert rendered != context and rendered[:start] == context[:start]


def test_the_loss_mask_covers_exactly_the_sampled_tokens(chat):
    """`policy.batch.trajectory` marks every completion id sampled and nothing else: not the
    prompt, not a tool's output, not the template's framing."""
    attempt, contexts = play(chat)
    ids, mask, behav = trajectory(attempt, 1 << 20)
    whole = contexts[-1] + unpack_ids(attempt.turns[-1].completion_ids).tolist()
    assert ids.tolist() == whole
    expected = np.zeros(len(whole), bool)
    for n, turn in enumerate(attempt.turns):
        start = len(contexts[n])
        expected[start:start + len(turn.completion_ids) // 4] = True
    assert (mask == expected).all()
    assert int(mask.sum()) == sum(len(t.completion_ids) // 4 for t in attempt.turns)
    assert (behav[~mask] == 0).all() and (behav[mask] == -0.5).all()
    tool_output = chat.encode("replaced 1 occurrence in pkg/cart.py")
    at = next(i for i in range(len(whole)) if whole[i:i + len(tool_output)] == tool_output)
    assert not mask[at:at + len(tool_output)].any()
