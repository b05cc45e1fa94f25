"""Demonstrations of tool tasks: a scripted agent's episodes in real sandbox sessions.

Consumes a gated training task of a tool kind, its environment's `demo_agent`, a sandbox
backend and a workspace cache; produces the task's `Demo`s (one per seeded rng): each
episode runs through `judging.episode.run_episode` in a session opened as an executor opens
one, its final workspace is judged by `judge_episode` (hidden tests, tamper signs), and only
a passing episode whose every assistant turn is one well-formed tool call is kept. The tool
messages are the session's real results (`result_message`), up to the last call (submit's
answer is left out: a demonstration ends with the assistant's turn). It gates nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bus.messages import Demo, DemoMessage, Task
from envs.environment import Environment
from judging.episode import judge_episode, run_episode
from judging.tools import parse_call
from sandbox.session import open_session

WRONG_SHARE = 0.3
"Share of demonstrations whose first edit is wrong, then repaired (where the task allows one)."


@dataclass
class EpisodeDemo:
    """One scripted episode: its demonstration when it passed, else why not."""

    demo: Demo | None
    why: str = ""
    "'' when kept; else the judge's outcome and cause, or 'malformed' or 'infra: ...'."


def well_formed(messages: list[DemoMessage]) -> bool:
    """Every assistant turn holds a tool call `judging.tools.parse_call` reads, ending at its
    closing tag (where the generator's stop string ends a turn)."""
    said = [m.content for m in messages if m.role == "assistant"]
    return bool(said) and all(not isinstance(parse_call(c), str) and c.endswith("</tool_call>")
                              and c.count("<tool_call>") == 1 for c in said)


async def episode_demo(task: Task, env: Environment, backend, cache, rng: random.Random,
                       wrong_first: bool) -> EpisodeDemo:
    """Run one scripted episode of `task` and judge its final workspace."""
    agent, repaired = await env.demo_agent(task, backend, rng, wrong_first)  # type: ignore[misc]
    session = await open_session(cache, backend, task)
    log = await run_episode(agent, task, session)
    if log.infra:
        return EpisodeDemo(None, f"infra: {log.infra[:200]}")
    outcome = await judge_episode(task, log, backend)
    messages = [DemoMessage(role=m["role"], content=m["content"]) for m in log.messages]  # type: ignore[arg-type]
    while messages and messages[-1].role == "tool":  # submit's answer is context for no turn
        messages.pop()
    if outcome is None or outcome.outcome != "pass":
        return EpisodeDemo(None, f"{outcome.outcome}: {outcome.cause}" if outcome else "dropped")
    if not well_formed(messages) or log.end != "submit":
        return EpisodeDemo(None, "malformed")
    return EpisodeDemo(Demo(task_id=task.task_id, env=task.env, domain=task.domain, split="train",
                            level=int(task.difficulty), messages=messages, source="scripted",
                            outcome=outcome.outcome, family=task.family, repaired=repaired))


async def task_demos(task: Task, env: Environment, backend, cache, *, seed: int,
                     per_task: int) -> list[EpisodeDemo]:
    """`per_task` episodes of `task`, each with its own rng (the order of its turns, and
    whether its first edit is wrong), from `seed` and the task id."""
    out = []
    for i in range(per_task):
        rng = random.Random(f"{seed}/{task.task_id}/{i}")
        out.append(await episode_demo(task, env, backend, cache, rng, rng.random() < WRONG_SHARE))
    return out
