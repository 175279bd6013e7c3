"""No silent mismatch: a hub tells its trainer's first read the data it serves (its keys'
digest and shape), over gRPC and in process, and a trainer configured for other data stops with
one line naming both sides, instead of hanging or training on the wrong columns."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from sniper._metrics import Histogram
from sniper.data import DataSource, SyntheticCtr
from sniper.roles import (
    DataMismatchError,
    HubConfig,
    HubRole,
    PsCluster,
    PsEngine,
    PsRole,
    data_served,
)
from sniper.roles._reading import HubReader
from sniper.rpc import DataServed, HubApi
from sniper.scheduler import open_scheduler
from sniper.transport import GrpcTransport, InProcessTransport
from tests.roles._roles import created

pytestmark = pytest.mark.anyio

HUB = DataSource(data="synthetic", scale=0.01, num_batches=4, batch_size=64)


def test_the_digest_covers_every_data_key_and_the_seed_of_synthetic_data() -> None:
    base = HUB.data_digest()
    assert len(base) == 16 and DataSource(**{**vars_of(HUB)}).data_digest() == base
    changes: dict[str, Any] = {
        "data": "parquet:x.parquet",
        "workload": "criteo",
        "scale": 0.02,
        "num_batches": 5,
        "batch_size": 128,
        "nonfinite_dense": "fill",
        "seed": 3,
    }
    for key, value in changes.items():
        assert dataclasses.replace(HUB, **{key: value}).data_digest() != base, key
    assert dataclasses.replace(HUB, stats_interval=1.0).data_digest() == base  # not a data key
    files = dataclasses.replace(HUB, data="parquet:x.parquet")
    assert dataclasses.replace(files, seed=3).data_digest() == files.data_digest()


def vars_of(source: DataSource) -> dict[str, Any]:
    return {f.name: getattr(source, f.name) for f in dataclasses.fields(source)}


@asynccontextmanager
async def serving_hub(transport: str) -> AsyncIterator[HubApi]:
    """A hub over ``HUB``'s data, feeding a real ps, reached through ``transport``."""
    reader = HUB.open()
    assert isinstance(reader, SyntheticCtr)
    async with open_scheduler("inline", workers=1) as scheduler:
        ps = await created(PsRole(PsEngine(scheduler)), reader)
        hub = HubRole(reader, PsCluster([ps]), HubConfig(), HUB)
        serve = GrpcTransport() if transport == "grpc" else InProcessTransport()
        address = "127.0.0.1:0" if transport == "grpc" else ""
        async with anyio.create_task_group() as group, serve.serve(hub, address) as where:
            group.start_soon(hub.run)
            client = serve.hub_client(where)
            try:
                yield client
            finally:
                getattr(client, "close", lambda: None)()
                hub.close()
                group.cancel_scope.cancel()


TRANSPORTS = pytest.mark.parametrize(
    ("transport", "anyio_backend"),
    [("grpc", "asyncio"), ("inprocess", "asyncio"), ("inprocess", "trio")],
)
"""Each transport on each loop it runs on (grpclib runs on asyncio only)."""


@TRANSPORTS
async def test_the_first_read_says_what_the_hub_serves(transport: str, anyio_backend: str) -> None:
    async with serving_hub(transport) as hub:
        sample = await hub.read_sample(describe=True)
        assert sample is not None
        reader = HUB.open()
        assert sample.served == DataServed(
            "synthetic", reader.variables, reader.dense_features, 64, HUB.data_digest()
        )
        later = await hub.read_sample()
        assert later is not None and later.served is None  # only when asked


@TRANSPORTS
async def test_a_trainer_configured_for_other_data_stops_naming_both_sides(
    transport: str, anyio_backend: str
) -> None:
    reader = HUB.open()
    async with serving_hub(transport) as hub:
        agreeing = HubReader([("127.0.0.1:7001", hub)], Histogram())
        agreeing.expected = data_served(HUB, reader.variables[::-1], reader.dense_features)
        ticket = agreeing.next_ticket()
        assert ticket is not None and await agreeing.read(ticket) is not None
        trainer = dataclasses.replace(HUB, scale=0.02)
        mismatched = HubReader([("127.0.0.1:7001", hub)], Histogram())
        mismatched.expected = data_served(trainer, reader.variables, reader.dense_features)
        ticket = mismatched.next_ticket()
        assert ticket is not None
        message = (
            f"hub 127.0.0.1:7001 serves data 'synthetic' ({len(reader.variables)} variables, "
            f"{reader.dense_features} dense features, batch_size 64, data keys digest "
            f"{HUB.data_digest()}), but this trainer was configured for data 'synthetic' "
            f"({len(reader.variables)} variables, {reader.dense_features} dense features, "
            f"batch_size 64, data keys digest {trainer.data_digest()}); they differ in a key this "
            "line does not show; give the hubs and the trainer the same data keys (data, "
            "workload, scale, num_batches, batch_size, seed, and [features] with its columns' "
            "settings)"
        )
        with pytest.raises(DataMismatchError, match=f"^{re.escape(message)}$"):
            await mismatched.read(ticket)
