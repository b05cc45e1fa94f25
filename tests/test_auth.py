"""NATS users with per-role permissions, against a real nats-server with the generated config.

Each role connects with its own password and does what its actor really does (consume with
acks and dead letters, publish its outputs, heartbeats, events, KV, weights) without a single
refusal; publishing what belongs to another role (verdicts, weights, the policy pointer) is
refused, raised as PermissionDenied and logged as `bus.permission_denied`.
"""

from __future__ import annotations

import json
import subprocess
import time

import anyio
import msgspec
import pytest
from structlog.testing import capture_logs

from bus import subjects
from bus.consumer import consume
from bus.errors import BusUnavailable, PermissionDenied, TlsFailed
from bus.messages import (Event, EvaluatorState, ExecutionDone, ExecutionRequest,
                          ExecutionResult, Heartbeat, Job, MetricsSnapshot, StepRecord,
                          TaskAssignment, Verdict, WeightVersion)
from bus.nats_bus import Bus, Identity
from bus.objects import get_object, list_objects, put_object
from policy.versions import announce, recorded_version
from runtime.broker import auth
from runtime.broker.embedded import EmbeddedServer
from runtime.config import RunConfig
from runtime.connect import topology
from runtime.stack import credentials
from tests.conftest import STORE_MB, bus_settings, until
from tests.test_codec import samples

AUTH = auth.AuthConfig(enabled=True, roles={"probe": "executor"})
SAMPLE = {type(m).__name__: m for m in samples()}
VERDICT: Verdict = SAMPLE["Verdict"]
REQUEST: ExecutionRequest = SAMPLE["ExecutionRequest"]


@pytest.fixture
def secured(tmp_path):
    """A nats-server with every role's user; yields (server, passwords)."""
    passwords = credentials.ensure_passwords(tmp_path / "secrets")
    server = EmbeddedServer(tmp_path / "nats", extra_config=auth.server_config(AUTH, passwords),
                            max_file_store_mb=STORE_MB)
    server.start()
    yield server, passwords
    server.kill()


async def login(secured, role: str, kind: str | None = None) -> Bus:
    server, passwords = secured
    settings = bus_settings(server.url, user=role, password=passwords[role], request_timeout_s=1.0)
    return await Bus.connect(settings, Identity(kind or role, f"{kind or role}-1"))


@pytest.fixture
async def admin(secured):
    bus = await login(secured, "admin")
    await bus.ensure_topology(topology(RunConfig()))
    yield bus
    await bus.close()


async def heartbeat(bus: Bus) -> None:
    kind, instance = bus.identity.kind, bus.identity.instance
    await bus.kv_put(subjects.BUCKET_ACTORS, subjects.actor_key(kind, instance),
                     Heartbeat(kind=kind, instance=instance, pid=1, host="h", state="ready",
                               started_at=1.0, beat_at=2.0))
    await bus.publish_core(subjects.event_subject(kind, instance, "info"), b"\x90")
    await bus.nc.flush(timeout=2)


async def serve_until(bus: Bus, spec, cls, handler, done, what: str) -> None:
    """Serve `spec` with `handler` until `done()` (a predicate) is true, then stop."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: consume(bus, spec, cls, handler, max_in_flight=4))
        await until(done, 20, what)
        bus.stopping.set()


@pytest.mark.unit
def test_every_role_has_a_server_entry_and_owned_subjects_are_denied_to_others():
    """The generated config names every role once; verdicts and weights are owned."""
    text = auth.server_config(AUTH)
    for role in auth.roles():
        assert text.count(f'user: "{role}"') == 1
        assert f"${auth.password_variable(role)}" in text
    executor = auth.permissions("executor", AUTH)["publish"]
    assert "whet.v1.verdicts.>" in executor["deny"]
    assert "$O.whet-weights.>" in executor["deny"] and "$KV.whet-policy.>" in executor["deny"]
    assert "whet.v1.events.probe.>" in executor["allow"], "mapped kinds publish their events"
    judge = auth.permissions("judge", AUTH)["publish"]
    assert "whet.v1.verdicts.>" in judge["allow"] and "whet.v1.verdicts.>" not in judge["deny"]


@pytest.mark.bus
async def test_executor_does_its_work_and_is_refused_verdicts_and_weights(secured, admin):
    """An executor consumes requests, dead-letters garbage, reports done and beats; a verdict,
    the policy pointer and weights are refused, and the refusal is logged with the subject."""
    executor = await login(secured, "executor")
    try:
        await admin.publish(subjects.EXEC_REQUESTS, REQUEST, msg_id="r1")
        await admin.nc.publish(subjects.EXEC_REQUESTS, b"\x93garbage")

        async def handle(req, delivery):
            done = ExecutionDone(request=req, result=ExecutionResult(status="ok"),
                                 executor="executor-1")
            await executor.publish(subjects.EXEC_DONE, done, msg_id=req.request_id)

        async def finished() -> bool:
            states = await admin.stream_states([subjects.STREAM_EXEC_DONE, subjects.STREAM_DLQ])
            return all(st.messages == 1 for st in states)

        await serve_until(executor, subjects.CONSUMER_EXEC, ExecutionRequest, handle, finished,
                          "one done and one dead letter")
        await heartbeat(executor)
        assert await admin.kv_get(subjects.BUCKET_ACTORS, "executor.executor-1", Heartbeat)
        assert executor.watch.denied == {}, "the executor's real work needed nothing it lacks"
        with capture_logs() as logs:
            with pytest.raises(PermissionDenied, match="whet.v1.verdicts.train"):
                await executor.publish(subjects.verdict_subject("train"), VERDICT, msg_id="v1")
            with pytest.raises(PermissionDenied, match="whet-policy"):
                await executor.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                                      WeightVersion(version=9, object_name="x"))
            with pytest.raises(PermissionDenied, match="whet-weights"):
                with anyio.fail_after(10):
                    await put_object(executor, subjects.BUCKET_WEIGHTS, "v9", b"w" * 1000)
        refused = [e for e in logs if e["event"] == "bus.permission_denied"]
        assert "whet.v1.verdicts.train" in {e["subject"] for e in refused}
        assert any("kv_whet-policy" in e["subject"] for e in refused)
        assert any(e["subject"].startswith("$o.whet-weights.") for e in refused)
        (verdicts,) = await admin.stream_states([subjects.STREAM_VERDICTS])
        assert verdicts.messages == 0
        assert await admin.kv_get(subjects.BUCKET_POLICY, subjects.KEY_POLICY, WeightVersion) is None
    finally:
        await executor.close()


@pytest.mark.bus
async def test_generator_is_refused_verdicts_but_reads_weights_and_publishes_attempts(secured, admin):
    """A generator gets weights and its task, publishes attempts, and may not publish a verdict."""
    await admin.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                       WeightVersion(version=1, object_name="v1"))
    await put_object(admin, subjects.BUCKET_WEIGHTS, "v1", b"weights" * 1000)
    await admin.publish(subjects.TASKS, SAMPLE["TaskAssignment"], msg_id="a")
    generator = await login(secured, "generator")
    try:
        async for version in generator.kv_watch(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                                                WeightVersion):
            assert version.version == 1
            break
        assert await get_object(generator, subjects.BUCKET_WEIGHTS, "v1") == b"weights" * 1000
        attempts = []

        async def handle(task: TaskAssignment, delivery):
            attempt = SAMPLE["Attempt"]
            await generator.publish(subjects.ATTEMPTS, attempt, msg_id=attempt.attempt_id)
            attempts.append(attempt)

        await serve_until(generator, subjects.CONSUMER_TASKS, TaskAssignment, handle,
                          lambda: bool(attempts), "an attempt published")
        await heartbeat(generator)
        assert generator.watch.denied == {}
        with capture_logs() as logs:
            with pytest.raises(PermissionDenied, match="verdicts"):
                await generator.publish(subjects.verdict_subject("eval"), VERDICT, msg_id="v2")
        assert [e["subject"] for e in logs if e["event"] == "bus.permission_denied"] == [
            "whet.v1.verdicts.eval"]
    finally:
        await generator.close()


@pytest.mark.bus
async def test_judge_learner_and_monitor_do_their_work_unrefused(secured, admin):
    """The owners of verdicts and weights can publish them, the learner writes its step
    records and watches the evaluator's state; the monitor reads the state of every stream,
    the events and heartbeats, and writes trials and its snapshot."""
    judge = await login(secured, "judge")
    learner = await login(secured, "learner")
    monitor = await login(secured, "monitor")
    try:
        await judge.publish(subjects.verdict_subject("train"), VERDICT, msg_id="v1")
        await judge.publish(subjects.EXEC_REQUESTS, REQUEST, msg_id="r1")
        await announce(learner, WeightVersion(version=2, object_name="v2"))  # both its keys
        assert (await recorded_version(admin, 2)).object_name == "v2"
        await put_object(learner, subjects.BUCKET_WEIGHTS, "v2", b"x" * 3_000_000)
        await put_object(learner, subjects.BUCKET_WEIGHTS, "v2", b"y" * 10)  # purges the old chunks
        assert "v2" in await list_objects(learner, subjects.BUCKET_WEIGHTS)  # pruning lists them
        await learner.kv_put(subjects.BUCKET_RUN, subjects.step_key(1),
                             StepRecord(step=1, policy_version=2, trained_at=1.0))
        await admin.kv_put(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE,
                           EvaluatorState(last_reported=2))
        async for state in learner.kv_watch(subjects.BUCKET_RUN, subjects.KEY_EVALUATOR_STATE,
                                            EvaluatorState):  # the hold for a round
            assert state.last_reported == 2
            break
        await monitor.stream_states(subjects.WORK_STREAMS + [subjects.STREAM_TRIALS])
        await monitor.kv_items(subjects.BUCKET_ACTORS, Heartbeat)
        await monitor.kv_put(subjects.BUCKET_RUN, subjects.KEY_METRICS, MetricsSnapshot(at=1.0))
        trial = SAMPLE["Trial"]
        await monitor.publish(subjects.trial_subject("r", trial.trial_id), trial, msg_id="t1")
        async for _ in monitor.replay(subjects.STREAM_EVENTS, subjects.event_filter(), Event,
                                      follow=False):
            pass
        # A full verdict stream: the judge purges what every reader has acked.
        await admin.ensure_consumer(subjects.CONSUMER_LEARNER)
        sub = await admin.js.pull_subscribe_bind(subjects.CONSUMER_LEARNER.durable,
                                                 subjects.STREAM_VERDICTS)
        for m in await sub.fetch(1, timeout=5):
            await m.ack_sync()
        assert await judge.reclaim_consumed(subjects.STREAM_VERDICTS) == 1
        for bus in (judge, learner, monitor):
            await heartbeat(bus)
            assert bus.watch.denied == {}, f"{bus.identity.kind} was refused {bus.watch.denied}"
        with pytest.raises(PermissionDenied):
            await monitor.publish(subjects.verdict_subject("train"), VERDICT, msg_id="v3")
    finally:
        for bus in (judge, learner, monitor):
            await bus.close()


@pytest.mark.bus
async def test_wrong_password_is_refused_at_connect(secured):
    """A bad password fails at once with an authorization error, not after retries."""
    server, _ = secured
    started = time.monotonic()
    with pytest.raises(PermissionDenied, match="refused the login of user executor"):
        await Bus.connect(bus_settings(server.url, user="executor", password="nope"),
                          Identity("executor", "x"))
    assert time.monotonic() - started < 5


@pytest.mark.bus
async def test_tls_with_a_self_signed_certificate(tmp_path):
    """With a certificate configured the server speaks TLS: a client trusting it connects and
    publishes as its role; one that does not trust it is refused at once, saying why."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=whet-test", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    tls = msgspec.structs.replace(AUTH, tls_cert_file=str(cert), tls_key_file=str(key))
    passwords = credentials.ensure_passwords(tmp_path / "secrets")
    server = EmbeddedServer(tmp_path / "nats", max_file_store_mb=STORE_MB,
                            extra_config=auth.tls_config(tls)
                            + auth.server_config(tls, passwords))
    server.start()
    try:
        trusted = bus_settings(server.url, user="admin", password=passwords["admin"],
                               tls_ca_file=str(cert))
        bus = await Bus.connect(trusted, Identity("cli", "c"))
        await bus.ensure_topology(topology(RunConfig()))
        await bus.publish(subjects.TASKS, SAMPLE["TaskAssignment"], msg_id="a")
        await bus.close()
        untrusted = bus_settings(server.url, user="admin", password=passwords["admin"],
                                 connect_timeout_s=2.0)
        with pytest.raises(TlsFailed, match="not trusted by the system's CAs: self-signed"):
            await Bus.connect(untrusted, Identity("cli", "c"))
    finally:
        server.kill()


@pytest.mark.stack
async def test_stack_with_auth_logs_each_actor_in_as_its_role(tmp_path):
    """`whet up` with [auth] on: the embedded server gets per-run passwords (files 0600, in no
    log), the probe works as an executor, its verdict is refused and the refusal is an event;
    `whet status` logs in as admin from the run's secrets."""
    from tests.conftest import Stack
    from tests.test_runtime import PROBE, all_done, ready_probes, request

    stack = Stack(tmp_path, "", PROBE.format(n=1), "")
    stack.config.write_text(f'[run]\nname = "t"\nruns_dir = "{tmp_path / "runs"}"\n'
                            + PROBE.format(n=1).replace("probe = 1", "probe = 1\nmonitor = 1")
                            + '[monitor]\nprometheus_port = 0\nsnapshot_s = 0.3\n'
                            + '[auth]\nenabled = true\nroles = { probe = "executor" }\n')
    for var in ("WHET_NATS_URL", "WHET_NATS_USER", "WHET_NATS_PASSWORD", "WHET_NATS_TOKEN"):
        stack.env.pop(var, None)
    stack.start()
    try:
        secrets = stack.run_dir / "secrets"
        assert {p.name for p in secrets.iterdir()} == set(auth.roles())
        assert all(p.stat().st_mode & 0o777 == 0o600 for p in secrets.iterdir())
        assert (stack.run_dir / "nats" / "nats-server.conf").stat().st_mode & 0o777 == 0o600
        url = (stack.run_dir / "nats.url").read_text().strip()
        anonymous = bus_settings(url, connect_timeout_s=2.0)
        with pytest.raises((PermissionDenied, BusUnavailable)):
            await Bus.connect(anonymous, Identity("cli", "c"))
        admin = await Bus.connect(bus_settings(url, user="admin",
                                               password=(secrets / "admin").read_text().strip()),
                                  Identity("cli", "c"))
        try:
            await ready_probes(admin, 1)
            rogue = msgspec.structs.replace(request(0, 0), request_id="rogue",
                                            job=Job(command=["verdict"]))
            await admin.publish(subjects.EXEC_REQUESTS, rogue, msg_id="rogue")
            await admin.publish(subjects.EXEC_REQUESTS, request(1, 0.0), msg_id="r1")
            done = {d.request.request_id: d for d in await all_done(admin, 2, timeout_s=30)}
            assert "refused: the server refused whet.v1.verdicts.train" in done["rogue"].result.stdout
            assert done["r1"].executor == "probe-1"

            async def refusals() -> list[Event]:
                return [ev async for _, ev, _ in admin.replay(
                    subjects.STREAM_EVENTS, subjects.event_filter(), Event, follow=False)
                    if ev is not None and ev.event == "bus.permission_denied"]

            await until(refusals, 10, "a bus.permission_denied event")
            (event,) = await refusals()
            assert event.fields["subject"] == "whet.v1.verdicts.train"
            assert event.fields["user"] == "executor" and event.instance == "probe-1"
            await admin.publish(subjects.verdict_subject("train"), VERDICT, msg_id="v1")
            async def trials() -> int:
                return (await admin.stream_states([subjects.STREAM_TRIALS]))[0].messages

            async def monitored() -> bool:  # the monitor, logged in as monitor, did all its work
                snapshot = await admin.kv_get(subjects.BUCKET_RUN, subjects.KEY_METRICS,
                                              MetricsSnapshot) or MetricsSnapshot(at=0)
                return bool(await trials()) and snapshot.verdicts >= 1

            await until(monitored, 20, "a trial written and a metrics snapshot counting the verdict")
            assert await trials() == 1 and len(await refusals()) == 1, "no other actor was refused"
        finally:
            await admin.close()
        status = stack.whet("status", "--json")
        assert status.returncode == 0, status.stderr
        assert [a["instance"] for a in json.loads(status.stdout)["actors"]
                if a["kind"] == "probe"] == ["probe-1"]
    finally:
        stack.stop()
    logs = "".join(p.read_text(errors="replace") for p in stack.run_dir.rglob("*")
                   if p.is_file() and p.suffix in (".jsonl", ".out", ".log"))
    for role_file in secrets.iterdir():
        assert role_file.read_text().strip() not in logs, f"{role_file.name}'s password was logged"
