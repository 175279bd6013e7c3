"""Real roles for the role tests: a hub whose answers come late by a random amount, and a ps
with a small table for every variable of a reader; the BLAS thread counts a trainer sets; and
a clock moved by hand for a module's deadlines."""

from __future__ import annotations

import random
import time
import types

import anyio
import pytest
from threadpoolctl import threadpool_info

from sniper.data import SyntheticCtr
from sniper.roles import HubRole, PsRole
from sniper.rpc import Sample, VariableConfig


class JitteryHub(HubRole):
    """A real hub whose answers take a random 0 to ``delay`` seconds, so concurrent reads
    finish out of order."""

    delay = 0.01

    async def read_sample(self, *, describe: bool = False) -> Sample | None:
        await anyio.sleep(random.random() * self.delay)
        return await super().read_sample(describe=describe)


async def created(role: PsRole, reader: SyntheticCtr) -> PsRole:
    """``role`` with a small table for every variable of ``reader``."""
    for name in reader.variables:
        await role.create_variable(VariableConfig(name, 4, 10_000))
    return role


def blas_threads() -> list[int]:
    """The thread count of each BLAS library loaded in this process, as the trainer's
    ``blas_threads`` limit sets them."""
    return [int(pool["num_threads"]) for pool in threadpool_info() if pool["user_api"] == "blas"]


class Clock:
    """A module's ``time.monotonic``, moved by hand: a lease or a batch expires when the test
    says so, however slowly the machine runs the calls before it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def hand_clock(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType) -> Clock:
    """A :class:`Clock` that ``module`` reads as its ``time.monotonic``; the rest of its
    ``time`` (``perf_counter`` for its timings) stays the real one."""
    clock = Clock()
    real = {name: getattr(time, name) for name in dir(time) if not name.startswith("_")}
    monkeypatch.setattr(
        module, "time", types.SimpleNamespace(**real | {"monotonic": clock.monotonic})
    )
    return clock
