"""Benchmark: what TLS with client certificates costs on the bus, side by side with plaintext.

Consumes nothing; makes a CA and certificates (`runtime.broker.certs`) in a temporary folder and
starts two nats-servers with the same users, one plaintext and one requiring TLS and a
client certificate (`[auth] tls`). Through `Bus` (the actors' client), for each it measures,
alternating the two, medians of `--rounds`:

- connect = `Bus.connect` until ready (TCP, TLS handshake, CONNECT and PONG);
- publish = sequential durable publishes of 1 KB (each waits for its JetStream ack);
- fetch   = consume with acks of what was published (pull batches of 100).

    python bench/bus/tls_overhead.py [--messages 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from bus import subjects
from bus.codec import pack_f32, pack_ids
from bus.messages import Attempt, ExecutionRequest, Job, Task, Turn, Verifier
from bus.nats_bus import Bus, BusSettings, Identity
from runtime.broker import auth, certs
from runtime.broker.embedded import EmbeddedServer
from runtime.config import RunConfig
from runtime.connect import topology
from runtime.stack import credentials


def _request() -> ExecutionRequest:
    """The execution request of the codec test's samples (tests/test_codec.py), built here."""
    task = Task(task_id="py/1", env="py", env_version="1", domain="python", prompt="add",
                verifier=Verifier(kind="python_io", visible='[{"args":[1],"expected":2}]'),
                entry_point="f", files={"a.txt": "x"})
    turn = Turn(prompt_ids=pack_ids([1, 2, 3]), completion_ids=pack_ids([4, 5]),
                logprobs=pack_f32([-0.5, -1.25]), completion="def f(x): return x+1",
                policy_version=3, generator="generator-1")
    attempt = Attempt(attempt_id="a.0", group_id="a", index=0, group_size=4, task=task,
                      turns=[turn], policy_version=3)
    return ExecutionRequest(request_id="a.0/t0/r0", attempt=attempt,
                            job=Job(command=["python3", "h.py"], files={"h.py": b"pass"}))


REQUEST = _request()


async def one_round(settings: BusSettings, n: int, tag: str) -> dict[str, float]:
    started = time.perf_counter()
    bus = await Bus.connect(settings, Identity("bench", tag))
    connect_s = time.perf_counter() - started
    try:
        await bus.ensure_topology(topology(RunConfig()))
        started = time.perf_counter()
        for i in range(n):
            await bus.publish(subjects.EXEC_REQUESTS, REQUEST, msg_id=f"{tag}-{i}")
        publish_s = time.perf_counter() - started
        sub = await bus.js.pull_subscribe(subjects.EXEC_REQUESTS, durable=f"bench-{tag}",
                                          stream=subjects.STREAM_EXEC)
        started, got = time.perf_counter(), 0
        while got < n:
            for m in await sub.fetch(100, timeout=5):
                await m.ack()
                got += 1
        fetch_s = time.perf_counter() - started
        await bus.js.delete_consumer(subjects.STREAM_EXEC, f"bench-{tag}")  # one per work queue
    finally:
        await bus.close()
    return {"connect_ms": connect_s * 1000, "publish_per_s": n / publish_s,
            "fetch_per_s": n / fetch_s}


async def main(messages: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "secrets"
        passwords = credentials.ensure_passwords(folder)
        d = credentials.tls_dir(folder)
        certs.ensure(d)
        users = auth.server_config(auth.AuthConfig(enabled=True), passwords)
        servers = {"plain": EmbeddedServer(Path(tmp) / "plain", extra_config=users),
                   "tls": EmbeddedServer(Path(tmp) / "tls",
                                         extra_config=credentials.server_tls_block(d) + users)}
        for server in servers.values():
            server.start()
        files = credentials.role_tls(folder, auth.ADMIN)
        settings = {
            "plain": BusSettings(url=servers["plain"].url, user="admin", password=passwords["admin"]),
            "tls": BusSettings(url=servers["tls"].url, user="admin", password=passwords["admin"],
                               tls_ca_file=files["WHET_NATS_CA"],
                               tls_cert_file=files["WHET_NATS_CERT"],
                               tls_key_file=files["WHET_NATS_KEY"]),
        }
        results: dict[str, list[dict[str, float]]] = {"plain": [], "tls": []}
        try:
            for r in range(rounds):
                for name in ("plain", "tls"):
                    results[name].append(await one_round(settings[name], messages, f"{name}{r}"))
        finally:
            for server in servers.values():
                server.kill()
    print(f"{messages} messages of ~1 KB, medians of {rounds} rounds")
    print(f"{'':8}{'connect ms':>12}{'publish/s':>12}{'fetch+ack/s':>14}")
    medians = {name: {k: statistics.median(x[k] for x in rows) for k in rows[0]}
               for name, rows in results.items()}
    for name, m in medians.items():
        print(f"{name:8}{m['connect_ms']:12.1f}{m['publish_per_s']:12.0f}{m['fetch_per_s']:14.0f}")
    p, t = medians["plain"], medians["tls"]
    print(f"{'tls/plain':8}{t['connect_ms'] / p['connect_ms']:12.2f}"
          f"{t['publish_per_s'] / p['publish_per_s']:12.2f}{t['fetch_per_s'] / p['fetch_per_s']:14.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    anyio.run(main, args.messages, args.rounds)
