"""Benchmark: what 10, 100 and 1,000 actors cost the bus, `whet status` and the supervisor.

    PYTHONPATH=. python bench/scale/scale.py [--counts 10,100,1000] [--per-process 125]
        [--window 10] [--rate 0.5] [--servers URL,URL,...] [--monitor URL] [--out bench/scale/results/scale]

Consumes nothing; starts its own nats-server (file storage, monitoring on) unless
`--servers` names running ones (then server CPU and memory come from `--monitor`'s /varz, if
given; several URLs need a client that takes comma-separated URLs, `[bus] url` on a cluster).
Point it only at a bus no run is using: between counts it purges the actor registry (KV
whet-actors) and its own stream. For each count N it starts N simulated actors (`bench/scale/scale_actor.py`: each its own
NATS connection, the real heartbeat of `runtime.stack.actor`, a consumer on a shared durable
through `bus.consumer`, and a publisher at `--rate` messages/s), `--per-process` of them per
OS process (`bench/scale/scale_worker.py`), and measures over `--window` seconds:

- bus overhead: publish time (until the server's ack), publish-to-handler latency, messages
  handled per second;
- heartbeat and KV load: heartbeat writes per second (the KV stream's sequence), and the
  oldest beat `whet status` sees (a beat older than 3 intervals shows the actor as dead);
- server CPU (% of one core) and memory (RSS), connections, subscriptions, slow consumers;
- `whet status` latency: `runtime.cli.stack_status.gather` against the bus with N actors registered;
- a newcomer's time to ready and to its first message while the N actors work;
- bring-up: time until all N actors have their consumers in place.

Then, apart from the bus, the supervisor's cost of N children (`bench/scale/scale_probes.py`).
It prints a table with per-actor ratios between counts (1.0: cost grows linearly) and
writes `<out>.json` and `<out>.md`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scale import scale_actor, scale_probes  # noqa: E402
from bench.scale.scale_report import render  # noqa: E402
from bench.scale.scale_worker import quiet_logs, sim_config  # noqa: E402
from bus import subjects  # noqa: E402
from bus.nats_bus import Bus, Identity  # noqa: E402
from runtime.broker.embedded import EmbeddedServer  # noqa: E402
from runtime.connect import bus_settings, topology  # noqa: E402


class Worker:
    """One worker process and its line protocol."""

    def __init__(self, proc: anyio.abc.Process, count: int) -> None:
        self.proc, self.count = proc, count
        self.lines = BufferedByteReceiveStream(proc.stdout)

    async def read(self, timeout_s: float = 300.0) -> dict:
        with anyio.fail_after(timeout_s):
            return json.loads(await self.lines.receive_until(b"\n", 64 * 2**20))

    async def ask(self, command: str) -> dict:
        await self.proc.stdin.send(command.encode() + b"\n")
        return await self.read()


async def start_workers(url: str, n: int, per_process: int, rate: float, log_dir: Path) -> list[Worker]:
    workers = []
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for first in range(0, n, per_process):
        count = min(per_process, n - first)
        proc = await anyio.open_process(
            [sys.executable, str(ROOT / "bench" / "scale" / "scale_worker.py"), "--url", url,
             "--first", str(first), "--count", str(count), "--rate", str(rate)],
            env=env, stderr=open(log_dir / f"worker-{n}-{first}.err", "ab"))
        workers.append(Worker(proc, count))
    for w in workers:
        assert (await w.read())["ready"] == w.count
    return workers


async def stop_workers(workers: list[Worker]) -> None:
    for w in workers:
        await w.proc.stdin.send(b"stop\n")
    for w in workers:
        with anyio.move_on_after(60):
            await w.read()
            await w.proc.wait()
        if w.proc.returncode is None:
            w.proc.kill()


def pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def one_count(bus: Bus, url: str, n: int, args, server) -> dict:
    await scale_probes.purge(bus)
    start = time.perf_counter()
    workers = await start_workers(url, n, args.per_process, args.rate, args.log_dir)
    row: dict = {"actors": n, "processes": len(workers), "bring_up_s": time.perf_counter() - start}
    try:
        await anyio.sleep(args.warmup)
        kv_stream = subjects.kv_stream(subjects.BUCKET_ACTORS)
        s0 = scale_probes.server_sample(*server())
        kv0 = await scale_probes.last_seq(bus, kv_stream)
        cpu0 = sum([(await w.ask("reset"))["cpu_s"] for w in workers])
        await anyio.sleep(args.window)
        reports = [await w.ask("report") for w in workers]
        kv1 = await scale_probes.last_seq(bus, kv_stream)
        s1 = scale_probes.server_sample(*server())
        elapsed = s1["at"] - s0["at"]
        publish = [x for r in reports for x in r["publish_s"]]
        latency = [x for r in reports for x in r["latency_s"]]
        row.update(
            published_per_s=len(publish) / elapsed,
            handled_per_s=sum(r["handled"] for r in reports) / elapsed,
            publish_p50_ms=1e3 * pct(publish, 0.5), publish_p99_ms=1e3 * pct(publish, 0.99),
            latency_p50_ms=1e3 * pct(latency, 0.5), latency_p99_ms=1e3 * pct(latency, 0.99),
            heartbeats_per_s=(kv1 - kv0) / elapsed,
            actors_cpu_pct=100 * (sum(r["cpu_s"] for r in reports) - cpu0) / elapsed,
            heartbeats_expected_per_s=n / sim_config().supervisor.heartbeat_s,
        )
        if "cpu_s" in s1:
            row.update(server_cpu_pct=100 * (s1["cpu_s"] - s0["cpu_s"]) / elapsed,
                       server_rss_mb=s1["rss_mb"], server_fds=s1["fds"])
        if "in_msgs" in s1:
            row["server_msgs_per_s"] = (s1["in_msgs"] + s1["out_msgs"]
                                        - s0["in_msgs"] - s0["out_msgs"]) / elapsed
        for key in ("connections", "subscriptions", "slow_consumers", "varz_mem_mb", "varz_cpu_pct"):
            if key in s1:
                row[key] = s1[key]
        row.update(await scale_probes.status_timing(bus))
        row["heartbeats_key_by_key_s"] = await scale_probes.key_by_key_s(bus)
        newcomers = [await scale_probes.newcomer(url, f"new-{n}-{i}") for i in range(args.newcomers)]
        row["newcomer_ready_s"] = statistics.median(x["ready_s"] for x in newcomers)
        row["newcomer_first_message_s"] = statistics.median(x["first_message_s"] for x in newcomers)
    finally:
        start = time.perf_counter()
        await stop_workers(workers)
        row["stop_s"] = time.perf_counter() - start
    # The same read with no simulated actor running: the cost of the code path alone.
    idle = await scale_probes.status_timing(bus, include_stopped=True)
    row.update(status_idle_s=idle["status_s"], status_idle_render_s=idle["status_render_s"])
    return row


async def run(args) -> dict:
    quiet_logs()
    scale_actor.RATE = args.rate
    server, embedded = (lambda: (None, args.monitor)), None
    if args.servers:
        url = args.servers
    else:
        store = Path(tempfile.mkdtemp(prefix="whet-scale-"))
        embedded = EmbeddedServer(store / "nats", max_file_store_mb=16 * 1024, monitor=True)
        url = embedded.start()
        server = lambda: (embedded.pid, embedded.monitoring_url)  # noqa: E731
    args.log_dir.mkdir(parents=True, exist_ok=True)
    settings = bus_settings(sim_config(), url)

    async def connect() -> Bus:
        return await Bus.connect(settings, Identity("bench", f"scale-{os.getpid()}"))

    bus = await connect()
    rows, supervisor = [], []
    try:
        await bus.ensure_topology([*topology(sim_config()), scale_actor.SPEC])
        for n in args.counts:
            rows.append(await one_count(bus, url, n, args, server))
            print(json.dumps(rows[-1]), flush=True)
        for n in args.counts if args.supervisor_window > 0 else []:
            supervisor.append({"actors": n, **await scale_probes.supervisor_cost(
                connect, n, args.supervisor_window)})
            print(json.dumps(supervisor[-1]), flush=True)
    finally:
        await bus.close()
        if embedded is not None:
            embedded.stop()
    return {"command": " ".join(sys.argv), "rate_per_actor": args.rate, "window_s": args.window,
            "per_process": args.per_process, "connections": "one per simulated actor",
            "cpus": os.cpu_count(), "load_before": args.load_before, "rows": rows,
            "supervisor": supervisor}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="bench/scale/scale.py")
    parser.add_argument("--counts", default="10,100,1000")
    parser.add_argument("--per-process", type=int, default=125)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rate", type=float, default=0.5, help="messages/s each actor publishes")
    parser.add_argument("--newcomers", type=int, default=3)
    parser.add_argument("--supervisor-window", type=float, default=5.0,
                        help="seconds to watch the supervisor's children; 0 skips that part")
    parser.add_argument("--servers", default="", help="comma-separated URLs of running servers")
    parser.add_argument("--monitor", default="", help="monitoring URL (/varz) of --servers")
    parser.add_argument("--out", default=str(ROOT / "bench" / "scale" / "results" / "scale"))
    parser.add_argument("--log-dir", default=str(Path(tempfile.gettempdir()) / "whet-scale-logs"))
    args = parser.parse_args(argv)
    args.counts = [int(x) for x in args.counts.split(",")]
    args.log_dir = Path(args.log_dir)
    args.load_before = os.getloadavg()[0]
    result = anyio.run(run, args)
    text = render(result)
    print(text)
    if args.out:
        Path(args.out + ".json").write_text(json.dumps(result, indent=2) + "\n")
        Path(args.out + ".md").write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
