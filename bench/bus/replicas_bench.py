"""Benchmark: what replication costs. JetStream publish and consume with ack, R1 against R3,
with each sync setting, in one run.

    PYTHONPATH=. python bench/bus/replicas_bench.py [--repeats 3] [--n 2000] [--dir D]

Two local 3-node clusters run side by side (`runtime.broker.cluster`), one flushing to disk
every two minutes ("2m", JetStream's default) and one on every write ("always"). On each,
with 1 KB messages, a fresh work-queue stream with 1 replica and one with 3 are measured in
turn, with the phases of `bench/bus/bus_bench.py --sync`: sequential `js.publish` (each waits for
its ack), `publish_async` then await all, and `fetch(100)` with `ack` or `ack_sync` of what
each publish stored. The client is connected to one node; an R1 stream is placed by the
cluster, so it may lead on another node (as in a real cluster). The median of the repeats
is reported with ratios against R1 on the 2m cluster, measured in the same run. The stores
live under `--dir` (default: the system temp folder), which must be a real disk.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import nats
import nats.errors
from nats.js import api

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bus_bench import (DURABLE, STREAM, SYNC_PHASES, fresh_stream, one_kb,  # noqa: E402
                       raw_consume)

from bus.codec import encode  # noqa: E402
from runtime.broker.cluster import EmbeddedCluster  # noqa: E402

INTERVALS = ("2m", "always")
REPLICAS = (1, 3)
PHASES = ("publish, sync", "publish, async", "consume, ack", "consume, ack_sync")


async def led(info_call) -> None:
    """Wait until the stream or consumer `info_call` describes has an elected leader: a
    replicated one answers nothing until then, and the wait is not what is measured."""
    with anyio.fail_after(30):
        while True:
            try:
                info = await info_call()
                if info.cluster is None or info.cluster.leader:
                    return
            except (nats.errors.Error, TimeoutError):
                pass
            await anyio.sleep(0.05)


async def ready_consumer(nc) -> None:
    """The durable `raw_consume` reads, created and led before the clock starts."""
    js = nc.jetstream()
    await js.add_consumer(STREAM, api.ConsumerConfig(durable_name=DURABLE, max_ack_pending=4096,
                                                     ack_policy=api.AckPolicy.EXPLICIT))
    await led(lambda: js.consumer_info(STREAM, DURABLE))


async def measure(args) -> dict[tuple[str, int, str], float]:
    payloads = [encode(one_kb(i)) for i in range(args.n)]
    runs: dict[tuple[str, int, str], list[float]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        clusters = {v: EmbeddedCluster(Path(tmp) / v, sync_interval=v) for v in INTERVALS}
        try:
            conns = {}
            for interval, cluster in clusters.items():
                cluster.start()
                conns[interval] = await nats.connect(servers=cluster.url.split(","))
            for i in range(args.repeats):
                for interval, nc in conns.items():
                    for replicas in (REPLICAS if i % 2 == 0 else REPLICAS[::-1]):
                        for phase, (publish, consume_phase, confirmed) in SYNC_PHASES.items():
                            await fresh_stream(nc, replicas)
                            await led(lambda: nc.jetstream().stream_info(STREAM))
                            runs.setdefault((interval, replicas, phase), []).append(
                                await publish(nc, payloads))
                            await ready_consumer(nc)
                            runs.setdefault((interval, replicas, consume_phase), []).append(
                                await raw_consume(nc, len(payloads), confirmed))
            for nc in conns.values():
                await nc.close()
        finally:
            for cluster in clusters.values():
                cluster.stop()
    return {k: statistics.median(v) for k, v in runs.items()}


def report(med: dict[tuple[str, int, str], float], args) -> str:
    cols = [(v, r) for v in INTERVALS for r in REPLICAS]
    head = f"{'phase':>17} " + " ".join(f"{f'{v} R{r} msg/s':>16}" for v, r in cols)
    head += "   " + " ".join(f"{f'{v} R{r}/R1 2m':>14}" for v, r in cols[1:])
    lines = [head]
    for phase in PHASES:
        base = med[("2m", 1, phase)]
        lines.append(f"{phase:>17} " + " ".join(f"{med[(v, r, phase)]:>16,.0f}" for v, r in cols)
                     + "   " + " ".join(f"{med[(v, r, phase)] / base:>14.2f}" for v, r in cols[1:]))
    lines.append(f"(1 KB, n={args.n}, median of {args.repeats}; 3-node clusters on 127.0.0.1)")
    return "\n".join(lines)


async def main(args) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"$ PYTHONPATH=. python bench/bus/replicas_bench.py --repeats {args.repeats} --n {args.n}"
          f"   # {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, load average {load}")
    began = time.monotonic()
    med = await measure(args)
    print(report(med, args))
    print(f"wall {time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=2000, help="messages per phase")
    parser.add_argument("--dir", default=None, help="where the stores live (a real disk)")
    anyio.run(main, parser.parse_args())
