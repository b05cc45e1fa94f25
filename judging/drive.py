"""Judging one attempt, start to end: build its job, run it on a backend, judge the result.

Consumes an `Attempt`, the `JudgeConfig` and (for `judge_once`) a sandbox backend; produces
a `Judgement` for the attempt's latest turn, whatever it or its result holds. The judge actor
uses `prepare` and `judge_run` around the executor; `judge_once` chains them over a backend
called directly (`judging.offline`, and through it `whet judge`, the red team and the
benches), through the executor's own `sandbox.runner.run_job`: a backend that raises gives a
sandbox failure, as the executor reports one. It does NOT retry (the actor and
`judging.offline` do) or publish anything.
"""

from __future__ import annotations

from bus.messages import Attempt, ExecutionResult, Job
from judging.attribution import Cause
from judging.config import JudgeConfig
from judging.jobs import TaskError, build_job
from judging.tools import is_tool_task
from judging import kinds
from judging.judgement import (Judgement, before_running, candidate_of, dropped, judge_result,
                               truncated, unjudgeable)
from sandbox.runner import run_job


def prepare(attempt: Attempt, config: JudgeConfig, turns: int) -> Judgement | Job:
    """The job that checks the attempt's latest turn, or its judgement when nothing needs to
    run (structured, does not compile, a malformed task, an attempt that cannot be read, a
    training answer cut at the token limit with `[judge] truncated = "fail"`). A task whose
    kind no judge can grade is `infra.bad_task` before anything of the attempt is read, so
    a broken task is never the model's failure."""
    why = kinds.problem(attempt.task)
    if why:
        return dropped(Cause("infra.bad_task", why), [], [])
    try:
        if config.truncated == "fail" and cut_at_limit(attempt):
            return truncated(turns, config.reward)
        cand = candidate_of(attempt)
        early = before_running(attempt.task, cand, turns, config.reward)
        if early is not None:
            return early
        return build_job(attempt.task, cand, quality=config.reward.quality)
    except TaskError as exc:
        return dropped(Cause("infra.bad_task", str(exc)), [], [])
    except Exception as exc:  # noqa: BLE001 - a judgement, never an exception, for one attempt
        return unjudgeable(turns, config.reward, f"{type(exc).__name__}: {exc}")


def cut_at_limit(attempt: Attempt) -> bool:
    """A training answer (not a tool episode's workspace) whose last turn hit the token limit."""
    return (attempt.purpose == "train" and bool(attempt.turns)
            and attempt.turns[-1].finish_reason == "length"
            and kinds.of(attempt.task).attempt != "workspace")


def judge_run(attempt: Attempt, job: Job, result: ExecutionResult, turns: int,
              config: JudgeConfig) -> Judgement:
    """The judgement of the attempt's job and what running it produced: always one."""
    try:
        return judge_result(attempt.task, candidate_of(attempt), job, result, turns, config.reward)
    except Exception as exc:  # noqa: BLE001 - a judgement, never an exception, for one attempt
        return unjudgeable(turns, config.reward, f"{type(exc).__name__}: {exc}")


def penalised_turns(attempt: Attempt) -> int:
    """Turns the reward's turn penalty counts: a tool episode's steps are not retries."""
    return 1 if is_tool_task(attempt.task) else len(attempt.turns)


async def judge_once(attempt: Attempt, backend, config: JudgeConfig) -> tuple[Judgement, ExecutionResult | None]:
    """Build, run and judge the attempt's latest turn once; the result is None when nothing ran."""
    turns = penalised_turns(attempt)
    prepared = prepare(attempt, config, turns)
    if not isinstance(prepared, Job):
        return prepared, None
    result = await run_job(backend, prepared)
    return judge_run(attempt, prepared, result, turns, config), result
