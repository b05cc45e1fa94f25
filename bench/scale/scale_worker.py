"""One process of simulated actors for the scale bench, driven over its stdin and stdout.

    PYTHONPATH=. python bench/scale/scale_worker.py --url URL --first 0 --count 125 [--rate 0.5]

Consumes commands, one a line on stdin: `reset` (forget what was measured), `report` (print
it as one JSON line) and `stop` (drain every actor and exit). Produces JSON lines on stdout:
`{"ready": n}` once every actor's consumer is in place, and the reports. Each actor is
`runtime.stack.actor.serve` of the kind `sim` (`bench.scale.scale_actor`), with its own NATS
connection; it logs warnings and errors only, to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
from pathlib import Path

import anyio
import msgspec
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.scale import scale_actor  # noqa: E402
from runtime.config import RunConfig  # noqa: E402
from runtime.stack.actor import serve  # noqa: E402


def sim_config(heartbeat_s: float = 2.0) -> RunConfig:
    """The run config of the simulated actors: kind `sim` runs `bench.scale.scale_actor:run`."""
    cfg = RunConfig()
    return msgspec.structs.replace(
        cfg, actors=msgspec.structs.replace(cfg.actors, target={"sim": "bench.scale.scale_actor:run"}),
        supervisor=msgspec.structs.replace(cfg.supervisor, heartbeat_s=heartbeat_s))


def quiet_logs() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                        logger_factory=structlog.PrintLoggerFactory(sys.stderr))


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def main(url: str, first: int, count: int, heartbeat_s: float) -> None:
    cfg = sim_config(heartbeat_s)
    record = scale_actor.RECORD
    async with anyio.create_task_group() as tg:
        for i in range(first, first + count):
            tg.start_soon(lambda i=i: serve("sim", f"sim-{i}", cfg, url, "", run_id="scale"))
        while record.ready < count:
            await anyio.sleep(0.05)
        say({"ready": record.ready})
        async for line in anyio.wrap_file(sys.stdin):
            command = line.strip()
            if command == "reset":
                record.reset()
                say({"cpu_s": cpu_s()})
            elif command == "report":
                say({"publish_s": record.publish_s, "latency_s": record.latency_s,
                     "handled": record.handled, "cpu_s": cpu_s()})
            elif command == "stop":
                break
        for bus in record.buses:
            bus.stopping.set()
    say({"stopped": count})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="scale_worker")
    parser.add_argument("--url", required=True)
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--rate", type=float, default=0.5)
    parser.add_argument("--heartbeat-s", type=float, default=2.0)
    args = parser.parse_args()
    quiet_logs()
    scale_actor.RATE = args.rate
    anyio.run(main, args.url, args.first, args.count, args.heartbeat_s)
