"""envs.intake.FirstAccepted: a domain's first accepted tasks in the listed order, whatever
order the gates finish in."""

from __future__ import annotations

import itertools
import random

import pytest

from bus.messages import Task, Verifier
from envs.intake import FirstAccepted

pytestmark = pytest.mark.unit


def task(domain: str, i: int) -> Task:
    return Task(task_id=f"{domain}/{i:02d}", env="t", env_version="1", domain=domain,
                prompt="p", verifier=Verifier(kind="structured"))


TASKS = [task(d, i) for i in range(10) for d in ("a", "b")]
REJECTED = {"a/01", "a/04", "b/00"}


def released(order: list[Task], limit: int) -> list[str]:
    pool = FirstAccepted(TASKS, limit)
    out = []
    for t in order:
        out += [r.task_id for r in pool.add(t, t.task_id not in REJECTED)]
    return out


def by_domain(ids: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for i in ids:
        out.setdefault(i.split("/")[0], []).append(i)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_any_finishing_order_pools_the_same_tasks_in_the_listed_order(seed):
    """Each domain's pool and its order are the same; only how domains interleave varies."""
    shuffled = random.Random(seed).sample(TASKS, len(TASKS))
    assert by_domain(released(shuffled, 3)) == {"a": ["a/00", "a/02", "a/03"],
                                                "b": ["b/01", "b/02", "b/03"]}


def test_a_task_waits_for_every_report_before_it_in_its_domain():
    pool = FirstAccepted(TASKS, 0)
    assert pool.add(TASKS[4], True) == []  # a/02 waits: a/00 and a/01 are still being gated
    assert [t.task_id for t in pool.add(TASKS[0], True)] == ["a/00"]
    assert [t.task_id for t in pool.add(TASKS[2], False)] == ["a/02"]  # a/01 rejected
    assert pool.add(TASKS[1], False) == []  # b/00 rejected
    assert pool.released == {"a": 2, "b": 0}


def test_gating_goes_on_until_the_first_tasks_are_known_and_stops_there():
    """Tasks after a domain's first `limit` accepted are not fed once those are known,
    however early later tasks finished."""
    pool = FirstAccepted(TASKS, 2)
    fed = pool.gating((t, None) for t in TASKS)
    seen = []
    for t, _ in itertools.islice(fed, 6):  # a/00, b/00, a/01, b/01, a/02, b/02
        seen.append(t.task_id)
        pool.add(t, t.task_id not in REJECTED)
    assert pool.full("a") and pool.full("b")
    assert [t.task_id for t, _ in fed] == []
    assert seen == ["a/00", "b/00", "a/01", "b/01", "a/02", "b/02"]
