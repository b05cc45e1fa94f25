"""Demonstrations as rows for supervised fine-tuning: token ids and a loss mask.

Consumes `bus.messages.Demo`s, the policy's `ChatFormat` and the training stop strings;
produces `TrainSample`s whose ids are the context the generator builds for the same
conversation, token in, token out (the first user message by `prompt_ids`, each assistant
message encoded as its sampled completion, each later message by `feedback_ids`), and whose
`sampled` mask marks the assistant's tokens alone: prompts and tool results are context.
An assistant turn that does not end in a stop string closes itself with the end-of-turn
token, as the model must emit it; so does the last turn; both are trained. Also cuts rows
into an SFT run's batches (the file is read by `bus.demos_file`). No training.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from bus.messages import Demo
from policy.batch import TrainSample
from policy.chat import ChatFormat


@dataclass
class DemoRows:
    """Demonstrations made into rows, and those left out (by task id) for being too long."""

    samples: list[TrainSample] = field(default_factory=list)
    too_long: list[str] = field(default_factory=list)


def _shape_problem(demo: Demo) -> str | None:
    roles = [m.role for m in demo.messages]
    if len(roles) < 2 or roles[0] != "user":
        return "must start with a user message and hold an assistant answer"
    if roles[-1] != "assistant":
        return f"ends with a {roles[-1]} message; the last message must be the assistant's"
    for n, role in enumerate(roles):
        if (role == "assistant") != (n % 2 == 1):
            return (f"message {n} is {role}: messages must alternate user or tool with "
                    "assistant, starting with user")
    return None


def demo_ids(demo: Demo, chat: ChatFormat, stops: Sequence[str] = ()) -> tuple[list[int], list[bool]]:
    """(ids, trained) of one demonstration: the generator's context for its conversation
    and, per token, whether it is the assistant's. ValueError naming the demo when its
    messages are not a conversation the generator could have sampled."""
    problem = _shape_problem(demo)
    if problem:
        raise ValueError(f"demo {demo.task_id}: {problem}")
    end = chat.encode(chat.end_text)
    ids = chat.prompt_ids(demo.messages[0].content)
    trained = [False] * len(ids)
    closed = True
    last = len(demo.messages) - 1
    for n, message in enumerate(demo.messages[1:], start=1):
        if message.role != "assistant":
            added = chat.feedback_ids(message.content, closed, message.role)
            ids += added
            trained += [False] * len(added)
            continue
        text = message.content
        early = [s for s in stops if s and s in text[:len(text) - len(s)]]
        if early:
            raise ValueError(f"demo {demo.task_id}: message {n} holds stop string {early[0]!r} "
                             "before its end, where sampling would have stopped")
        stopped = any(s and text.endswith(s) for s in stops)
        completion = chat.encode(text) + (end if n == last or not stopped else [])
        closed = chat.closes(completion, "stop")
        ids += completion
        trained += [True] * len(completion)
    return ids, trained


def demo_rows(demos: Sequence[Demo], chat: ChatFormat, stops: Sequence[str],
              max_len: int) -> DemoRows:
    """Every demonstration as a `TrainSample` (advantage 1, no behaviour logprobs), but those
    longer than `max_len` tokens, which are counted instead."""
    out = DemoRows()
    for demo in demos:
        ids, trained = demo_ids(demo, chat, stops)
        if len(ids) > max_len:
            out.too_long.append(demo.task_id)
            continue
        out.samples.append(TrainSample(
            verdict_id=demo.task_id, group_id=demo.task_id, policy_version=0, advantage=1.0,
            ids=np.asarray(ids, np.int64), sampled=np.asarray(trained, bool),
            behav=np.zeros(len(ids), np.float32)))
    return out


def sft_batches(samples: Sequence[TrainSample], batch_size: int, epochs: float,
                seed: int) -> list[list[TrainSample]]:
    """The batches of an SFT run: `epochs` passes (a fraction: part of a last pass), each in
    an order of its own drawn from `seed`, cut into batches of `batch_size` (the last of the
    run may be smaller)."""
    if not samples:
        return []
    rng = random.Random(seed)
    want = max(1, math.ceil(len(samples) * epochs))
    order: list[TrainSample] = []
    while len(order) < want:
        one_pass = list(samples)
        rng.shuffle(one_pass)
        order += one_pass
    order = order[:want]
    return [order[i:i + batch_size] for i in range(0, want, batch_size)]


