"""whetstone's judge as a TRL reward function (for the side-by-side bench beside it, `bench/vs_trl/vs_trl.py`).

Consumes what TRL's `GRPOTrainer` hands a reward function: the prompts, the completions
(text, or one assistant message each for conversational data) and the dataset's columns,
among them `task_json` (the whetstone `Task`, from `task_column`); produces one reward per
completion: the judge's own, through its own offline path (`judging.offline.judge_all`: the
configured sandbox backend, the `[judge]` weights, quiet re-runs after an infrastructure
failure).

An attempt still dropped after its re-runs (an infrastructure failure) gets None. TRL reads
None as "no reward" (NaN): the completion is left out of its group's mean and std and gets
advantage 0, the nearest TRL has to whetstone's "dropped from training" (its tokens still
count in TRL's loss normaliser). Every other outcome (pass, fail, hack) gets the judgement's
reward unchanged. With `[judge] truncated = "fail"` a completion TRL cut at its token limit
(`max_new_tokens` ids, no EOS, no stop string at its end: from the `completion_ids` TRL
passes) is the model's failure unread, as whetstone's generator marks it (finish reason
"length") for its own judge.

It imports no trl: TRL only calls it. The sandbox stays open between calls on an event loop
of its own (a blocking portal), so warm sandboxes are reused; `close()` ends both.
"""

from __future__ import annotations

import collections
import contextlib
from typing import Any

import msgspec
from anyio.from_thread import start_blocking_portal

from bus.messages import Attempt, Task, Turn
from judging.config import JudgeConfig
from judging.offline import Judged, judge_all
from sandbox import open_backend

TASK_COLUMN = "task_json"
"The dataset column that carries each row's task."


def task_column(task: Task) -> str:
    """A task as the text of the `task_json` column."""
    return msgspec.json.encode(task).decode()


def completion_text(completion: str | list[dict[str, Any]]) -> str:
    """The text of a completion: TRL passes text, or a list of messages for chat data."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion if m.get("role") == "assistant")


def reward_of(judged: Judged) -> float | None:
    """What TRL gets for one judged attempt: the judge's reward, None when dropped."""
    return None if judged.judgement.infra else judged.judgement.reward


class JudgeReward:
    """Callable as `reward(prompts, completions, task_json=[...], **columns) -> list`."""

    __name__ = "whetstone_judge"  # TRL names a reward function's metrics after it

    def __init__(self, judge: JudgeConfig, sandbox: Any, *, concurrency: int = 4,
                 max_new_tokens: int = 0, stops: tuple[str, ...] = (),
                 eos_id: int | None = None) -> None:
        self.judge, self.concurrency = judge, concurrency
        self.max_new_tokens, self.stops, self.eos_id = max_new_tokens, stops, eos_id
        "What tells a completion cut at the token limit (no limit known: none is)."
        self._exit = contextlib.ExitStack()
        self._portal = self._exit.enter_context(start_blocking_portal())
        self._backend = self._portal.call(open_backend, sandbox, concurrency)
        self.calls = 0
        self.outcomes: collections.Counter[str] = collections.Counter()
        "Outcomes of every judged completion so far."
        self.sandbox_cpu_s = 0.0
        "CPU seconds the judged jobs used inside their sandboxes (cgroup-measured)."
        self.last: list[Judged] = []
        "The judgements of the latest call."

    def __call__(self, prompts: list[Any], completions: list[Any], task_json: list[str],
                 **columns: Any) -> list[float | None]:
        self.calls += 1
        tasks: dict[str, Task] = {}
        attempts = []
        ids = columns.get("completion_ids") or [None] * len(completions)
        for i, (completion, text) in enumerate(zip(completions, task_json, strict=True)):
            if text not in tasks:  # a group's rows share one task: decode it once
                tasks[text] = msgspec.json.decode(text, type=Task)
            task = tasks[text]
            aid = f"trl-{self.calls:06d}.{i}"
            said = completion_text(completion)
            turn = Turn(prompt_ids=b"", completion_ids=b"", logprobs=b"", completion=said,
                        policy_version=0,
                        finish_reason="length" if self.cut(ids[i], said) else "stop")
            attempts.append(Attempt(attempt_id=aid, group_id=f"trl-{self.calls:06d}", index=i,
                                    group_size=len(completions), task=task, turns=[turn],
                                    policy_version=0))
        self.last = self._portal.call(self._judge, attempts)
        self.outcomes.update(j.judgement.outcome for j in self.last)
        self.sandbox_cpu_s += sum(j.result.cpu_s for j in self.last if j.result is not None)
        return [reward_of(j) for j in self.last]

    async def _judge(self, attempts: list[Attempt]) -> list[Judged]:
        return await judge_all(attempts, self._backend, self.judge, concurrency=self.concurrency)

    def cut(self, ids: list[int] | None, text: str) -> bool:
        """Whether a completion of token `ids` and `text` ran into the token limit."""
        return (self.max_new_tokens > 0 and ids is not None and len(ids) >= self.max_new_tokens
                and ids[-1] != self.eos_id
                and not any(text.endswith(stop) for stop in self.stops))

    def close(self) -> None:
        """Close the sandbox backend and stop the portal's event loop."""
        try:
            self._portal.call(self._backend.aclose)
        finally:
            self._exit.close()

    def __enter__(self) -> "JudgeReward":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
