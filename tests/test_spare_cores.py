"""The learner's spare cores: it trains with every core only while the generators and
executors have no work, read from a real nats-server's consumer state."""

from __future__ import annotations

import time

import anyio
import pytest

from bus import subjects
from policy.spare_cores import SpareCores
from tests.conftest import until

pytestmark = pytest.mark.bus


def test_a_poll_begun_before_lowering_cannot_raise_the_count():
    share = SpareCores(base=1, most=2)
    assert share.wanted == 1  # nothing polled yet
    share.observe(0, time.monotonic())
    assert (share.wanted, share.raised) == (2, 1)
    before = time.monotonic()
    share.lower()
    share.observe(0, before)  # begun before the weights went out: stale
    assert share.wanted == 1
    share.observe(0, time.monotonic())
    assert (share.wanted, share.raised) == (2, 2)
    share.observe(3, time.monotonic())
    assert share.wanted == 1


@pytest.mark.parametrize("spec", [subjects.CONSUMER_TASKS, subjects.CONSUMER_EXEC])
async def test_the_count_follows_work_pending_and_held(bus, spec):
    """Idle consumers raise it; a message pending, then held unacked, lowers it; acked, it
    rises again."""
    await bus.ensure_consumer(spec)
    share = SpareCores(base=1, most=2)
    async with anyio.create_task_group() as tg:
        tg.start_soon(share.watch, bus, 0.05)
        await until(lambda: share.wanted == 2, 10, "idle consumers did not free the cores")
        subject = subjects.TASKS if spec is subjects.CONSUMER_TASKS else subjects.EXEC_REQUESTS
        await bus.js.publish(subject, b"work", stream=spec.stream)
        await until(lambda: share.wanted == 1, 10, "a pending message left the cores lent")
        sub = await bus.js.pull_subscribe_bind(durable=spec.durable, stream=spec.stream)
        [msg] = await sub.fetch(1, timeout=5)
        await anyio.sleep(0.3)  # several polls: held unacked, it is still work
        assert share.wanted == 1
        await msg.ack()
        await until(lambda: share.wanted == 2, 10, "acked work kept the cores from the learner")
        tg.cancel_scope.cancel()


async def test_the_trainer_runs_each_micro_batch_on_the_threads_it_is_given(tmp_path):
    """The learner wires the share into its trainer (when on, on the CPU with one rank and
    more cores than its own thread); each micro-batch, and each decoder layer within it,
    takes the count it is given."""
    import msgspec
    import numpy as np
    import torch

    from policy.batch import TrainSample
    from policy.ranks import RankGroup
    from policy.spare_cores import for_learner, usable_cores
    from tests.test_learner import tiny_run_config

    # Rows read whole: the four rows below are one micro-batch of one forward and backward
    # (read prompt-wise, each row's own prompt would make it a micro-batch of its own).
    cfg = tiny_run_config(tmp_path)
    cfg = msgspec.structs.replace(cfg, learner=msgspec.structs.replace(
        cfg.learner, shared_prompt=False))
    rng = np.random.default_rng(0)
    samples = [TrainSample(f"v{i}", "g", 0, float(i % 2) * 2 - 1,
                           rng.integers(3, 49152, 12).astype(np.int64),
                           np.r_[np.zeros(4, bool), np.ones(8, bool)],
                           np.full(12, -10.8, np.float32)) for i in range(8)]
    ranks = RankGroup(cfg.trainer, tmp_path / "ckpt")
    await ranks.start()
    started = torch.get_num_threads()
    torch.set_num_threads(1)  # the learner's own share, as the supervisor sets it
    own = 1
    try:
        on = msgspec.structs.replace(cfg.learner, spare_cores=True)
        assert for_learner(cfg.learner, ranks.trainer) is None  # off by default
        share = for_learner(on, ranks.trainer)
        assert (share is None) == (usable_cores() == 1)
        if share is not None:  # wired: the trainer reads the share's count
            share.observe(0, float("inf"))
            assert ranks.trainer.threads() == usable_cores()
        else:  # one core: hook the layers as the share would
            from policy.spare_cores import switch_points

            ranks.trainer.layers_hooked = switch_points(ranks.trainer.engine.module,
                                                        ranks.trainer._take_threads)
        given = [own + 1]
        ranks.trainer.threads = lambda: given[0]
        assert (await ranks.call("train", samples))["threads"] == own + 1
        given[0] = own
        assert (await ranks.call("train", samples))["threads"] == own
        # Within one micro-batch: asked before the micro-batch, then before each decoder
        # layer's forward and backward; the cores come free after the first ask.
        asked = []

        def freed_after_first() -> int:
            asked.append(1)
            return own if len(asked) == 1 else own + 1

        ranks.trainer.threads = freed_after_first
        layers = ranks.trainer.layers_hooked
        assert (await ranks.call("train", samples[:4]))["threads"] == own + 1
        assert layers > 0 and len(asked) == 1 + 2 * layers
    finally:
        torch.set_num_threads(started)
        await ranks.close()


@pytest.mark.parametrize("name", ["spare_cores.json", "spare_cores_per_micro_batch.json"])
def test_the_committed_ratios_follow_from_their_figures(name):
    import json
    from pathlib import Path

    r = json.loads((Path(__file__).resolve().parent.parent / "bench" / "learning" / "results"
                    / name).read_text())
    kept, lent = r["kept"], r["lent"]
    for key, ratio in r["ratios_lent_over_kept"].items():
        assert ratio == pytest.approx(lent[key] / kept[key], abs=1e-3), key
    for run in (kept, lent):  # updates per second: the updates after the first, over their span
        span = run["wall_s"] - run["first_update_wall_s"]
        assert run["steady_updates_per_s"] == pytest.approx((run["steps"] - 1) / span, rel=1e-3)
