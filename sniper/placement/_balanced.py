"""The balanced start: variables spread over the ps by their work, not their number.

Hashing evens out the number of variables, not their work: on seed_ctr one of 2 ps holds 74%
of the signs. A fresh ``sniper train`` job starts from :meth:`~sniper.placement.Placement.balanced`
instead, which places by :func:`balanced_owners`; :func:`placement_load` shows how even a
placement's signs are (``sniper placement``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sniper.placement._hash import hashed_owner

if TYPE_CHECKING:  # the table builds its balanced start from this module
    from sniper.placement._types import Placement

__all__ = ["balanced_owners", "placement_load"]


def balanced_owners(costs: Mapping[str, tuple[int, int]], num_ps: int) -> dict[str, int]:
    """The variables that a balanced placement puts away from their hashed ps, and where:
    ``costs`` gives each variable's ``(signs per batch, rows)``.

    Largest first, each variable goes to the ps with the fewest signs so far, then the
    fewest rows (a probe into a larger table misses the cache more often: criteo's 26
    variables have one sign per example each, and hashing put 86% of their rows on one
    of 2 ps), then its hashed ps: a variable stays home unless moving it evens the load.
    Deterministic: every call with the same costs places the same way.
    """
    loads = [(0, 0)] * num_ps
    owners: dict[str, int] = {}
    for name in sorted(costs, key=lambda n: (-costs[n][0], -costs[n][1], n)):
        home = hashed_owner(name, num_ps)
        ps = min(range(num_ps), key=lambda i: (loads[i], i != home, i))
        signs, rows = costs[name]
        loads[ps] = (loads[ps][0] + signs, loads[ps][1] + rows)
        if ps != home:
            owners[name] = ps
    return owners


def placement_load(signs: Mapping[str, int], placement: Placement) -> list[tuple[int, int]]:
    """Per ps: (variables owned, signs per batch owned)."""
    load = [(0, 0)] * placement.num_ps
    for name, count in signs.items():
        ps = placement.owner(name)
        variables, owned = load[ps]
        load[ps] = (variables + 1, owned + count)
    return load
