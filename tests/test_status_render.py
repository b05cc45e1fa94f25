"""`whet status` drawn for a thousand actors: one row per kind, and the actors not ready."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from runtime.cli.render import ACTOR_ROWS_MAX, kind_rows, render_status
from runtime.cli.stack_status import ActorRow, StackStatus

pytestmark = pytest.mark.unit


def row(kind: str, i: int, state: str = "ready", beat_age_s: float = 0.5) -> ActorRow:
    return ActorRow(kind=kind, instance=f"{kind}-{i}", pid=100 + i, state=state,
                    beat_age_s=beat_age_s, uptime_s=60.0, processed=i, in_flight=1, per_s=0.5,
                    policy_version=3, stats={})


def drawn(snap: StackStatus) -> str:
    out = io.StringIO()
    render_status(snap, Console(file=out, width=150))
    return out.getvalue()


def test_a_thousand_actors_are_drawn_one_row_per_kind_with_the_unready_listed():
    """1,000 actors: a row per kind with their states added up, each dead actor by name,
    and no row for each ready one."""
    actors = [row("executor", i) for i in range(990)] + [row("judge", i) for i in range(7)]
    actors += [row("judge", 7, "dead", beat_age_s=9.0), row("judge", 8, "dead", beat_age_s=7.0),
               row("judge", 9, "starting")]
    text = drawn(StackStatus(actors=actors))
    assert "ready=990" in text and "dead=2" in text and "starting=1" in text
    assert "judge-7" in text and "judge-8" in text and "judge-9" in text
    assert "executor-5 " not in text and "judge-3 " not in text
    assert "1000 actors: one row per kind" in text
    assert len(text.splitlines()) < 60
    [executors, judges] = kind_rows(actors)
    assert (executors.instances, executors.processed, executors.in_flight) == (990, sum(range(990)), 990)
    assert (judges.instances, judges.oldest_beat_s) == (10, 9.0)


def test_many_unready_actors_are_cut_to_the_limit_and_counted():
    """Past the limit, the actors not ready are cut and the rest counted."""
    actors = [row("executor", i, "dead") for i in range(ACTOR_ROWS_MAX + 15)]
    text = drawn(StackStatus(actors=actors))
    assert f"executor-{ACTOR_ROWS_MAX - 1} " in text and f"executor-{ACTOR_ROWS_MAX} " not in text
    assert "and 15 more not ready" in text


def test_a_small_stack_is_drawn_one_row_per_actor():
    """A few actors keep a row each, ready ones included."""
    text = drawn(StackStatus(actors=[row("executor", 1), row("judge", 2)]))
    assert "executor-1" in text and "judge-2" in text and "one row per kind" not in text
