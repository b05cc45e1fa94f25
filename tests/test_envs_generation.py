"""Generators: tasks in bulk across the ladder, varied, deterministic, in the verifier formats."""

from __future__ import annotations

import collections
import json

import pytest

from envs import registry
from envs.config import EnvEntry
from envs.environment import generate
from envs.evaluation import pick_heldout
from envs.gates import validity_problems
from envs.mutants import json_mutants, python_mutants
from envs.strata import allocate, stratum_of

pytestmark = pytest.mark.unit

GENERATED = ("python_functions", "data_scripts", "structured_output")
KIND = {"python_functions": "python_io", "data_scripts": "script_io",
        "structured_output": "structured"}


@pytest.mark.parametrize("name", GENERATED)
def test_each_environment_fills_every_rung_with_valid_distinct_tasks(name):
    """300 tasks spread over every rung, all distinct, complete records of the right kind."""
    env = registry.resolve(name, EnvEntry())
    tasks = list(generate(env, 300, seed=3))
    assert len(tasks) == 300
    assert len({t.task_id for t in tasks}) == 300
    assert len({t.prompt for t in tasks}) == 300
    rungs = collections.Counter(int(t.difficulty) for t in tasks)
    assert set(rungs) == set(range(env.levels)) and min(rungs.values()) >= 300 // env.levels - 1
    for task in tasks:
        assert task.verifier.kind == KIND[name]
        assert validity_problems(task) == [], task.task_id
        assert task.env == name and task.domain == env.domain and task.split == "train"


@pytest.mark.parametrize("name", GENERATED)
def test_generation_is_not_monotonous(name):
    """Many families, openers and closing lines: no single format dominates."""
    env = registry.resolve(name, EnvEntry())
    tasks = list(generate(env, 200, seed=1))
    openers = collections.Counter(t.prompt.split()[0] + " " + t.prompt.split()[1] for t in tasks)
    closers = collections.Counter(t.prompt.strip().splitlines()[-1] for t in tasks)
    assert len(openers) >= 4 and max(openers.values()) < 0.5 * len(tasks), openers
    assert len(closers) >= 3 and max(closers.values()) < 0.6 * len(tasks), closers
    if name == "python_functions":
        names = {t.entry_point for t in tasks}
        assert len(names) >= 40, names


@pytest.mark.parametrize("name", GENERATED)
def test_generation_is_deterministic_in_the_seed(name):
    """The same seed gives the same tasks; another seed gives others."""
    env = registry.resolve(name, EnvEntry())
    first = [t.task_id for t in generate(env, 20, seed=7)]
    assert first == [t.task_id for t in generate(env, 20, seed=7)]
    assert set(first).isdisjoint(t.task_id for t in generate(env, 20, seed=8))


@pytest.mark.parametrize("name", GENERATED)
def test_generated_tasks_carry_the_family_that_made_them(name):
    """Every generated task names its program family (held-out sets are drawn by it), and a
    rung has more than one family somewhere on the ladder."""
    tasks = list(generate(registry.resolve(name, EnvEntry()), 120, seed=1))
    assert all(t.family for t in tasks)
    by_rung = collections.defaultdict(set)
    for t in tasks:
        by_rung[int(t.difficulty)].add(t.family)
    assert max(map(len, by_rung.values())) > 1


def test_heldout_share_is_stable_and_about_right():
    """The held-out split is a content property: the same tasks, about the asked share."""
    env = registry.resolve("python_functions", EnvEntry())
    tasks = list(generate(env, 400, seed=2, heldout_share=0.25))
    held = {t.task_id for t in tasks if t.split == "heldout"}
    assert 0.15 * 400 < len(held) < 0.35 * 400
    again = {t.task_id for t in generate(env, 400, seed=2, heldout_share=0.25)
             if t.split == "heldout"}
    assert held == again


def test_a_validation_share_moves_no_task_into_or_out_of_the_heldout_set():
    """Adding a validation share takes it from the training tasks: the held-out set stays the
    same tasks, and validation tasks are about the asked share."""
    env = registry.resolve("python_functions", EnvEntry())
    plain = list(generate(env, 400, seed=2, heldout_share=0.25))
    split = list(generate(env, 400, seed=2, heldout_share=0.25, validation_share=0.25))
    assert [t.task_id for t in plain] == [t.task_id for t in split]
    assert ({t.task_id for t in plain if t.split == "heldout"}
            == {t.task_id for t in split if t.split == "heldout"})
    validation = [t for t in split if t.split == "validation"]
    assert 0.15 * 400 < len(validation) < 0.35 * 400
    assert all(p.split == "train" for p, s in zip(plain, split) if s.split == "validation")
    picked = pick_heldout(split, 10, "validation")["python"]
    assert len(picked) == 10 and all(t.split == "validation" for t in picked)


def test_a_domain_named_in_domain_tasks_gets_its_own_count_still_stratified():
    """`[evaluator] domain_tasks` shrinks one domain's round; its smaller choice is shared by
    rung and family in proportion too, and the other domains' choices do not move."""
    py = registry.resolve("python_functions", EnvEntry())
    data = registry.resolve("data_scripts", EnvEntry())
    tasks = [*generate(py, 300, seed=3, heldout_share=0.3),
             *generate(data, 300, seed=3, heldout_share=0.3)]
    full = pick_heldout(tasks, 20)
    small = pick_heldout(tasks, 20, domain_tasks={"python": 5})
    assert len(full["python"]) == 20 and len(small["python"]) == 5
    sizes = collections.Counter(stratum_of(t) for t in tasks
                                if t.domain == "python" and t.split == "heldout")
    assert collections.Counter(map(stratum_of, small["python"])) == {
        k: n for k, n in allocate(sizes, 5).items() if n}
    assert small["data"] == full["data"] and len(small["data"]) == 20


def test_expected_values_match_the_reference():
    """python_io expected values are what the reference returns for those arguments."""
    env = registry.resolve("python_functions", EnvEntry())
    for task in generate(env, 30, seed=4):
        scope: dict = {}
        exec(task.verifier.reference, scope)
        fn = scope[task.entry_point]
        for case in json.loads(task.verifier.hidden):
            assert fn(*case["args"]) == case["expected"], task.task_id


def test_python_mutants_cover_every_operator_and_name_the_line():
    """Operator swaps, off-by-one, constant changes and dropped statements, each located."""
    source = ("def f(xs, k):\n    \"\"\"Doc.\"\"\"\n    out = []\n    for x in range(len(xs)):\n"
              "        if xs[x] > k and not x == 2:\n            out.append(xs[x] * 3)\n"
              "    return out\n")
    mutants = python_mutants(source)
    kinds = collections.Counter(m.operator for m in mutants)
    assert set(kinds) == {"operator_swap", "off_by_one", "constant_change", "dropped_statement"}
    described = {m.description for m in mutants}
    assert "line 5: '>' -> '>='" in described
    assert "line 6: 3 -> 4" in described
    assert any(d.startswith("line 6: dropped `out.append") for d in described)
    assert not any("Doc." in d for d in described)  # docstrings are not mutated
    assert len({m.source for m in mutants}) == len(mutants)
    for m in mutants:
        compile(m.source, "<mutant>", "exec")
    limited = python_mutants(source, limit=4)
    assert len(limited) == 4 and len({m.operator for m in limited}) == 4


def test_json_mutants_change_values_and_drop_keys():
    """Each value changed and each key and last list item dropped, with a path."""
    mutants = json_mutants('{"a": 1, "b": [true, "xy"], "c": {"d": null}}')
    described = {m.description for m in mutants}
    assert {"$.a: 1 -> 2", "$.b[0]: True -> False", "$.b[1]: 'xy' -> 'x'", "$.c: key dropped",
            "$.b[1]: last item dropped", "$.c.d: null -> 0"} <= described
    assert all(json.loads(m.source) != {"a": 1, "b": [True, "xy"], "c": {"d": None}}
               for m in mutants)
