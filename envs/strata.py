"""Stratified choice of evaluation tasks: seats shared by rung and program family.

Consumes tasks (and, while gating, what the gates said of some of them); produces a domain's
fixed choice: its seats shared among its strata (rung x family) in proportion to their sizes
in the split (largest remainder), each stratum's tasks taken in the order of a salted hash of
their content ids (`order_key`), so the choice is the same every round and every run, does not
depend on the input order, and no rung comes first. A rejected task's seat goes to the next
task of its stratum; only a stratum with no usable task left gives seats to the others. It
gates nothing and publishes nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TypeVar

from bus.messages import Task

Stratum = tuple[int, str]
"(rung, family) of a task."
K = TypeVar("K", bound=Hashable)


def rung_of(task: Task) -> int:
    """The task's rung on its environment's ladder: its difficulty rounded down (the sampler's
    curriculum reads it the same way)."""
    return int(task.difficulty)


def stratum_of(task: Task) -> Stratum:
    """The stratum a task is drawn from: its rung and its program family ('' if none)."""
    return rung_of(task), task.family


def order_key(task: Task) -> str:
    """Where a task stands in its stratum: a hash of its content id, salted so that the order
    is unrelated both to the id's text (which starts with the rung) and to the split buckets."""
    return hashlib.sha256(f"whet.heldout-order|{task.task_id}".encode()).hexdigest()


def allocate(sizes: Mapping[K, int], seats: int) -> dict[K, int]:
    """`seats` (at most the sum of `sizes`) shared in proportion to `sizes` by largest
    remainder: each key gets the whole part of its quota, and the seats left go to the largest
    remainders (ties: the larger size, then the smaller key). No key gets more than its size."""
    total = sum(sizes.values())
    seats = max(0, min(seats, total))
    if not total:
        return {k: 0 for k in sizes}
    out = {k: seats * n // total for k, n in sizes.items()}
    rest = sorted(sizes, key=lambda k: (-(seats * sizes[k] % total), -sizes[k], k))
    for k in rest[:seats - sum(out.values())]:
        out[k] += 1
    return out


def strata(tasks: Iterable[Task]) -> dict[Stratum, list[Task]]:
    """Tasks by stratum, each in `order_key` order (a task id seen twice counts once)."""
    unique = {t.task_id: t for t in tasks}
    out: dict[Stratum, list[Task]] = {}
    for task in sorted(unique.values(), key=order_key):
        out.setdefault(stratum_of(task), []).append(task)
    return dict(sorted(out.items()))


def choose(groups: Mapping[Stratum, list[Task]], seats: int,
           usable: Callable[[Task], bool] = lambda task: True) -> list[Task]:
    """`seats` tasks of `groups` (from `strata`), in `order_key` order: each stratum's share
    by `allocate` over the strata's sizes, filled by its first usable tasks. A stratum with
    fewer usable tasks than its share gives the rest to the strata that have more, again in
    proportion to their sizes, until every seat is filled or no usable task is left."""
    ok = {k: [t for t in ts if usable(t)] for k, ts in groups.items()}
    share = allocate({k: len(ts) for k, ts in groups.items()}, seats)
    while True:
        short = sum(max(0, n - len(ok[k])) for k, n in share.items())
        share = {k: min(n, len(ok[k])) for k, n in share.items()}
        room = {k: len(groups[k]) for k in groups if len(ok[k]) > share[k]}
        if not short or not room:
            break
        for k, n in allocate(room, short).items():
            share[k] += n
    return sorted((t for k, n in share.items() for t in ok[k][:n]), key=order_key)
