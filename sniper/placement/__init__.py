"""Placement: which ps holds each variable, and how big its table is.

The policy lives here, apart from the roles that carry it out and the wire that carries it
(``sniper.rpc`` converts a :class:`Placement` to its message; this package imports neither):

- :class:`Placement`, the versioned table, and :class:`Move`, one variable's move (the types);
- :func:`hashed_owner`, where a variable lives by default (its name's hash);
- :meth:`Placement.balanced` (:func:`balanced_owners`), the start of a fresh ``sniper train``
  job, spreading variables by their signs per batch, and :func:`placement_load`, how even a
  placement is;
- :func:`plan_moves` and :func:`ps_loads`, auto_shard's planner, which the trainer's
  ``sniper.roles.AutoShard`` asks while the job trains;
- sizing: :func:`auto_shards`, :func:`auto_capacity` and :func:`counted_capacity` for
  ``shards = 0`` and ``capacity = 0``, :func:`inflight_capacity`, the least rows the batches
  in flight pin, and :func:`shards_for` and :func:`capacity_for` for a
  workload's variable on a benchmark's ps.
"""

from sniper.placement._auto_shard import plan_moves as plan_moves
from sniper.placement._auto_shard import ps_loads as ps_loads
from sniper.placement._balanced import balanced_owners as balanced_owners
from sniper.placement._balanced import placement_load as placement_load
from sniper.placement._hash import hashed_owner as hashed_owner
from sniper.placement._sizing import COUNT_HEADROOM as COUNT_HEADROOM
from sniper.placement._sizing import FILE_CAPACITY as FILE_CAPACITY
from sniper.placement._sizing import INFLIGHT_HEADROOM as INFLIGHT_HEADROOM
from sniper.placement._sizing import MAX_AUTO_CAPACITY as MAX_AUTO_CAPACITY
from sniper.placement._sizing import MAX_AUTO_SHARDS as MAX_AUTO_SHARDS
from sniper.placement._sizing import MIN_AUTO_CAPACITY as MIN_AUTO_CAPACITY
from sniper.placement._sizing import SHARD_SIGNS as SHARD_SIGNS
from sniper.placement._sizing import auto_capacity as auto_capacity
from sniper.placement._sizing import auto_shards as auto_shards
from sniper.placement._sizing import capacity_for as capacity_for
from sniper.placement._sizing import counted_capacity as counted_capacity
from sniper.placement._sizing import inflight_capacity as inflight_capacity
from sniper.placement._sizing import shards_for as shards_for
from sniper.placement._types import Move as Move
from sniper.placement._types import Placement as Placement

__all__ = [
    "COUNT_HEADROOM",
    "FILE_CAPACITY",
    "INFLIGHT_HEADROOM",
    "MAX_AUTO_CAPACITY",
    "MAX_AUTO_SHARDS",
    "MIN_AUTO_CAPACITY",
    "SHARD_SIGNS",
    "Move",
    "Placement",
    "auto_capacity",
    "auto_shards",
    "balanced_owners",
    "capacity_for",
    "counted_capacity",
    "hashed_owner",
    "inflight_capacity",
    "placement_load",
    "plan_moves",
    "ps_loads",
    "shards_for",
]
