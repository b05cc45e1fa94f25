"""What the scale bench reads besides its actors: the server's CPU and memory, stream
counters, `whet status` timing, a newcomer's time to work, and the supervisor's cost.

Consumes a connected `Bus`, a server pid (/proc) and/or a monitoring URL (/varz); produces
plain dicts of numbers. The supervisor's cost is measured with the real `Supervisor` over
stand-in children (`sleep`): a real actor process (about 100 MB) cannot be started a
thousand times on one small host, and the supervisor's own work per child is the same.
It starts no simulated actors itself except the one newcomer.
"""

from __future__ import annotations

import io
import json
import os
import resource
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import anyio
import msgspec
from rich.console import Console

from bench.scale import scale_actor
from bench.scale.scale_worker import sim_config
from bus import subjects
from bus.nats_bus import Bus
from runtime.cli import stack_status as status_mod
from runtime.cli.render import render_status
from runtime.stack.actor import serve
from runtime.stack.rundir import RunDir
from runtime.stack.supervisor import Supervisor

TICK = os.sysconf("SC_CLK_TCK")


def server_sample(pid: int | None, monitoring_url: str) -> dict:
    """CPU seconds and RSS of the server process (from /proc), and /varz counters."""
    out: dict = {"at": time.monotonic()}
    if pid:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out["cpu_s"] = (int(fields[11]) + int(fields[12])) / TICK
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out["rss_mb"] = int(line.split()[1]) / 1024
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    if monitoring_url:
        with urllib.request.urlopen(monitoring_url.rstrip("/") + "/varz", timeout=5) as r:
            varz = json.load(r)
        out.update(connections=varz["connections"], subscriptions=varz["subscriptions"],
                   slow_consumers=varz["slow_consumers"], varz_mem_mb=varz["mem"] / 2**20,
                   varz_cpu_pct=varz["cpu"], in_msgs=varz["in_msgs"], out_msgs=varz["out_msgs"])
    return out


async def last_seq(bus: Bus, stream: str) -> int:
    return (await bus.js.stream_info(stream)).state.last_seq


async def status_timing(bus: Bus, repeats: int = 5, include_stopped: bool = False) -> dict:
    """Median time of `whet status`'s read of the bus (`runtime.cli.stack_status.gather`) and
    the time to draw its tables, and what it saw."""
    times, snap = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        snap = await status_mod.gather(bus, include_stopped=include_stopped)
        times.append(time.perf_counter() - start)
    assert snap is not None
    start = time.perf_counter()
    render_status(snap, Console(file=io.StringIO(), width=150))
    render_s = time.perf_counter() - start
    sims = [a for a in snap.actors if a.kind == "sim"]
    return {"status_s": statistics.median(times), "status_render_s": render_s,
            "status_ready": snap.live("sim"),
            "status_dead": sum(a.state == "dead" for a in sims),
            "beat_age_max_s": max((a.beat_age_s for a in sims), default=0.0)}


async def key_by_key_s(bus: Bus) -> float:
    """Time to read every heartbeat as `Bus.kv_items` did before it read in one pass: list
    the keys, then look the bucket up and get each key (two requests per key)."""
    start = time.perf_counter()
    import nats.js.errors

    kv = await bus.js.key_value(subjects.BUCKET_ACTORS)
    try:
        keys = await kv.keys()
    except nats.js.errors.NoKeysError:  # every beat expired between two reads: nothing to get
        keys = []
    for key in keys:
        await (await bus.js.key_value(subjects.BUCKET_ACTORS)).get(key)
    return time.perf_counter() - start


async def newcomer(url: str, name: str, timeout_s: float = 60.0) -> dict:
    """Start one more simulated actor in this process: seconds to ready, to its first message."""
    record = scale_actor.RECORD
    ready_before, start = record.ready, time.time()
    out: dict = {}
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve("sim", name, sim_config(), url, "", run_id="scale"))
        with anyio.fail_after(timeout_s):
            while record.ready == ready_before:
                await anyio.sleep(0.01)
            out["ready_s"] = time.time() - start
            while name not in record.first_handled:
                await anyio.sleep(0.01)
        out["first_message_s"] = record.first_handled[name] - start
        record.buses[-1].stopping.set()
    return out


class StandInSupervisor(Supervisor):
    """The real supervisor, whose children are `sleep` instead of actor processes."""

    def _command(self, slot) -> list[str]:
        return ["sleep", "900"]


def _threads_and_fds() -> tuple[int, int]:
    with open("/proc/self/status") as f:
        threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    return threads, len(os.listdir("/proc/self/fd"))


async def supervisor_cost(bus_factory, n: int, window_s: float) -> dict:
    """Spawn `n` children under the real supervisor, watch them `window_s`, stop them all."""
    cfg = sim_config()
    cfg = msgspec.structs.replace(cfg, actors=msgspec.structs.replace(cfg.actors, count={"sim": n}))
    bus = await bus_factory()
    threads0, fds0 = _threads_and_fds()
    with tempfile.TemporaryDirectory(prefix="whet-scale-sup-") as tmp:
        sup = StandInSupervisor(cfg, RunDir(Path(tmp)), "nats://unused", bus)
        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            await tg.start(sup.run)
            while len(sup.pids_by_kind().get("sim", [])) < n:
                await anyio.sleep(0.01)
            spawn_s = time.perf_counter() - start
            threads1, fds1 = _threads_and_fds()
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            await anyio.sleep(window_s)
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            watch_s = time.perf_counter() - t0
            start = time.perf_counter()
            bus.stopping.set()
            await sup.done.wait()
            stop_s = time.perf_counter() - start
    await bus.close()
    busy = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    return {"spawn_s": spawn_s, "stop_s": stop_s, "watch_cpu_pct": 100 * busy / watch_s,
            "threads": threads1 - threads0, "fds": fds1 - fds0}


async def purge(bus: Bus) -> None:
    """Forget the previous count's heartbeats and work, so each count starts clean."""
    for stream in (subjects.kv_stream(subjects.BUCKET_ACTORS), scale_actor.STREAM):
        await bus.js.purge_stream(stream)
