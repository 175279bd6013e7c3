"""Real roles for the role tests: a hub whose answers come late by a random amount, and a ps
with a small table for every variable of a reader."""

from __future__ import annotations

import random

import anyio

from sniper.data import SyntheticCtr
from sniper.roles import HubRole, PsRole
from sniper.rpc import Sample, variable_request


class JitteryHub(HubRole):
    """A real hub whose answers take a random 0 to ``delay`` seconds, so concurrent reads
    finish out of order."""

    delay = 0.01

    async def read_sample(self) -> Sample | None:
        await anyio.sleep(random.random() * self.delay)
        return await super().read_sample()


async def created(role: PsRole, reader: SyntheticCtr) -> PsRole:
    """``role`` with a small table for every variable of ``reader``."""
    for name in reader.variables:
        await role.create_variable(variable_request(name, 4, 10_000))
    return role
