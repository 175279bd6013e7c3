"""``Placement.balanced``: where a fresh ``sniper train`` job puts its variables.

Hashing names to ps evens out the number of variables, not their work; the balanced placement
spreads their signs per batch, then their rows, and leaves a variable on its hashed ps when
moving it evens nothing.
"""

from __future__ import annotations

import pytest

from sniper.data import load_workload
from sniper.hashing import ps_for_variable
from sniper.placement import Placement, placement_load

Costs = dict[str, tuple[int, int]]


def _costs(workload: str) -> Costs:
    return {v.name: (v.signs_per_batch, v.vocabulary) for v in load_workload(workload).variables}


def _loads(placement: Placement, costs: Costs, which: int) -> list[int]:
    """Each ps's total of cost ``which`` (0: signs per batch, 1: rows)."""
    loads = [0] * placement.num_ps
    for name, cost in costs.items():
        loads[placement.owner(name)] += cost[which]
    return loads


def _spread(loads: list[int]) -> float:
    """The busiest ps's load against an even share."""
    return max(loads) / (sum(loads) / len(loads))


@pytest.mark.parametrize("num_ps", [2, 3, 4])
def test_balanced_spreads_seed_ctrs_signs_as_evenly_as_its_largest_variable_allows(
    num_ps: int,
) -> None:
    costs = _costs("seed_ctr")
    placement = Placement.balanced(costs, num_ps)
    even = sum(signs for signs, _ in costs.values()) / num_ps
    largest = max(signs for signs, _ in costs.values())
    # No placement does better than an even share, nor than the largest variable alone.
    assert max(_loads(placement, costs, 0)) <= 1.01 * max(even, largest)
    assert _spread(_loads(Placement(num_ps), costs, 0)) > 1.45  # what hashing gives
    assert placement.version == 1
    assert all(ps != ps_for_variable(name, num_ps) for name, ps in placement.owners.items())
    assert set(costs) >= set(placement.owners)
    assert Placement.balanced(dict(reversed(costs.items())), num_ps) == placement


@pytest.mark.parametrize("num_ps", [2, 4])
def test_balanced_splits_variables_of_equal_signs_by_their_rows(num_ps: int) -> None:
    costs = _costs("criteo")  # 26 variables of one sign per example, 4 to 10M rows
    placement = Placement.balanced(costs, num_ps)
    assert _spread(_loads(placement, costs, 1)) < 1.25
    assert _spread(_loads(Placement(num_ps), costs, 1)) > 1.8
    assert _spread(_loads(placement, costs, 0)) <= _spread(_loads(Placement(num_ps), costs, 0))


def test_a_variable_moves_off_its_hashed_ps_only_to_even_the_load() -> None:
    names = [f"v{i}" for i in range(40)]
    homes = {name: ps_for_variable(name, 2) for name in names}
    first = next(n for n in names if homes[n] == 0)
    second = next(n for n in names if homes[n] == 1)
    # Equal work on different hashed ps: both stay home, the placement is pure hashing.
    assert Placement.balanced({first: (10, 5), second: (10, 5)}, 2) == Placement(2)
    assert Placement.balanced({name: (0, 0) for name in names}, 2) == Placement(2)
    assert Placement.balanced({first: (10, 5)}, 1) == Placement(1)
    # Two heavy variables hashed to one ps: one of them moves.
    third = next(n for n in names if homes[n] == 0 and n != first)
    moved = Placement.balanced({first: (10, 5), third: (10, 5)}, 2)
    assert moved.version == 1 and len(moved.owners) == 1
    assert {moved.owner(first), moved.owner(third)} == {0, 1}


def test_placement_load_counts_each_ps_variables_and_signs() -> None:
    names = [f"v{i}" for i in range(8)]
    signs = {name: 10 * (i + 1) for i, name in enumerate(names)}
    placement = Placement(2, {names[0]: 1 - ps_for_variable(names[0], 2)}, 1)
    load = placement_load(signs, placement)
    expected = [(0, 0), (0, 0)]
    for name, count in signs.items():
        ps = placement.owner(name)
        expected[ps] = (expected[ps][0] + 1, expected[ps][1] + count)
    assert load == expected
    assert sum(n for n, _ in load) == len(names) and sum(s for _, s in load) == sum(signs.values())
    assert placement_load({}, Placement(3)) == [(0, 0)] * 3
