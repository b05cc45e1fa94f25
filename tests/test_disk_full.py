"""A full disk under the run folder: what must write (logs, checkpoints) waits or counts what it
could not write, says so in one event, and goes on when space returns; nothing is killed or lost."""

from __future__ import annotations

import pytest

from tests.support.disk import mount_tmpfs, unmount


@pytest.mark.unit
def test_a_full_disk_under_the_log_file_never_raises_and_says_so_once(tmp_path):
    """Log lines that the disk refuses (ENOSPC, from /dev/full) are counted, one
    `log.file_unwritable` event goes to the bus, and when the file takes lines again a
    `log.file_writable` event gives the count; nothing raises into the actor (the supervisor
    died on such a write)."""
    from runtime.log import EventSink

    sink = EventSink("supervisor", "s1", "run", open("/dev/full", "w", buffering=1))
    for i in range(5):
        sink(None, "info", {"event": "x.happened", "i": i})
    notes = [e for e in sink.pending if e.event.startswith("log.")]
    assert sink.unwritten == 5
    assert [(e.event, e.level) for e in notes] == [("log.file_unwritable", "warning")]
    assert "No space left on device" in notes[0].fields["error"]
    sink.file = open(tmp_path / "s1.jsonl", "w", buffering=1)  # space is back
    sink(None, "info", {"event": "x.happened", "i": 5})
    back = [e for e in sink.pending if e.event == "log.file_writable"]
    assert [e.fields["unwritten"] for e in back] == [5] and sink.unwritten == 0
    assert '"i":5' in (tmp_path / "s1.jsonl").read_text()


@pytest.mark.bus
async def test_a_full_disk_pauses_the_learners_checkpoint_until_room_returns(bus, nats_server, tmp_path):
    """The learner's checkpoint folder is a 4 MB filesystem, too small for the tiny model's
    checkpoint: the learner removes what it half wrote, says `learner.disk_full` once, keeps
    the step's verdicts unacked, and runs on; once the filesystem grows (remounted at 256 MB)
    the checkpoint is written, `learner.disk_room_back` follows, and every verdict is acked.
    (It crashed on ENOSPC before: the checkpoint write raised out of the learner.)"""
    import anyio
    from structlog.testing import capture_logs

    from actors import generator, learner
    from bus import subjects
    from tests.test_generator import attempts_on_bus, assignment
    from tests.conftest import until
    from tests.test_learner import second_bus, tiny_run_config, verdict_for

    ckpt = tmp_path / "ckpt"
    mount_tmpfs(ckpt, "4m")
    cfg = tiny_run_config(tmp_path)
    gen_bus, learn_bus = await second_bus(nats_server, "generator"), await second_bus(nats_server, "learner")

    async def pending() -> int:
        info = await bus.js.consumer_info(subjects.STREAM_VERDICTS, subjects.CONSUMER_LEARNER.durable)
        return info.num_ack_pending

    try:
        with capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                await tg.start(learner.run, learn_bus, cfg)
                await tg.start(generator.run, gen_bus, cfg)
                for g in ("g1", "g2"):
                    await bus.publish(subjects.TASKS, assignment(g, 4), msg_id=g)
                for a in await attempts_on_bus(bus, 8):
                    await bus.publish(subjects.verdict_subject("train"),
                                      verdict_for(a, float(a.index % 2)), msg_id=a.attempt_id)
                await until(lambda: learn_bus.stats.gauges.get("learner.disk_full") == 1.0, 120,
                            "the learner's disk_full gauge")
                assert await pending() == 8, "the step's verdicts wait for their checkpoint"
                assert not (ckpt / "latest").exists()
                import subprocess
                subprocess.run(["mount", "-o", "remount,size=256m", str(ckpt)], check=True)
                async def saved_and_acked() -> bool:
                    return (ckpt / "latest").exists() and not await pending()

                await until(saved_and_acked, 120, "the checkpoint written and every verdict acked")
                gen_bus.stopping.set()
                learn_bus.stopping.set()
    finally:
        await gen_bus.close()
        await learn_bus.close()
        unmount(ckpt)
    names = [e["event"] for e in logs]
    assert names.count("learner.disk_full") == 1, names
    assert "learner.disk_room_back" in names
    assert names.index("learner.disk_full") < names.index("learner.disk_room_back")
    assert "learner.crashed" not in names and "actor.crashed" not in names


@pytest.mark.bus
async def test_a_full_disk_pauses_a_two_rank_checkpoint_until_room_returns(bus, nats_server, tmp_path):
    """world_size 2 (a child rank process), ZeRO-2, checkpoints on a 4 MB filesystem: the
    ranks' failed writes meet at DeepSpeed's closing barrier and agree; the learner says
    `learner.disk_full` once and keeps the step's 4 verdicts unacked; after the remount at
    256 MB both shards are written, every verdict is acked, and the step was trained once
    (4 samples). (It raised out of the learner with several ranks before.)"""
    import subprocess

    import anyio
    import msgspec
    from structlog.testing import capture_logs

    from actors import learner
    from bus import subjects
    from tests.conftest import until
    from tests.test_learner import second_bus, tiny_run_config
    from tests.test_learner_crash import synthetic_verdicts

    from policy.model import model_dir

    ckpt = tmp_path / "ckpt"
    mount_tmpfs(ckpt, "4m")
    cfg = tiny_run_config(tmp_path, batch_size=4, group_size=2)
    # The model made once before the ranks start: two ranks making it at once race (one
    # reads the folder while the other writes it) on a machine where it is not cached yet.
    model_dir(cfg.model)
    cfg = msgspec.structs.replace(cfg, learner=msgspec.structs.replace(
        cfg.learner, world_size=2, zero_stage=2, micro_batch_size=1))
    learn_bus = await second_bus(nats_server, "learner")

    async def pending() -> int:
        info = await bus.js.consumer_info(subjects.STREAM_VERDICTS, subjects.CONSUMER_LEARNER.durable)
        return info.num_ack_pending

    async def saved_and_acked() -> bool:
        return (ckpt / "latest").exists() and not await pending()

    try:
        with capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                await tg.start(learner.run, learn_bus, cfg)
                await bus.publish_many(subjects.verdict_subject("train"),
                                       [(v.verdict_id, v) for v in synthetic_verdicts(2)])
                await until(lambda: learn_bus.stats.gauges.get("learner.disk_full") == 1.0, 180,
                            "the learner's disk_full gauge")
                assert await pending() == 4, "the step's verdicts wait for their checkpoint"
                assert not (ckpt / "latest").exists()
                subprocess.run(["mount", "-o", "remount,size=256m", str(ckpt)], check=True)
                await until(saved_and_acked, 180, "the checkpoint written and every verdict acked")
                gauges = dict(learn_bus.stats.gauges)
                learn_bus.stopping.set()
        shards = sorted(p.name[:19] for p in ckpt.glob("step*/*optim_states.pt"))
    finally:
        await learn_bus.close()
        unmount(ckpt)
    names = [e["event"] for e in logs]
    assert names.count("learner.disk_full") == 1, names
    assert names.index("learner.disk_full") < names.index("learner.disk_room_back")
    assert "learner.crashed" not in names and "actor.crashed" not in names
    assert (gauges["step"], gauges["samples"]) == (1, 4)
    assert shards == ["bf16_zero_pp_rank_0", "bf16_zero_pp_rank_1"], shards
