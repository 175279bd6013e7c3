"""The placement's value types: the versioned :class:`Placement` table, and a :class:`Move`.

By default a variable lives on ``ps_for_variable(name, num_ps)``: every role computes the same
owner from the name alone, with nothing to agree on. A variable placed elsewhere has its owner
written in :attr:`Placement.owners`, and the table's :attr:`~Placement.version` goes up by one
per change. Two things place variables elsewhere: a fresh ``sniper train`` job starts from
:meth:`Placement.balanced` (hashing evens out the number of variables, not their work: on
seed_ctr one of 2 ps holds 74% of the signs), and auto_shard moves variables off a busy ps while
it trains. The trainer decides a move; hubs and the trainer switch to the new table at a batch
boundary (see ``sniper.roles.AutoShard``). The table travels as the ``Placement`` message of
``sniper.rpc`` (which converts it) and in a job checkpoint (:meth:`Placement.to_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sniper.placement._balanced import balanced_owners
from sniper.placement._hash import hashed_owner

__all__ = ["Move", "Placement"]


@dataclass(frozen=True)
class Placement:
    """Owners of variables on ``num_ps`` ps: by name hash, except ``owners``."""

    num_ps: int
    owners: Mapping[str, int] = field(default_factory=dict)
    """Variables placed away from their hashed ps, by auto_shard."""
    version: int = 0
    """0 for pure hashing; one more per move."""

    def __post_init__(self) -> None:
        if self.num_ps < 1:
            raise ValueError(f"a placement needs at least one ps, got num_ps={self.num_ps}")
        bad = {name: ps for name, ps in self.owners.items() if not 0 <= ps < self.num_ps}
        if bad:
            name, ps = next(iter(bad.items()))
            raise ValueError(
                f"placement puts variable {name!r} on ps {ps}, but there are {self.num_ps} ps"
            )

    @classmethod
    def balanced(cls, costs: Mapping[str, tuple[int, int]], num_ps: int) -> Placement:
        """Variables spread so that every ps gets about the same work: ``costs`` gives each
        variable's ``(signs per batch, rows)`` (see :func:`balanced_owners`). Version 1 if any
        variable is away from its hashed ps (hubs start by hashing and switch to it), else 0.
        """
        owners = balanced_owners(costs, num_ps)
        return cls(num_ps, owners, 1 if owners else 0)

    def owner(self, name: str) -> int:
        """The ps (by index) that holds variable ``name``."""
        placed = self.owners.get(name)
        return placed if placed is not None else hashed_owner(name, self.num_ps)

    def moved(self, name: str, to: int) -> Placement:
        """This placement with ``name`` on ps ``to``: the next version."""
        owners = dict(self.owners)
        if hashed_owner(name, self.num_ps) == to:
            owners.pop(name, None)  # back home: hashing says it again
        else:
            owners[name] = to
        return Placement(self.num_ps, owners, self.version + 1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (a job checkpoint keeps it)."""
        return {"version": self.version, "num_ps": self.num_ps, "owners": dict(self.owners)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Placement:
        return cls(
            int(data["num_ps"]),
            {str(k): int(v) for k, v in dict(data.get("owners", {})).items()},
            int(data.get("version", 0)),
        )


@dataclass(frozen=True)
class Move:
    """One variable from ps ``source`` to ps ``to``, and what it weighed when planned."""

    variable: str
    source: int
    to: int
    cost: float
    """Its kernel seconds in the window that planned the move."""
