"""auto_shard: move variables off a busy ps while training goes on.

Hashing variables to ps evens out their number, not their work: the seed logs found one ps at
59% CPU while the others idled at 10%. :class:`AutoShard` runs in the trainer. Every
``window`` steps it reads each ps's Stats, where every variable's store kernel seconds (its
lookups and pushes) are counted, and takes the window's difference as the variable's cost.
When the busiest ps's cost exceeds the lightest's by more than ``ratio``, it asks the planner
(:func:`sniper.placement.plan_moves`) for moves: the busiest ps's variable whose cost is nearest
half the gap goes to the lightest ps, as long as that lowers the busier of the two. The policy
is ``sniper.placement``'s; this module carries the moves out.

A move happens while the trainer's pipeline is drained (as for a checkpoint: every batch read
was pushed, so no lookup or push is in flight) and goes in an order that loses no gradient:

1. the new owner creates the variable, empty: from now on it accepts its feeds;
2. every hub switches to the next placement version, which returns once each FeedSample begun
   under the old one has answered: no feed can reach the old owner after that;
3. the old owner exports the variable's rows, optimizer state and the signs of its fed and
   not yet pushed batches; the new owner imports them (its rows replace the empty table's; the
   batches join those fed to it in step 2);
4. the old owner drops it, and the trainer switches to the new placement.

Rows and optimizer state travel exactly, so a job with moves trains the same rows as one
without (``tests/roles/test_auto_shard.py`` compares every row and every lookup). Two things
start afresh on the new owner: the admission sketch (a sign seen fewer than ``min_count`` times
counts its sightings again) and the LRU recency bits. A variable too large for one gRPC message
(:data:`MAX_MOVE_BYTES`) is not moved, nor one moved in the last two windows; a target ps that
cannot create the variable (its memory budget) leaves it where it is.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence

from sniper.placement import Move, plan_moves, ps_loads
from sniper.roles._cluster import PsCluster, gather
from sniper.roles._errors import RPC_ERRORS, describe_error
from sniper.rpc import HubApi, VariableConfig
from sniper.store import make_optimizer

__all__ = ["MAX_MOVE_BYTES", "AutoShard"]

log = logging.getLogger("sniper.trainer")

MAX_MOVE_BYTES = 200 * 2**20
"""The largest variable moved, in bytes of rows and state: under the 256 MB a gRPC message may
carry by default, with room for its fed batches."""


class AutoShard:
    """The trainer's side of auto_shard (see the module doc)."""

    def __init__(
        self,
        cluster: PsCluster,
        hubs: Sequence[HubApi],
        configs: Mapping[str, VariableConfig],
        *,
        ratio: float = 1.5,
        window: int = 20,
        max_moves: int = 1,
        max_move_bytes: int = MAX_MOVE_BYTES,
    ) -> None:
        self.cluster = cluster
        self.hubs = list(hubs)
        self.configs = dict(configs)
        self.ratio = ratio
        self.window = window
        self.max_moves = max_moves
        self.max_move_bytes = max_move_bytes
        self.moves: list[tuple[int, Move, float]] = []
        """Every move made: (step, move, seconds it took)."""
        self._seen: dict[str, float] = {}  # each variable's kernel seconds when last read
        self._held_out: dict[str, int] = {}  # variables not to move before this step
        self._row_bytes = {name: _row_bytes(config) for name, config in self.configs.items()}

    def due(self, step: int) -> bool:
        """Whether ``step`` ends a window."""
        return step > 0 and step % self.window == 0

    async def start(self) -> None:
        """Take the kernel seconds so far as the baseline, so that the first window counts
        only its own work (not a resumed job's past, nor numba compiling the kernels)."""
        try:
            await self._read()
        except RPC_ERRORS as exc:
            log.warning("auto_shard could not read the ps Stats to start: %s", describe_error(exc))

    async def _read(self) -> tuple[dict[str, float], dict[str, int]]:
        """Each variable's kernel seconds since the last read, and its rows now."""
        stats = await gather([member.stats for member in self.cluster.members])
        totals = {v.name: v.kernel_seconds for answer in stats for v in answer.variables}
        rows = {v.name: v.rows for answer in stats for v in answer.variables}
        costs = {
            name: max(0.0, total - self._seen.get(name, 0.0))
            for name, total in totals.items()
            if name in self.configs
        }
        self._seen = totals
        return costs, rows

    async def plan(self, step: int) -> list[Move]:
        """The moves this window's costs call for (none if the ps are even enough)."""
        costs, rows = await self._read()
        # A variable just moved has not shown its new owner's cost yet; one too large for a
        # message cannot travel (moves are one ExportVariable and one ImportVariable).
        held = {name for name, until in self._held_out.items() if step < until}
        too_large = {
            name
            for name, n in rows.items()
            if n * self._row_bytes.get(name, 0) > self.max_move_bytes
        }
        placement = self.cluster.placement
        moves = plan_moves(
            costs, placement, self.ratio, self.max_moves, frozenset(held | too_large)
        )
        if moves:
            log.info(
                "auto_shard at step %d: ps kernel seconds %s; moving %s",
                step,
                ", ".join(f"{load:.3f}" for load in ps_loads(costs, placement)),
                ", ".join(f"{m.variable} ps {m.source}->{m.to}" for m in moves),
            )
        return moves

    async def move(self, step: int, move: Move) -> bool:
        """Carry out one move (the trainer's pipeline must be drained); False when it was
        skipped with nothing changed: the variable is no longer on ``move.source``, or the
        target ps refused to create it (its memory budget, say)."""
        name, members = move.variable, self.cluster.members
        if self.cluster.placement.owner(name) != move.source:
            return False
        start = time.perf_counter()
        source, target = members[move.source], members[move.to]
        placement = self.cluster.placement.moved(name, move.to)
        self._held_out[name] = step + 2 * self.window
        try:
            await target.create_variable(self.configs[name])
        except RPC_ERRORS as exc:
            log.warning(
                "auto_shard left %s on ps %d: ps %d could not create it: %s",
                name,
                move.source,
                move.to,
                describe_error(exc),
            )
            return False
        # From here on the hubs may feed the target: a failure is the job's (TrainingError),
        # and a restart resumes from the last checkpoint, with that checkpoint's placement.
        await gather([functools.partial(hub.set_placement, placement) for hub in self.hubs])
        await target.import_variable(await source.export_variable(name))
        await source.drop_variable(name)
        await self.cluster.switch(placement)
        self._seen[name] = 0.0  # the new owner counts it from zero
        seconds = time.perf_counter() - start
        self.moves.append((step, move, seconds))
        log.info(
            "auto_shard moved %s from ps %d to ps %d at step %d in %.2f s (placement version %d)",
            name,
            move.source,
            move.to,
            step,
            seconds,
            placement.version,
        )
        return True


def _row_bytes(config: VariableConfig) -> int:
    """Bytes one row of a variable takes in a move: its sign, weights, state and step."""
    slots = make_optimizer(config.optimizer, config.optimizer_params).slots
    return 8 + 4 + 4 * config.dim * (1 + slots)
