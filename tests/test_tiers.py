"""Every test has exactly one tier (pyproject.toml's markers): the collection hook in
tests/conftest.py stops the run naming each test that has none or several."""

from __future__ import annotations

import pytest

from tests.conftest import TIERS, pytest_collection_modifyitems

pytestmark = pytest.mark.unit


class Item:
    """What the hook reads of a collected test: its id and its marks."""

    def __init__(self, nodeid: str, *marks: str) -> None:
        self.nodeid = nodeid
        self.marks = [getattr(pytest.mark, m) for m in marks]

    def iter_markers(self):
        return iter(m.mark for m in self.marks)


def test_one_tier_each_passes():
    pytest_collection_modifyitems(None, [Item(f"t_{tier}", tier, "timeout") for tier in TIERS])


def test_a_test_without_a_tier_or_with_two_stops_the_run_naming_it():
    items = [Item("t_ok", "unit"), Item("t_none", "parametrize"), Item("t_two", "unit", "stack")]
    with pytest.raises(pytest.UsageError) as raised:
        pytest_collection_modifyitems(None, items)
    assert "t_none: no tier" in str(raised.value) and "t_two: ['stack', 'unit']" in str(raised.value)
    assert "t_ok" not in str(raised.value)
