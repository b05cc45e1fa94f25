"""What per-step credit costs a tool episode: the run of the visible tests after each call that
changes the workspace (`sandbox.session.Session._follow`), side by side with no such run.

    PYTHONPATH=. OMP_NUM_THREADS=1 python bench/repository/step_credit_cost.py [--tasks 6] [--out FILE]

For each of `--tasks` generated repository tasks, a scripted episode (list, read, run the
tests, write the fix, run the tests) is played twice on the local sandbox, interleaved: once
as the executor plays it (a write is followed by a silent run of the visible suite, and every
result carries the count and the workspace hash), once with that follow-up turned off. Prints
the wall and CPU seconds of a write call on each side, and of a whole episode.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import anyio

from envs.environment import generate
from envs.repository import ENVIRONMENT
from judging import repo
from judging.episode import tool_text
from judging.tools import parse_call
from sandbox import Metered, open_backend
from sandbox.config import SandboxConfig
from sandbox.session import Session, open_session
from sandbox.workspace import WorkspaceCache


def _script(task) -> list[str]:
    ref = repo.files_of(task.verifier.reference)
    touched = task.verifier.extra["touched"].split(",")
    return ([tool_text("list_files"), tool_text("read_file", path=touched[0], start=1, end=20),
             tool_text("run_tests")]
            + [tool_text("write_file", path=p, content=ref[p]) for p in touched]
            + [tool_text("run_tests")])


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


async def measure(tasks: int) -> dict[str, list[float]]:
    backend = Metered(await open_backend(SandboxConfig(backend="local"), slots=1))
    cache = WorkspaceCache()
    follow = Session._follow

    async def nothing(self, call, result) -> None:
        return None

    out: dict[str, list[float]] = {f"{side}.{k}": [] for side in ("credit", "plain")
                                   for k in ("write_s", "episode_s", "sandbox_cpu_s")}
    try:
        for task in generate(ENVIRONMENT, tasks, seed=17):
            for side in ("plain", "credit"):
                Session._follow = follow if side == "credit" else nothing  # type: ignore[method-assign]
                session = await open_session(cache, backend, task)
                began, cpu = time.perf_counter(), backend_cpu(backend)
                for step, text in enumerate(_script(task)):
                    call = parse_call(text)
                    started = time.perf_counter()
                    await session.call(call, step)
                    if call.name == "write_file":
                        out[f"{side}.write_s"].append(time.perf_counter() - started)
                out[f"{side}.episode_s"].append(time.perf_counter() - began)
                out[f"{side}.sandbox_cpu_s"].append(backend_cpu(backend) - cpu)
                session.close()
    finally:
        Session._follow = follow  # type: ignore[method-assign]
        cache.close()
        await backend.aclose()
    return out


def backend_cpu(backend) -> float:
    """CPU seconds the backend's jobs used so far, as their cgroups measured them."""
    return float(backend.cpu_s)


def report(times: dict[str, list[float]]) -> str:
    lines = []
    for key, values in times.items():
        if values:
            lines.append(f"{key:24s} n={len(values):3d} mean={statistics.mean(values):.4f} "
                         f"median={statistics.median(values):.4f}")
    w = statistics.mean(times["credit.write_s"]) - statistics.mean(times["plain.write_s"])
    e = statistics.mean(times["credit.episode_s"]) / statistics.mean(times["plain.episode_s"])
    lines.append(f"extra wall per write call: {w:.4f} s; episode wall ratio credit/plain: {e:.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    text = report(anyio.run(measure, args.tasks))
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
