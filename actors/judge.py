"""The judge actor: attempts in, execution requests out; execution results in, verdicts out.

Consumes `Attempt` from `subjects.CONSUMER_ATTEMPTS` and `ExecutionDone` from
`subjects.CONSUMER_EXEC_DONE`. Publishes:

- `ExecutionRequest` on `subjects.EXEC_REQUESTS` (msg id '<attempt_id>/t<turn>/r<retry>'),
  the job built from the attempt's latest turn; again with retry+1 and the failing executor
  in `avoid_executors` after an infrastructure failure, up to `judge.max_retries`;
- `Verdict` on `subjects.verdict_subject(purpose)` (msg id = attempt id): reward and its
  components, outcome, cause, evidence and layers; `dropped` (no reward, not trainable) once
  an infrastructure failure outlasts the retries, counted by cause; when the verdict
  stream is full, the verdicts every reader has acked are purged to make room;
- for multi-turn work, a failed attempt with turns left goes back on `subjects.TURNS`
  (msg id '<attempt_id>/t<next turn>') with feedback on its latest turn.

Structured attempts, and code that does not compile, are judged without execution. Every
output id derives from the input's, so a redelivered input never yields a second output.
It does NOT run sandboxes (the executor does) or train (the learner does); the judging
itself is `judging.judgement`.
"""

from __future__ import annotations

import time
from functools import partial

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus

from bus import subjects
from bus.consumer import Delivery, consume
from bus.messages import Attempt, ExecutionDone, ExecutionRequest
from bus.nats_bus import Bus
from judging import rubric
from judging.attribution import Cause
from judging.config import JudgeConfig
from judging.feedback import feedback_for
from judging.jobs import TaskError, build_job
from judging.judgement import Judgement, before_running, candidate_of, dropped, judge_result
from runtime.config import RunConfig

log = structlog.get_logger("judge")


class Judge:
    def __init__(self, bus: Bus, config: JudgeConfig) -> None:
        self.bus = bus
        self.config = config
        self.counts = bus.stats.gauges

    def count(self, name: str, by: float = 1.0) -> None:
        self.counts[name] = self.counts.get(name, 0.0) + by

    async def on_attempt(self, attempt: Attempt, delivery: Delivery) -> None:
        started = time.perf_counter()
        turn = len(attempt.turns)
        cand = candidate_of(attempt)
        early = before_running(attempt.task, cand, turn, self.config.reward)
        if early is not None:
            await self.finish(attempt, early, retries=0, spent=time.perf_counter() - started)
            return
        try:
            job = build_job(attempt.task, cand, quality=self.config.reward.quality)
        except TaskError as exc:
            await self.finish(attempt, dropped(Cause("infra.bad_task", str(exc)), [], []),
                              retries=0, spent=time.perf_counter() - started)
            return
        request = ExecutionRequest(request_id=f"{attempt.attempt_id}/t{turn}/r0", attempt=attempt, job=job)
        await self.bus.publish(subjects.EXEC_REQUESTS, request, msg_id=request.request_id)
        self.count("judge.overhead_s", time.perf_counter() - started)
        log.info("judge.requested", attempt_id=attempt.attempt_id, request_id=request.request_id,
                 task_id=attempt.task.task_id)

    async def on_done(self, done: ExecutionDone, delivery: Delivery) -> None:
        started = time.perf_counter()
        request, attempt = done.request, done.request.attempt
        judgement = judge_result(attempt.task, candidate_of(attempt), request.job, done.result,
                                 len(attempt.turns), self.config.reward)
        if judgement.infra and request.retry < self.config.max_retries:
            await self.retry(done, judgement)
            self.count("judge.overhead_s", time.perf_counter() - started)
            return
        attempt = with_execution(attempt, done)
        await self.finish(attempt, judgement, retries=request.retry, spent=time.perf_counter() - started)

    async def retry(self, done: ExecutionDone, judgement: Judgement) -> None:
        request = done.request
        retry = request.retry + 1
        turn = len(request.attempt.turns)
        again = msgspec.structs.replace(
            request, request_id=f"{request.attempt.attempt_id}/t{turn}/r{retry}", retry=retry,
            avoid_executors=sorted({*request.avoid_executors, done.executor}))
        await self.bus.publish(subjects.EXEC_REQUESTS, again, msg_id=again.request_id)
        self.count("judge.retried")
        log.warning("judge.retried", attempt_id=request.attempt.attempt_id, retry=retry,
                    cause=judgement.cause, evidence=judgement.evidence[:500], executor=done.executor)

    async def finish(self, attempt: Attempt, judgement: Judgement, *, retries: int, spent: float) -> None:
        turn = len(attempt.turns)
        single_turn = attempt.task.verifier.kind == rubric.KIND  # a verifiers task is one reply
        if judgement.outcome == "fail" and turn < self.config.max_turns and not single_turn:
            await self.continue_attempt(attempt, judgement)
        else:
            verdict = judgement.verdict(attempt, judge=self.bus.identity.instance, retries=retries)
            await self.bus.publish(subjects.verdict_subject(attempt.purpose), verdict,
                                   msg_id=attempt.attempt_id, when_full=self.make_room)
            self.record(attempt, judgement, retries)
        self.count("judge.overhead_s", spent)

    async def make_room(self) -> int:
        """The verdict stream is full: drop the verdicts every reader has acked (their trial
        records stay with the monitor) rather than wait for them to age out."""
        removed = await self.bus.reclaim_consumed(subjects.STREAM_VERDICTS)
        self.count("judge.verdicts_reclaimed", removed)
        return removed

    async def continue_attempt(self, attempt: Attempt, judgement: Judgement) -> None:
        feedback = feedback_for(attempt.task, judgement, self.config.feedback_chars)
        last = msgspec.structs.replace(attempt.turns[-1], feedback=feedback)
        follow = msgspec.structs.replace(attempt, turns=[*attempt.turns[:-1], last])
        next_turn = len(attempt.turns) + 1
        await self.bus.publish(subjects.TURNS, follow, msg_id=f"{attempt.attempt_id}/t{next_turn}")
        self.count("judge.continued")
        log.info("judge.continued", attempt_id=attempt.attempt_id, next_turn=next_turn,
                 cause=judgement.cause, reward=judgement.reward)

    def record(self, attempt: Attempt, judgement: Judgement, retries: int) -> None:
        self.count("judge.verdicts")
        self.count(f"judge.{judgement.outcome}")
        fields = dict(attempt_id=attempt.attempt_id, task_id=attempt.task.task_id,
                      policy_version=attempt.policy_version, outcome=judgement.outcome,
                      reward=judgement.reward, cause=judgement.cause, retries=retries)
        if judgement.outcome == "hack":
            log.warning("judge.hack_suspected", evidence=judgement.evidence, **fields)
        elif judgement.outcome == "dropped":
            self.count(f"judge.dropped.{judgement.cause}")
            log.warning("judge.dropped", evidence=judgement.evidence[:500], **fields)
        else:
            log.info("judge.judged", **fields)


RECORDED_OUTPUT_CHARS = 4000
"How much of stdout, stderr and the harness report a trial record keeps."


def with_execution(attempt: Attempt, done: ExecutionDone) -> Attempt:
    """The attempt with its latest turn's execution result (trimmed) and executor recorded,
    so the verdict is a complete trial record (`whet trace`)."""
    result = done.result
    kept = msgspec.structs.replace(
        result, stdout=result.stdout[:RECORDED_OUTPUT_CHARS],
        stderr=result.stderr[:RECORDED_OUTPUT_CHARS], report=result.report[:RECORDED_OUTPUT_CHARS],
        stdout_truncated=result.stdout_truncated or len(result.stdout) > RECORDED_OUTPUT_CHARS,
        stderr_truncated=result.stderr_truncated or len(result.stderr) > RECORDED_OUTPUT_CHARS)
    last = msgspec.structs.replace(attempt.turns[-1], execution=kept, executor=done.executor)
    return msgspec.structs.replace(attempt, turns=[*attempt.turns[:-1], last])


async def run(bus: Bus, config: RunConfig, *,
              task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Serve both inputs until `bus.stopping` is set, then drain."""
    judge = Judge(bus, config.judge)
    limit = config.judge.max_in_flight
    async with anyio.create_task_group() as tg:
        await tg.start(partial(consume, bus, subjects.CONSUMER_ATTEMPTS, Attempt, judge.on_attempt,
                               max_in_flight=limit, drain_s=config.supervisor.drain_s))
        await tg.start(partial(consume, bus, subjects.CONSUMER_EXEC_DONE, ExecutionDone,
                               judge.on_done, max_in_flight=limit,
                               drain_s=config.supervisor.drain_s))
        task_status.started()
