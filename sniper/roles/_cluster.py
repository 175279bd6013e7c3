"""``PsCluster``: several ps as one, each variable on the ps its :class:`Placement` names.

Calls fan out to the owners of their variables concurrently, in one anyio task group, over
whatever transport the members use (gRPC clients, in-process clients or the roles
themselves). A fan-out fails with the first member's error, unwrapped, after the other
members' calls have answered (none is cancelled half-way: a PushGrad that reached its ps
either applied or did not): the caller sees the ``GRPCError`` a single ps would raise.

The placement can change while the cluster is in use (auto_shard moved a variable):
:meth:`PsCluster.switch` waits until every FeedSample begun under the old placement has
answered, holding new ones back meanwhile, so that once it returns no feed can still reach a
variable's old owner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

import anyio
import numpy as np
from numpy.typing import NDArray

from sniper.placement import Placement
from sniper.rpc import LookupTarget, NextLookup, Pooled, PsApi, Signs, Weights

__all__ = ["PsCluster", "gather"]

T = TypeVar("T")
M = TypeVar("M", bound=PsApi)


async def gather(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run ``calls`` concurrently to their end; their results in order, or the error of the
    first call in ``calls`` that failed, raised as is (not in an exception group): the same
    one whichever failed first in time, on either anyio backend."""
    if len(calls) == 1:  # a job of one ps: nothing to run beside it, so no task group
        return [await calls[0]()]
    results: list[T | None] = [None] * len(calls)
    errors: dict[int, BaseException] = {}

    async def one(index: int) -> None:
        try:
            results[index] = await calls[index]()
        except Exception as exc:
            errors[index] = exc

    # The last call runs in this task: one task fewer to start and wait for (a fan-out to two
    # in-process ps is a few calls' worth of Python; the task was a third of it).
    async with anyio.create_task_group() as group:
        for index in range(len(calls) - 1):
            group.start_soon(one, index)
        if calls:
            await one(len(calls) - 1)
    if errors:
        raise errors[min(errors)]
    return results  # type: ignore[return-value]


class PsCluster:
    """Several ps; variable ``name`` on ``placement.owner(name)`` (by default the ps its name
    hashes to: ``ps_for_variable(name, len(members))``)."""

    def __init__(self, members: Sequence[PsApi], placement: Placement | None = None) -> None:
        if not members:
            raise ValueError("a cluster needs at least one ps")
        self.members = list(members)
        self.placement = placement or Placement(len(self.members))
        self._check(self.placement)
        self._feeding = 0
        self._fed: anyio.Event | None = None  # set when the last feed in flight answers
        self._switching: anyio.Event | None = None  # new feeds wait while it is unset
        self._switched: anyio.Event | None = None  # set when a switch changes the placement

    def _check(self, placement: Placement) -> None:
        if placement.num_ps != len(self.members):
            raise ValueError(
                f"placement is for {placement.num_ps} ps, the cluster has {len(self.members)}"
            )

    def owner(self, name: str) -> PsApi:
        """The ps that holds variable ``name``."""
        return self.members[self.placement.owner(name)]

    def _by_owner(self, names: Sequence[str]) -> dict[int, list[str]]:
        groups: dict[int, list[str]] = {}
        for name in names:
            groups.setdefault(self.placement.owner(name), []).append(name)
        return groups

    async def switch(self, placement: Placement) -> int:
        """Use ``placement`` from now on, once every feed begun before has answered; an older
        version than the one in use changes nothing. Returns the version in use."""
        self._check(placement)
        if placement.version <= self.placement.version:
            return self.placement.version
        while self._switching is not None:  # one switch at a time
            await self._switching.wait()
        switching = self._switching = anyio.Event()
        try:
            while self._feeding:
                self._fed = anyio.Event()
                await self._fed.wait()
            if placement.version > self.placement.version:
                self.placement = placement
                if self._switched is not None:
                    self._switched.set()
                    self._switched = None
        finally:
            self._switching = None
            switching.set()
        return self.placement.version

    async def placement_after(self, version: int, seconds: float) -> None:
        """Return once the placement in use is not ``version`` (a switch came), or after
        ``seconds``: a hub answered NOT_FOUND by hashing retries as soon as the job's placement
        reaches it, not a fixed pause later."""
        with anyio.move_on_after(seconds):
            while self.placement.version == version:
                if self._switched is None:
                    self._switched = anyio.Event()
                await self._switched.wait()

    def close(self) -> None:
        """Close the members that hold connections (gRPC clients)."""
        for member in self.members:
            close = getattr(member, "close", None)
            if close is not None:
                close()

    async def feed_sample(
        self, batch_id: int, variables: Mapping[str, Signs], *, weights: Weights | None = None
    ) -> None:
        while self._switching is not None:
            await self._switching.wait()
        self._feeding += 1
        weights = weights or {}
        try:
            await gather(
                [
                    _bind(
                        self.members[ps].feed_sample,
                        batch_id,
                        {n: variables[n] for n in names},
                        **_weights_of(weights, names),
                    )
                    for ps, names in self._by_owner(list(variables)).items()
                ]
            )
        finally:
            self._feeding -= 1
            if not self._feeding and self._fed is not None:
                self._fed.set()

    async def embedding_lookup(
        self,
        batch_id: int,
        names: Sequence[str],
        *,
        release: bool = False,
        into: LookupTarget | None = None,
    ) -> dict[str, Pooled]:
        parts = await gather(
            [
                _bind(
                    self.members[ps].embedding_lookup, batch_id, group, release=release, into=into
                )
                for ps, group in self._by_owner(names).items()
            ]
        )
        return {name: pooled for part in parts for name, pooled in part.items()}

    async def push_grad(self, batch_id: int, grads: Mapping[str, NDArray[np.float32]]) -> int:
        dropped = await gather(
            [
                _bind(self.members[ps].push_grad, batch_id, {n: grads[n] for n in names})
                for ps, names in self._by_owner(list(grads)).items()
            ]
        )
        return sum(dropped)

    async def push_grad_then_lookup(
        self, batch_id: int, grads: Mapping[str, NDArray[np.float32]], then: NextLookup
    ) -> tuple[int, dict[str, Pooled]]:
        """Push ``grads``; each ps that is pushed to and holds some of ``then.names`` looks
        those up in the same call, once its own gradients are applied (a lookup of a variable
        waits only for that variable's push, which is on the same ps). Returns the dropped
        count and the answers of the variables looked up: a variable on a ps that was not
        pushed to, or whose ps did not answer, is left for the caller's EmbeddingLookup."""
        wanted = self._by_owner(list(then.names))

        async def one(ps: int, names: list[str]) -> tuple[int, dict[str, Pooled] | None]:
            part = {n: grads[n] for n in names}
            if ps not in wanted:
                return await self.members[ps].push_grad(batch_id, part), None
            mine = replace(then, names=wanted[ps])
            return await self.members[ps].push_grad_then_lookup(batch_id, part, mine)

        parts = await gather(
            [_bind(one, ps, names) for ps, names in self._by_owner(list(grads)).items()]
        )
        answers = {name: pooled for _, part in parts for name, pooled in (part or {}).items()}
        return sum(dropped for dropped, _ in parts), answers


def _weights_of(weights: Weights, names: Sequence[str]) -> dict[str, Weights]:
    """The ``weights`` keyword of a FeedSample of ``names``: none when no bag is weighted, so
    a ps or client written before weighted bags is called as it was."""
    mine = {name: weights[name] for name in names if name in weights}
    return {"weights": mine} if mine else {}


def _bind(
    function: Callable[..., Awaitable[T]], *args: object, **kwargs: object
) -> Callable[[], Awaitable[T]]:
    return lambda: function(*args, **kwargs)
