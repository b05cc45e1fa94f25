"""Judge attempts without a bus: through a sandbox backend, concurrently, with quiet re-runs.

Consumes attempts (their tasks inside), a sandbox backend and the `JudgeConfig`; produces
one `Judged` per attempt, in input order. This is the judge's own code path (`judging.drive`)
with the executor replaced by a direct call to the backend: `whet judge`, the tests and the
benchmark use it. An attempt whose judgement is an infrastructure failure (a bad task aside)
is re-run after the concurrent pass, one at a time (a quiet slot, where starvation by other
jobs cannot recur), up to `max_retries` times; if it still fails it stays dropped, never
rewarded.
Whatever an attempt or its result holds, it gets its own judgement (`judgement.unjudgeable`
at worst): no exception of one attempt stops the others. It does NOT publish anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from bus.messages import Attempt, ExecutionResult, Verdict
from judging.config import JudgeConfig
from judging.drive import judge_once
from judging.judgement import Judgement


@dataclass
class Judged:
    """One attempt judged offline: its judgement, the last result, and the re-runs it took."""

    attempt: Attempt
    judgement: Judgement
    result: ExecutionResult | None
    "The last execution's result (None when nothing ran)."
    retries: int = 0
    infra_causes: tuple[str, ...] = ()
    "The infrastructure causes that led to each re-run."

    def verdict(self, judge: str = "offline") -> Verdict:
        return self.judgement.verdict(self.attempt, judge=judge, retries=self.retries)


async def judge_all(attempts: list[Attempt], backend, config: JudgeConfig, *,
                    concurrency: int = 4) -> list[Judged]:
    """Every attempt judged; infrastructure failures re-run one at a time afterwards."""
    out: list[Judged | None] = [None] * len(attempts)
    limiter = anyio.Semaphore(max(concurrency, 1))

    async def one(i: int) -> None:
        async with limiter:
            judgement, result = await judge_once(attempts[i], backend, config)
            out[i] = Judged(attempts[i], judgement, result)

    async with anyio.create_task_group() as tg:
        for i in range(len(attempts)):
            tg.start_soon(one, i)
    judged = [j for j in out if j is not None]
    for item in judged:
        while item.judgement.rerun and item.retries < config.max_retries:
            item.infra_causes += (item.judgement.cause,)
            item.retries += 1
            item.judgement, item.result = await judge_once(item.attempt, backend, config)
    return judged
