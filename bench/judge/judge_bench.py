"""Benchmark: the judge's own overhead per verdict, as a share of executing a typical attempt.

Measured side by side in one run (the machine is shared and noisy; the ratios are the
result):

- baseline: a typical unittest attempt executed in the sandbox backend (`python3 -m unittest`
  on a 5-test module, the workload of bench/sandbox/sandbox_bench.py), median of repeats; for reference also
  the judge's own harness job for a HumanEval attempt;
- judge, in process: 1,000 verdicts through the judge's code path minus the execution:
  extract the candidate, build the job, encode the request, decode the result, score,
  attribute, check for hacks, compose the reward, encode the verdict; recorded results of
  real runs stand in for the executions;
- judge, over the bus: the judge actor on a real nats-server, 1,000 attempts published, a
  stub executor answering each request with a recorded result (its nonce rewritten); wall
  time per verdict from first publish to last verdict stored (NATS and the stub, which share
  the CPU with the judge here, included: an upper bound).

Target: judge overhead per verdict < 5% of the unittest attempt's execution.

    python bench/judge/judge_bench.py [--verdicts 1000] [--backend subprocess] [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.judge.tasks import attempt  # noqa: E402
from bench.sandbox.sandbox_bench import WORKLOADS  # noqa: E402
from bus import subjects  # noqa: E402
from bus.codec import decode, encode  # noqa: E402
from bus.messages import ExecutionDone, ExecutionRequest, Verdict  # noqa: E402
from envs.humaneval import import_file  # noqa: E402
from judging.config import JudgeConfig  # noqa: E402
from judging.jobs import build_job  # noqa: E402
from judging.judgement import before_running, candidate_of, judge_result  # noqa: E402
from sandbox import open_backend  # noqa: E402
from sandbox.config import SandboxConfig  # noqa: E402

UNITTEST = WORKLOADS["unittest"]
"The sandbox benchmark's small unittest job: a typical unittest attempt."


def sample_attempts() -> list:
    """A mix like a training batch: correct, wrong and crashing HumanEval attempts."""
    tasks = import_file().tasks[:20]
    mix = []
    for i, task in enumerate(tasks):
        code = [task.verifier.reference, "    return None\n", "    raise ValueError(1)\n"][i % 3]
        mix.append(attempt(task, code, attempt_id=f"bench{i}.0"))
    return mix


async def execution_baseline(backend, repeats: int, harness_attempt) -> tuple[float, float]:
    """Median seconds of a unittest job and of one harness job, alternated."""
    plain, harness = [], []
    job = build_job(harness_attempt.task, candidate_of(harness_attempt))
    for _ in range(repeats):
        t = time.perf_counter()
        result = await backend.run(UNITTEST)
        plain.append(time.perf_counter() - t)
        assert result.status == "ok", result.stderr
        t = time.perf_counter()
        await backend.run(job)
        harness.append(time.perf_counter() - t)
    return statistics.median(plain), statistics.median(harness)


async def record(backend, attempts) -> list[tuple]:
    """(attempt, job, result) of one real run of each attempt."""
    out = []
    for a in attempts:
        job = build_job(a.task, candidate_of(a))
        out.append((a, job, await backend.run(job)))
    return out


def judge_in_process(recorded: list[tuple], verdicts: int, config: JudgeConfig) -> float:
    """Seconds per verdict of the judge's work around the execution."""
    start = time.perf_counter()
    for i in range(verdicts):
        a, recorded_job, result = recorded[i % len(recorded)]
        a = msgspec.structs.replace(a, attempt_id=f"{a.attempt_id}.{i}")
        cand = candidate_of(a)
        assert before_running(a.task, cand, 1, config.reward) is None
        job = build_job(a.task, cand)
        encode(ExecutionRequest(request_id=f"{a.attempt_id}/t1/r0", attempt=a, job=job))
        done = decode(encode(ExecutionDone(request=ExecutionRequest(request_id="r", attempt=a, job=recorded_job),
                                           result=result, executor="x")), ExecutionDone)
        judgement = judge_result(a.task, candidate_of(done.request.attempt), done.request.job, done.result, 1,
                                 config.reward)
        encode(judgement.verdict(a, judge="bench"))
    return (time.perf_counter() - start) / verdicts


async def judge_over_bus(recorded: list[tuple], verdicts: int) -> float:
    """Wall seconds per verdict through the judge actor on a real nats-server."""
    from actors import judge as judge_actor
    from bus.consumer import consume
    from bus.nats_bus import Bus, BusSettings, Identity
    from runtime.broker.embedded import EmbeddedServer
    from runtime.config import RunConfig
    from runtime.connect import topology

    results = {a.task.task_id + "|" + a.turns[-1].completion: (job, result) for a, job, result in recorded}
    server = EmbeddedServer(Path(tempfile.mkdtemp(prefix="judge-bench-")) / "nats")
    server.start()
    try:
        bus = await Bus.connect(BusSettings(url=server.url), Identity("judge", "bench"))
        await bus.ensure_topology(topology(RunConfig()))

        async def stub_executor(req: ExecutionRequest, delivery) -> None:
            old_job, result = results[req.attempt.task.task_id + "|" + req.attempt.turns[-1].completion]
            nonce_old, nonce_new = (json.loads(j.stdin)["nonce"] for j in (old_job, req.job))
            result = msgspec.structs.replace(result, report=result.report.replace(nonce_old, nonce_new))
            await bus.publish(subjects.EXEC_DONE, ExecutionDone(request=req, result=result, executor="stub"),
                              msg_id=req.request_id)

        batch = [msgspec.structs.replace(a, attempt_id=f"{a.attempt_id}.{i}")
                 for i, (a, _, _) in enumerate(recorded[i % len(recorded)] for i in range(verdicts))]
        async with anyio.create_task_group() as tg:
            await tg.start(judge_actor.run, bus, RunConfig())
            tg.start_soon(lambda: consume(bus, subjects.CONSUMER_EXEC, ExecutionRequest, stub_executor,
                                          max_in_flight=64))
            start = time.perf_counter()
            await bus.publish_many(subjects.ATTEMPTS, [(a.attempt_id, a) for a in batch])
            seen = 0
            async for _, verdict, _ in bus.replay(subjects.STREAM_VERDICTS, f"{subjects.VERDICTS}.>", Verdict):
                seen += 1
                if seen == verdicts:
                    break
            elapsed = time.perf_counter() - start
            bus.stopping.set()
        await bus.close()
        return elapsed / verdicts
    finally:
        server.kill()


async def main(args) -> None:
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    backend = await open_backend(SandboxConfig(backend=args.backend), slots=2, run_id="judge-bench")
    try:
        attempts = sample_attempts()
        unittest_s, harness_s = await execution_baseline(backend, args.repeats, attempts[0])
        recorded = await record(backend, attempts)
    finally:
        await backend.aclose()
    in_process = judge_in_process(recorded, args.verdicts, JudgeConfig())
    over_bus = await judge_over_bus(recorded, args.verdicts)
    print(f"backend {args.backend}; {args.verdicts} verdicts over {len(recorded)} distinct attempts")
    print(f"unittest attempt execution (median of {args.repeats}): {unittest_s * 1000:8.1f} ms")
    print(f"judge harness job, HumanEval attempt (median):   {harness_s * 1000:8.1f} ms")
    print(f"judge overhead per verdict, in process:          {in_process * 1000:8.2f} ms"
          f"  = {in_process / unittest_s:6.1%} of the unittest attempt  (target < 5%)")
    print(f"judge overhead per verdict, actor over NATS:     {over_bus * 1000:8.2f} ms"
          f"  = {over_bus / unittest_s:6.1%} of the unittest attempt")
    print(f"as a share of the judge's own harness job:       {in_process / harness_s:6.1%} in process, "
          f"{over_bus / harness_s:6.1%} over NATS")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verdicts", type=int, default=1000)
    parser.add_argument("--backend", default="subprocess", choices=["subprocess", "local", "docker"])
    parser.add_argument("--repeats", type=int, default=15)
    anyio.run(main, parser.parse_args())
