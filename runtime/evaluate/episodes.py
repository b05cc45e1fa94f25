"""Held-out tool episodes from a model folder: many episodes at once, their turns one batch.

Consumes a torch engine, the run config (`[generator]` eval sampling, max_batch and
max_in_flight, `[model] max_context`, `[executor]` sandbox and concurrency) and tool tasks;
produces one `Episode` per task: the eval `Attempt` (every turn's context and sampled ids,
its calls, the final workspace) and how it ended. Each turn is `judging.episode.step`, the
judge actor's own; contexts are token-in/token-out (stored ids plus
`actors.generator.next_context`); sessions are real (`sandbox.session`). `TurnBatch` waits
until every live episode has its next turn pending (or a batch is full) and samples them as
one batch. It does not judge (`runtime.evaluate.round` does) or train.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
import msgspec
from anyio.abc import TaskStatus

from actors.generator import make_turn, next_context
from bus.messages import Attempt, Task
from envs.evaluation import round_assignment_id
from judging.episode import step
from policy.engine import BatchingEngine, RowSettings, Sample, room_left
from runtime.config import RunConfig
from sandbox import open_backend
from sandbox.session import open_session
from sandbox.workspace import WorkspaceCache


@dataclass
class Episode:
    """One held-out tool episode: its attempt (final workspace included) and its end."""

    attempt: Attempt
    end: str
    "'submit', 'steps', 'tokens', 'context', 'turns' (`--max-turns`) or 'infra'."
    infra: str = ""
    "The sandbox's failure when `end` is 'infra' (the episode is dropped)."


@dataclass
class _Row:
    context: list[int]
    settings: RowSettings
    done: anyio.Event = field(default_factory=anyio.Event)
    sample: Sample | None = None
    error: BaseException | None = None


class TurnBatch:
    """Samples the pending turns of concurrent episodes together: a batch runs once every
    joined episode waits on it, or `max_batch` rows wait."""

    def __init__(self, engine: BatchingEngine, max_batch: int) -> None:
        self.engine, self.max_batch = engine, max_batch
        self.live = 0
        self.waiting: list[_Row] = []
        self.batches: list[int] = []
        "Rows of each batch run, in order."
        self._ready = anyio.Event()

    def join(self) -> None:
        """An episode starts: batches wait for its turns too."""
        self.live += 1

    def leave(self) -> None:
        """An episode ended: batches no longer wait for it."""
        self.live -= 1
        self._check()

    async def sample(self, context: list[int], settings: RowSettings) -> Sample:
        """The next completion of `context`, sampled in a batch with the other episodes'."""
        row = _Row(context, settings)
        self.waiting.append(row)
        self._check()
        await row.done.wait()
        if row.error is not None:
            raise row.error
        assert row.sample is not None
        return row.sample

    def _check(self) -> None:
        if self.waiting and len(self.waiting) >= min(self.live, self.max_batch):
            self._ready.set()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run batches until cancelled."""
        task_status.started()
        while True:
            await self._ready.wait()
            self._ready = anyio.Event()
            rows, self.waiting = self.waiting[:self.max_batch], self.waiting[self.max_batch:]
            self.batches.append(len(rows))
            try:
                results = await anyio.to_thread.run_sync(
                    self.engine.run_rows, [r.context for r in rows], [r.settings for r in rows])
                for row, r in zip(rows, results):
                    row.sample = Sample(r.token_ids, r.logprobs, r.text, r.finish_reason, 0)
            except Exception as exc:  # noqa: BLE001 - handed to each waiting episode
                for row in rows:
                    row.error = exc
            for row in rows:
                row.done.set()
            self._check()


async def play(cfg: RunConfig, engine: BatchingEngine, batch: TurnBatch, session, task: Task,
               attempt_id: str, label: str, max_turns: int) -> Episode:
    """One episode to its end; the session's workspace is the attempt's `workspace` after."""
    chat, max_context = engine.chat, cfg.model.max_context
    added = context = chat.prompt_ids(task.prompt)
    attempt = Attempt(attempt_id=attempt_id, group_id=attempt_id.rsplit(".", 1)[0], index=0,
                      group_size=1, task=task, turns=[], policy_version=0, purpose="eval")
    end, infra, tokens = "", "", 0
    while not end:
        room = room_left(len(context), max_context)
        if not room:
            end = "context"
            break
        sample = await batch.sample(context, RowSettings.of(cfg.generator.eval_sampling, room))
        tokens += len(sample.token_ids)
        done = await step(task, attempt.tool_calls, sample.text, tokens, bool(sample.token_ids),
                          lambda call, n: session.call(call, step=n))
        assert done is not None  # an in-process session always answers
        turn = msgspec.structs.replace(make_turn(added, sample, label), feedback=done.message)
        attempt = msgspec.structs.replace(attempt, turns=[*attempt.turns, turn],
                                          tool_calls=[*attempt.tool_calls, done.call])
        end, infra = done.end, done.result.infra
        if not end and len(attempt.turns) >= max_turns:
            end = "turns"
        if not end:
            added, context = next_context(attempt, chat)
    return Episode(attempt, end, infra)


async def run_episodes(cfg: RunConfig, engine: BatchingEngine, tasks: list[Task], label: str,
                       max_turns: int = 1 << 30, batch: TurnBatch | None = None) -> list[Episode]:
    """Every task's episode, in task order, at most `[generator] max_in_flight` at a time,
    their turns sampled through `batch` (a new `TurnBatch` of `[generator] max_batch`)."""
    backend = await open_backend(cfg.executor.sandbox, cfg.executor.concurrency)
    cache = WorkspaceCache()
    batch = batch or TurnBatch(engine, cfg.generator.max_batch)
    episodes: list[Episode | None] = [None] * len(tasks)
    holding = anyio.Semaphore(cfg.generator.max_in_flight)

    async def one(i: int, task: Task) -> None:
        attempt_id = f"{round_assignment_id(label, 0, i)}.0"
        async with holding:
            batch.join()  # before the session opens, so the first batch waits for this episode
            try:
                try:
                    session = await open_session(cache, backend, task)
                except RuntimeError as exc:  # the workspace's first test run failed: infra
                    episodes[i] = Episode(Attempt(attempt_id=attempt_id, group_id=attempt_id,
                                                  index=0, group_size=1, task=task, turns=[],
                                                  policy_version=0, purpose="eval"),
                                          "infra", str(exc))
                    return
                try:
                    episode = await play(cfg, engine, batch, session, task, attempt_id, label,
                                         max_turns)
                    refused = list(session.workspace.refused)
                finally:
                    files = session.close()
            finally:
                batch.leave()
            episodes[i] = Episode(msgspec.structs.replace(
                episode.attempt, workspace=files, refused=refused), episode.end, episode.infra)

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(batch.serve)
            async with anyio.create_task_group() as work:
                for i, task in enumerate(tasks):
                    work.start_soon(one, i, task)
            tg.cancel_scope.cancel()
    finally:
        cache.close()
        with anyio.CancelScope(shield=True):
            await backend.aclose()
    return [e for e in episodes if e is not None]
