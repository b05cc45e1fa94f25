"""The learner's spare cores: train with every core while nothing else on the box has work.

Consumes the work streams' consumer state (`Bus.stream_states`): the generators' task,
round and turn consumers and the executors' job consumer. Produces the thread count the
learner trains on (`SpareCores.wanted`), read before each micro-batch and each decoder
layer's forward and backward (`switch_points`): every core this process may use while none
of those consumers has a message pending or held, else its own share (`supervisor.threads`).
`lower()` drops back at once, until a poll begun after it finds the others idle again: the
learner calls it on publishing weights, which hands the generators work. One host, one rank,
`[learner] spare_cores` on (off by default: no gain measured on 2 cores); it reads no other
host's load and changes no other process.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import anyio
import structlog

from bus import subjects

log = structlog.get_logger("learner")

WATCHED = {subjects.STREAM_TASKS: subjects.CONSUMER_TASKS.durable,
           subjects.STREAM_ROUNDS: subjects.CONSUMER_ROUNDS.durable,
           subjects.STREAM_TURNS: subjects.CONSUMER_TURNS.durable,
           subjects.STREAM_EXEC: subjects.CONSUMER_EXEC.durable}
"Stream -> the durable consumer whose pending or held messages mean another actor has work."


def for_learner(lc: Any, trainer: Any) -> SpareCores | None:
    """The share for a learner whose `[learner]` section is `lc`, wired into its rank-0
    `trainer` (read before each micro-batch); None unless `spare_cores` is on, it trains on
    the CPU with one rank, and more cores are usable than its own threads."""
    import torch

    base, most = torch.get_num_threads(), usable_cores()
    if not lc.spare_cores or lc.device != "cpu" or lc.world_size != 1 or most <= base:
        return None
    share = SpareCores(base, most)
    if trainer is not None:
        trainer.threads = lambda: share.wanted
        trainer.layers_hooked = switch_points(trainer.engine.module, trainer._take_threads)
    log.info("learner.spare_cores", threads=base, most=most)
    return share


def switch_points(model: Any, take: Callable[[], None]) -> int:
    """Call `take()` (which sets the calling thread's torch threads) before each decoder
    layer's forward and, through a hook on its input, before its backward: a step can take
    or give back the cores a few dozen times, not only between micro-batches. On the CPU
    the backward runs in the thread that called it. Returns the layers hooked (0 where no
    module's class name ends in "DecoderLayer")."""
    import torch

    def grad_hook(grad: Any) -> None:
        take()

    def pre_hook(module: Any, args: tuple) -> None:
        take()
        if args and isinstance(args[0], torch.Tensor) and args[0].requires_grad:
            args[0].register_hook(grad_hook)

    layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    for layer in layers:
        layer.register_forward_pre_hook(pre_hook)
    return len(layers)


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cores


class SpareCores:
    """The thread count for the learner's next micro-batch: `most` while the watched
    consumers are idle, `base` otherwise or until `watch` has polled once."""

    def __init__(self, base: int, most: int) -> None:
        self.base, self.most = base, max(base, most)
        self.wanted = base
        "Threads for the next micro-batch (read from the training thread)."
        self.lowered_at = 0.0
        self.raised = 0
        "Times the learner went from `base` to `most` threads."

    def lower(self) -> None:
        """Back to `base` now: another actor is about to get work."""
        self.lowered_at = time.monotonic()
        self.wanted = self.base

    def observe(self, busy: int, polled_at: float) -> None:
        """One poll's finding, `busy` messages pending or held, from a poll begun at `polled_at`
        (monotonic); a poll begun before the last `lower()` cannot raise the count."""
        if busy:
            self.wanted = self.base
        elif polled_at > self.lowered_at and self.wanted != self.most:
            self.wanted = self.most
            self.raised += 1

    async def watch(self, bus: Any, every_s: float = 0.5) -> None:
        """Poll the watched consumers until cancelled; a failed poll counts as busy."""
        while True:
            began = time.monotonic()
            try:
                states = await bus.stream_states(list(WATCHED))
                busy = sum(c["pending"] + c["in_flight"] for st in states
                           for name, c in st.consumers.items() if WATCHED.get(st.name) == name)
            except Exception as exc:  # noqa: BLE001 - a poll lost in an outage: stay modest
                log.debug("learner.spare_cores_unknown", error=repr(exc))
                busy = 1
            self.observe(busy, began)
            await anyio.sleep(every_s)
