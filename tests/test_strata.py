"""The held-out choice is stratified: seats shared by rung and family in proportion to the
split (largest remainder), the same whatever the input order, not rung 0 first, and a
rejected task replaced from its own stratum."""

from __future__ import annotations

import collections
import random

import msgspec
import pytest

from bus.messages import Task, Verifier
from envs import registry
from envs.config import EnvEntry
from envs.environment import generate
from envs.evaluation import pick_heldout
from envs.strata import allocate, choose, order_key, rung_of, stratum_of, strata

pytestmark = pytest.mark.unit


def _task(i: int, rung: int, family: str, domain: str = "data", split: str = "heldout") -> Task:
    return Task(task_id=f"{domain}/v1-L{rung}-{i:06d}", env=domain, env_version="1",
                domain=domain, prompt=f"p{i}", verifier=Verifier(kind="python_io"),
                split=split, difficulty=float(rung), family=family)  # type: ignore[arg-type]


def _population(sizes: dict[tuple[int, str], int], domain: str = "data") -> list[Task]:
    out, i = [], 0
    for (rung, family), n in sizes.items():
        for _ in range(n):
            out.append(_task(i, rung, family, domain))
            i += 1
    return out


def test_largest_remainder_shares_seats_by_size():
    """10 seats over sizes 5, 3, 2 are 5, 3, 2; 4 seats have quotas 2.0, 1.2 and 0.8, so
    2, 1, 0 and the seat left to the largest remainder (0.8): 2, 1, 1."""
    assert allocate({"a": 5, "b": 3, "c": 2}, 10) == {"a": 5, "b": 3, "c": 2}
    assert allocate({"a": 5, "b": 3, "c": 2}, 4) == {"a": 2, "b": 1, "c": 1}
    assert allocate({"a": 2, "b": 1}, 50) == {"a": 2, "b": 1}  # never more than a stratum holds
    assert allocate({"a": 0}, 3) == {"a": 0} and allocate({}, 3) == {}


def test_ties_of_remainder_go_to_the_larger_stratum_then_the_smaller_key():
    """4 seats over 6, 3, 1: quotas 2.4, 1.2, 0.4, the remainders of 6 and 1 tie at 0.4 and
    the larger stratum gets the seat (3, 1, 0); 1 seat over 2 and 2 goes to key 'a'."""
    assert allocate({"a": 6, "b": 3, "c": 1}, 4) == {"a": 3, "b": 1, "c": 0}
    assert allocate({"b": 2, "a": 2}, 1) == {"a": 1, "b": 0}


def test_each_stratum_gets_its_share_of_a_domain():
    """20 seats over rung-0 (60 tasks: families f 40, g 20) and rung-1 (40 tasks: h) of 100:
    8 f, 4 g and 8 h, each the first of its stratum in the salted hash order."""
    tasks = _population({(0, "f"): 40, (0, "g"): 20, (1, "h"): 40})
    picked = pick_heldout(tasks, 20)["data"]
    assert collections.Counter(stratum_of(t) for t in picked) == {(0, "f"): 8, (0, "g"): 4,
                                                                  (1, "h"): 8}
    groups = strata(tasks)
    for key, n in ((0, "f"), 8), ((0, "g"), 4), ((1, "h"), 8):
        assert [t for t in picked if stratum_of(t) == key] == groups[key][:n]
    assert picked == sorted(picked, key=order_key)


def test_the_pick_does_not_depend_on_the_input_order_or_on_repeats():
    """A shuffled input, or one with a task listed twice, gives the same choice."""
    tasks = _population({(0, "f"): 30, (1, "g"): 25, (2, "h"): 9})
    first = pick_heldout(tasks, 17)
    shuffled = tasks[:]
    random.Random(4).shuffle(shuffled)
    assert pick_heldout(shuffled, 17) == first == pick_heldout(tasks + tasks[:5], 17)


def test_generated_held_out_sets_cover_every_rung_in_proportion():
    """On two rungs of data_scripts (the old id order took every task from rung 0), each rung
    and each family gets its largest-remainder share of 30, and tasks of other splits or
    domains are not taken."""
    env = registry.resolve("data_scripts", EnvEntry())
    tasks = list(generate(env, 240, seed=0, heldout_share=0.3, levels=[0, 1]))
    held = [t for t in tasks if t.split == "heldout"]
    picked = pick_heldout(tasks, 30)
    assert list(picked) == ["data"] and len(picked["data"]) == 30
    sizes = collections.Counter(stratum_of(t) for t in held)
    assert len(sizes) > 4 and all(family for _, family in sizes)
    assert collections.Counter(stratum_of(t) for t in picked["data"]) == {
        k: n for k, n in allocate(sizes, 30).items() if n}
    by_rung = collections.Counter(rung_of(t) for t in picked["data"])
    share0 = sum(n for (r, _), n in sizes.items() if r == 0) / len(held)
    assert abs(by_rung[0] - 30 * share0) <= len(sizes) / 2 and by_rung[1] > 0


def test_a_rejected_task_is_replaced_by_the_next_of_its_stratum():
    """Rejecting two chosen tasks of family g brings in g's next two; every other stratum
    keeps the same tasks."""
    tasks = _population({(0, "f"): 30, (0, "g"): 20, (1, "h"): 50})
    groups = strata(tasks)
    before = choose(groups, 10)
    rejected = {t.task_id for t in before if stratum_of(t) == (0, "g")}
    assert len(rejected) == 2
    after = choose(groups, 10, lambda t: t.task_id not in rejected)
    assert sorted(map(stratum_of, after)) == sorted(map(stratum_of, before))
    assert [t for t in after if stratum_of(t) == (0, "g")] == groups[(0, "g")][2:4]
    assert {t.task_id for t in after} - {t.task_id for t in before} == {
        t.task_id for t in groups[(0, "g")][2:4]}


def test_a_stratum_left_without_usable_tasks_gives_its_seats_to_the_others():
    """Family g (2 of 10 seats) has every task rejected: its seats go to f and h in
    proportion to their sizes (30 and 50: one each), and the choice still has 10 tasks."""
    tasks = _population({(0, "f"): 30, (0, "g"): 20, (1, "h"): 50})
    after = choose(strata(tasks), 10, lambda t: t.family != "g")
    assert collections.Counter(map(stratum_of, after)) == {(0, "f"): 4, (1, "h"): 6}


def test_the_validation_split_is_chosen_the_same_way_and_apart():
    """The validation choice is stratified as the held-out one is, from validation tasks only."""
    tasks = _population({(0, "f"): 20, (1, "h"): 20})
    tasks += [msgspec.structs.replace(t, task_id=t.task_id + "v", split="validation")
              for t in tasks]
    held, valid = pick_heldout(tasks, 10)["data"], pick_heldout(tasks, 10, "validation")["data"]
    assert all(t.split == "heldout" for t in held) and all(t.split == "validation" for t in valid)
    assert collections.Counter(map(rung_of, valid)) == {0: 5, 1: 5}
