"""ReadSample loses no batch to a caller that gave up: over real gRPC, calls with a 1 ms
deadline (a hostile survey lost 9 of 60 batches that way) leave every batch to a later reader,
which gets each exactly once."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import grpc

from sniper.data import SyntheticCtr, load_workload
from sniper.roles import BatchId
from sniper.rpc import PsClient, VariableConfig
from tests.rpc import _grpcio
from tests.rpc._grpcio import GrpcModules, start_server, stop_server

grpcio_modules = _grpcio.grpcio_modules
BATCHES = 60
EXPIRED = (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN)


def create_variables(port: int) -> None:
    """What a trainer does first: the hub feeds nothing before its variables exist."""

    async def create() -> None:
        async with PsClient("127.0.0.1", port) as client:
            for name in SyntheticCtr(load_workload("seed_ctr"), num_batches=1).variables:
                await client.create_variable(VariableConfig(name, 4, 10_000))

    anyio.run(create)


def test_readers_that_give_up_lose_no_batch(grpcio_modules: GrpcModules, tmp_path: Path) -> None:
    (tmp_path / "hub.toml").write_text("read_lease_seconds = 0.5\nqueue_size = 64\n")
    ps = start_server(tmp_path, "--workers", "1")
    create_variables(ps.port)
    hub = start_server(
        tmp_path,
        command=[
            *(sys.executable, "-m", "sniper", "serve", "--role", "hub", "--port", "0"),
            *("--ps", f"127.0.0.1:{ps.port}", "--config", "hub.toml", "--scale", "0.002"),
            *("--num-batches", str(BATCHES), "--batch-size", "16"),
        ],
    )
    pb, stub_of = grpcio_modules.pb, grpcio_modules.pb_grpc.HubStub
    got: list[int] = []
    gave_up = 0
    try:
        with grpc.insecure_channel(f"127.0.0.1:{hub.port}") as channel:
            stub = stub_of(channel)
            for _ in range(BATCHES):
                try:
                    answer = stub.ReadSample(pb.ReadSampleRequest(), timeout=0.001)
                except grpc.RpcError as exc:
                    # A call whose deadline had passed before the server read it gets grpclib's
                    # UNKNOWN "Internal Server Error" (its handler never starts: grpclib logs
                    # "Timeout occurred") when that answer beats the client's own timer.
                    assert exc.code() in EXPIRED, exc
                    gave_up += 1
                    continue
                got.append(answer.batch_id)
                stub.AckSample(pb.AckSampleRequest(batch_ids=[answer.batch_id]), timeout=10)
            while not (answer := stub.ReadSample(pb.ReadSampleRequest(), timeout=30)).end_of_data:
                got.append(answer.batch_id)
                settled = stub.AckSample(pb.AckSampleRequest(batch_ids=[answer.batch_id]))
                assert settled.acknowledged == 1
    finally:
        stop_server(hub)
        stop_server(ps)
    assert gave_up > 0  # the test did exercise callers that gave up
    assert sorted(got) == [BatchId(0, 0, index).pack() for index in range(BATCHES)]
