"""The judge actor: attempts in, execution requests out; execution results in, verdicts out.

Consumes `Attempt` (`subjects.CONSUMER_ATTEMPTS`) and `ExecutionDone`
(`subjects.CONSUMER_EXEC_DONE`). Publishes `ExecutionRequest`s on `subjects.EXEC_REQUESTS`,
one `Verdict` per attempt on `subjects.verdict_subject(purpose)` (msg id = attempt id), and
a failed multi-turn attempt with turns left, or a tool episode's next step, on
`subjects.TURNS`. Every output id derives from the input's, so a redelivered input never
yields a second output; every attempt gets a verdict, never a dead letter (`Judge`).
It does NOT run sandboxes (the executor does) or train (the learner does); the judging
itself is `judging.drive` (one attempt) and `judging.episode.step` (a tool turn).
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
from bus.messages import (Attempt, ExecutionDone, ExecutionRequest, Job, SessionReply,
                          SessionRequest, ToolCall, ToolResult)
from bus.nats_bus import Bus
from judging import kinds
from judging.attribution import Cause
from judging.config import JudgeConfig
from judging.drive import judge_run, penalised_turns, prepare
from judging.feedback import feedback_for
from judging.judgement import Judgement, dropped
from judging.steps import start_of, step_credit
from judging import episode
from judging.tools import is_tool_task
from runtime.config import RunConfig

log = structlog.get_logger("judge")


class Judge:
    """Judges attempts through executors: one instance per judge process.

    Requests: msg id '<attempt_id>/t<turn>/r<retry>', the job built from the attempt's latest
    turn; again with retry+1 and the failing executor in `avoid_executors` after an
    infrastructure failure, up to `judge.max_retries`. Verdicts carry reward and components,
    outcome, cause, evidence and layers; `dropped` (no reward, not trainable) once an
    infrastructure failure outlasts the retries, counted by cause. Structured attempts and code
    that does not compile are judged without execution; one that cannot be judged at all is the
    model's failure (`judgement.unjudgeable`). Tool episodes (`judging.tools.is_tool_task`) run
    each turn's call in the episode's session on an executor (`SessionRequest`, opened on the
    first turn) and send its trimmed result back as the next message; at submit or a step or
    token budget the final workspace is judged like any attempt. A session whose executor is
    gone drops the attempt (`infra.session_lost`). Each step's credit (`judging.steps`) is
    recorded on the attempt as `Attempt.steps`."""

    def __init__(self, bus: Bus, config: JudgeConfig) -> None:
        self.bus = bus
        self.config = config
        self.counts = bus.stats.gauges

    def count(self, name: str, by: float = 1.0) -> None:
        """Add `by` to the heartbeat gauge `name`."""
        self.counts[name] = self.counts.get(name, 0.0) + by

    async def on_attempt(self, attempt: Attempt, delivery: Delivery) -> None:
        """An attempt or a tool step arrived: request its run, or run its tool call."""
        if is_tool_task(attempt.task):
            await self.on_tool_step(attempt)
            return
        await self.request_run(attempt, len(attempt.turns))

    async def request_run(self, attempt: Attempt, turn: int) -> None:
        """Judge the attempt's candidate: at once when nothing needs to run, else through a job."""
        started = time.perf_counter()
        job = prepare(attempt, self.config, turn)
        if not isinstance(job, Job):  # judged without running: a verdict, never a dead letter
            await self.finish(attempt, job, retries=0, spent=time.perf_counter() - started)
            return
        request = ExecutionRequest(request_id=f"{attempt.attempt_id}/t{len(attempt.turns)}/r0",
                                   attempt=attempt, job=job)
        await self.bus.publish(subjects.EXEC_REQUESTS, request, msg_id=request.request_id)
        self.count("judge.overhead_s", time.perf_counter() - started)
        log.info("judge.requested", attempt_id=attempt.attempt_id, request_id=request.request_id,
                 task_id=attempt.task.task_id)

    async def on_done(self, done: ExecutionDone, delivery: Delivery) -> None:
        """An execution finished: judge it; retry elsewhere after an infrastructure failure
        while retries are left, else finish with the result recorded on the attempt."""
        started = time.perf_counter()
        request, attempt = done.request, done.request.attempt
        judgement = judge_run(attempt, request.job, done.result, penalised_turns(attempt), self.config)
        if judgement.rerun and request.retry < self.config.max_retries:
            await self.retry(done, judgement)
            self.count("judge.overhead_s", time.perf_counter() - started)
            return
        attempt = with_execution(attempt, done)
        await self.finish(attempt, judgement, retries=request.retry, spent=time.perf_counter() - started)

    async def retry(self, done: ExecutionDone, judgement: Judgement) -> None:
        """Publish the request again (retry+1), avoiding the executor that failed it."""
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
        """Continue a failed multi-turn attempt with turns left; otherwise publish its verdict
        (making room in a full verdict stream) and record it."""
        turn = len(attempt.turns)
        single_turn = kinds.of(attempt.task).turns == "one"  # a verifiers task is one reply
        if (judgement.outcome == "fail" and turn < self.config.max_turns and not single_turn
                and not is_tool_task(attempt.task)):
            await self.continue_attempt(attempt, judgement)
        else:
            verdict = judgement.verdict(attempt, judge=self.bus.identity.instance, retries=retries)
            await self.bus.publish(subjects.verdict_subject(attempt.purpose), verdict,
                                   msg_id=attempt.attempt_id, when_full=self.make_room)
            self.record(attempt, judgement, retries)
        self.count("judge.overhead_s", spent)

    # --- tool episodes: one step per turn, the workspace held by an executor's session ----------

    async def on_tool_step(self, attempt: Attempt) -> None:
        """Run the tool call of the attempt's newest turn in its session; send the result back
        as the next turn's message, or, once the episode is over, judge the final workspace."""
        task, timeout = attempt.task, self.config.session_timeout_s + 2 * attempt.task.limits.timeout_s
        opened = None
        if not attempt.session:
            opened = await self.bus.request(subjects.SESSION_OPEN, SessionRequest(
                session_id=attempt.attempt_id, op="open", task=task), SessionReply, timeout_s=timeout)
            if opened is None or not opened.ok:
                return await self.session_lost(attempt, opened)
            attempt = msgspec.structs.replace(attempt, session=opened.executor)
        start = start_of(attempt, opened)
        lost: list[SessionReply | None] = []

        async def run_call(call: ToolCall, step: int) -> ToolResult | None:
            reply = await self.session_request(attempt, "call", timeout, call=call, step=step)
            if reply is None or not reply.ok or reply.result is None:
                lost.append(reply)
                return None
            return reply.result

        turn = attempt.turns[-1]
        done = await episode.step(task, attempt.tool_calls, turn.completion,
                                  completion_tokens(attempt), len(turn.completion_ids) > 0, run_call)
        if done is None:
            return await self.session_lost(attempt, lost[0])
        if done.end == "infra":  # the sandbox failed under the session: close it, drop the attempt
            await self.session_request(attempt, "close", timeout)
            return await self.finish(attempt, dropped(Cause("infra.sandbox", done.result.infra), [], []),
                                     retries=0, spent=0.0)
        attempt = msgspec.structs.replace(attempt, tool_calls=[*attempt.tool_calls, done.call],
                                          steps=[*attempt.steps, step_credit(attempt, start, done.result)])
        self.count(f"judge.tool.{done.call.name or 'malformed'}")
        if not done.end:
            return await self.continue_attempt(attempt, None, done.message)
        closed = await self.session_request(attempt, "close", timeout)
        if closed is None or not closed.ok:
            return await self.session_lost(attempt, closed)
        self.count("judge.episodes")
        await self.request_run(msgspec.structs.replace(
            attempt, workspace=closed.files, refused=closed.refused), 1)

    async def session_request(self, attempt: Attempt, op: str, timeout: float, **fields):
        """Send `op` to the executor holding the attempt's session; None if it never answers."""
        return await self.bus.request(
            subjects.session_subject(attempt.session),
            SessionRequest(session_id=attempt.attempt_id, op=op, **fields),  # type: ignore[arg-type]
            SessionReply, timeout_s=timeout)

    async def session_lost(self, attempt: Attempt, reply: SessionReply | None) -> None:
        """The executor holding the episode is gone (or never answered): an infrastructure
        fault, dropped and counted, never a reward."""
        why = reply.error if reply is not None else f"no answer from executor {attempt.session or '(any)'}"
        self.count("judge.sessions_lost")
        await self.finish(attempt, dropped(Cause("infra.session_lost", why), [], []), retries=0, spent=0.0)

    async def make_room(self) -> int:
        """The verdict stream is full: drop the verdicts every reader has acked (their trial
        records stay with the monitor) rather than wait for them to age out."""
        removed = await self.bus.reclaim_consumed(subjects.STREAM_VERDICTS)
        self.count("judge.verdicts_reclaimed", removed)
        return removed

    async def continue_attempt(self, attempt: Attempt, judgement: Judgement | None,
                               feedback: str = "") -> None:
        """Send the attempt back on `subjects.TURNS` for its next turn, its latest turn
        carrying feedback (from the judgement, or a tool call's result)."""
        if judgement is not None:
            feedback = feedback_for(attempt.task, judgement, self.config.feedback_chars)
        last = msgspec.structs.replace(attempt.turns[-1], feedback=feedback)
        follow = msgspec.structs.replace(attempt, turns=[*attempt.turns[:-1], last])
        next_turn = len(attempt.turns) + 1
        await self.bus.publish(subjects.TURNS, follow, msg_id=f"{attempt.attempt_id}/t{next_turn}")
        self.count("judge.continued")
        step = attempt.steps[-1] if judgement is None and attempt.steps else None
        log.info("judge.continued", attempt_id=attempt.attempt_id, next_turn=next_turn,
                 cause=judgement.cause if judgement else "tool_call",
                 reward=judgement.reward if judgement else None,
                 tool=(attempt.tool_calls[-1].name or "malformed") if step else None,
                 step_reward=step.reward if step else None)

    def record(self, attempt: Attempt, judgement: Judgement, retries: int) -> None:
        """Count the verdict and log it: `judge.hack_suspected`, `judge.dropped` or `judge.judged`."""
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


def completion_tokens(attempt: Attempt) -> int:
    """Tokens sampled over the attempt's turns (`completion_ids` holds 4 bytes a token)."""
    return sum(len(turn.completion_ids) // 4 for turn in attempt.turns)


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
