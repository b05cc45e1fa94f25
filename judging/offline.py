"""Judge attempts without a bus: through a sandbox backend, concurrently, with quiet re-runs.

Consumes attempts (their tasks inside), a sandbox backend and the `JudgeConfig`; produces
one `Judged` per attempt, in input order. This is the judge's own code path (`judgement`)
with the executor replaced by a direct call to the backend: `whet judge`, the tests and the
benchmark use it. An attempt whose judgement is an infrastructure failure is re-run after
the concurrent pass, one at a time (a quiet slot, where starvation by other jobs cannot
recur), up to `max_retries` times; if it still fails it stays dropped, never rewarded.
Whatever an attempt or its result holds, it gets its own judgement (`judgement.unjudgeable`
at worst): no exception of one attempt stops the others. It does NOT publish anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from bus.messages import Attempt, ExecutionResult, Verdict
from judging.attribution import Cause
from judging.config import JudgeConfig
from judging.jobs import TaskError, build_job
from judging.judgement import Judgement, before_running, candidate_of, dropped, judge_result, unjudgeable


@dataclass
class Judged:
    attempt: Attempt
    judgement: Judgement
    result: ExecutionResult | None
    "The last execution's result (None when nothing ran)."
    retries: int = 0
    infra_causes: tuple[str, ...] = ()
    "The infrastructure causes that led to each re-run."

    def verdict(self, judge: str = "offline") -> Verdict:
        return self.judgement.verdict(self.attempt, judge=judge, retries=self.retries)


async def judge_once(attempt: Attempt, backend, config: JudgeConfig) -> tuple[Judgement, ExecutionResult | None]:
    """Build, run and judge the attempt's latest turn once: one judgement, whatever it holds."""
    try:
        cand = candidate_of(attempt)
        turns = len(attempt.turns)
        early = before_running(attempt.task, cand, turns, config.reward)
        if early is not None:
            return early, None
        job = build_job(attempt.task, cand, quality=config.reward.quality)
    except TaskError as exc:
        return dropped(Cause("infra.bad_task", str(exc)), [], []), None
    except Exception as exc:  # noqa: BLE001 - one attempt never stops the rest of a file
        return unjudgeable(len(attempt.turns), config.reward, f"{type(exc).__name__}: {exc}"), None
    try:
        result = await backend.run(job)
    except Exception as exc:  # noqa: BLE001 - as the executor does: a backend bug is the sandbox's failure
        result = ExecutionResult(status="sandbox_error", sandbox_failed=True,
                                 sandbox_error=f"backend error: {exc!r}"[:1000])
    return judge_result(attempt.task, cand, job, result, turns, config.reward), result


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
        while item.judgement.infra and item.retries < config.max_retries:
            item.infra_causes += (item.judgement.cause,)
            item.retries += 1
            item.judgement, item.result = await judge_once(item.attempt, backend, config)
    return judged
