"""auto_shard's planner: which variables to move off a busy ps, from what each one cost.

Hashing variables to ps evens out their number, not their work: the seed logs found one ps at
59% CPU while the others idled at 10%. While a job trains, ``sniper.roles.AutoShard`` reads
each variable's store kernel seconds (its lookups and pushes) over a window of steps and asks
:func:`plan_moves` what to do: when the busiest ps's cost exceeds the lightest's by more than
``ratio``, the busiest ps's variable whose cost is nearest half the gap goes to the lightest
ps, as long as that lowers the busier of the two. The planner is pure policy; carrying a move
out (the RPCs, in an order that loses no gradient) is the role's.
"""

from __future__ import annotations

from collections.abc import Mapping

from sniper.placement._types import Move, Placement

__all__ = ["plan_moves", "ps_loads"]


def ps_loads(costs: Mapping[str, float], placement: Placement) -> list[float]:
    """Kernel seconds of each ps: the costs of the variables it holds."""
    loads = [0.0] * placement.num_ps
    for name, cost in costs.items():
        loads[placement.owner(name)] += cost
    return loads


def plan_moves(
    costs: Mapping[str, float],
    placement: Placement,
    ratio: float,
    max_moves: int = 1,
    exclude: frozenset[str] = frozenset(),
) -> list[Move]:
    """Moves that even out the ps' loads, best first; none while within ``ratio``.

    Each move takes the busiest ps's variable whose cost is closest to half the gap to the
    lightest ps, among those lighter than the gap (so the busier of the two gets lighter).
    """
    loads = ps_loads(costs, placement)
    moves: list[Move] = []
    for _ in range(max_moves):
        busiest = max(range(len(loads)), key=loads.__getitem__)
        lightest = min(range(len(loads)), key=loads.__getitem__)
        gap = loads[busiest] - loads[lightest]
        if loads[busiest] <= ratio * loads[lightest] or gap <= 0:
            break
        candidates = [
            (name, cost)
            for name, cost in costs.items()
            if placement.owner(name) == busiest and 0 < cost < gap and name not in exclude
        ]
        if not candidates:
            break
        name, cost = min(candidates, key=lambda item: abs(item[1] - gap / 2))
        moves.append(Move(name, busiest, lightest, cost))
        loads[busiest] -= cost
        loads[lightest] += cost
        placement = placement.moved(name, lightest)
    return moves
