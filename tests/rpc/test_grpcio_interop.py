"""A plain grpcio client against a real ``sniper serve`` process: the contract is the .proto.

The stubs are generated from ``sniper/rpc/*.proto`` at test time, so any gRPC implementation
that reads those files talks to sniper; the numbers must equal a local ``EmbeddingTable`` built
with the same configuration.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from numpy.typing import NDArray

from sniper.store import SGD, Adagrad, EmbeddingTable, Initializer, Optimizer, normal, uniform
from tests.rpc import _grpcio
from tests.rpc._grpcio import (
    GrpcModules,
    ServerProcess,
    from_tensor,
    start_server,
    stop_server,
    to_tensor,
)

grpcio_modules = _grpcio.grpcio_modules
ps_server = _grpcio.ps_server

TIMEOUT = 30.0
RTOL = 1e-6
ATOL = 1e-9


@dataclass(frozen=True)
class Variable:
    """One variable's configuration, both as a CreateVariable request and as a local table."""

    name: str
    dim: int
    capacity: int
    shards: int
    seed: int
    optimizer: str
    params: dict[str, float]
    initializer: tuple[str, float, float]

    def request(self, pb: Any) -> Any:
        kind, a, b = self.initializer
        return pb.CreateVariableRequest(
            name=self.name,
            dim=self.dim,
            capacity=self.capacity,
            optimizer=pb.OptimizerConfig(name=self.optimizer, params=self.params),
            initializer=pb.InitializerConfig(kind=kind, a=a, b=b),
            shards=self.shards,
            seed=self.seed,
        )

    def table(self) -> EmbeddingTable:
        optimizers: dict[str, type[Optimizer]] = {"adagrad": Adagrad, "sgd": SGD}
        kind, a, b = self.initializer
        initializer: Initializer = uniform(a, b) if kind == "uniform" else normal(b, mean=a)
        return EmbeddingTable(
            self.dim,
            capacity=self.capacity,
            optimizer=optimizers[self.optimizer](**self.params),
            initializer=initializer,
            num_shards=self.shards,
            seed=self.seed,
        )


def variables(prefix: str) -> list[Variable]:
    """The variables of one test: adagrad dim 8 over 2 shards, and two others."""
    adagrad = {"lr": 0.05, "initial_accumulator_value": 0.1, "eps": 1e-8}
    return [
        Variable(f"{prefix}user_id", 8, 1024, 2, 42, "adagrad", adagrad, ("uniform", -0.05, 0.05)),
        Variable(f"{prefix}item_id", 8, 512, 2, 7, "adagrad", {"lr": 0.1}, ("normal", 0.0, 0.02)),
        Variable(f"{prefix}tags", 4, 64, 1, 2**64 - 1, "sgd", {"lr": 0.5}, ("normal", 0.1, 0.3)),
    ]


def ragged_batch(
    rng: np.random.Generator, examples: int
) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
    """Signs of ``examples`` examples: ragged, with repeats, extreme signs and empty examples."""
    pool = np.array([0, 1, 3, 17, 2**32, 2**63, 2**64 - 1, 123_456_789_012], dtype=np.uint64)
    lengths = rng.integers(0, 6, size=examples)
    lengths[1] = 0  # always at least one empty example
    signs = rng.choice(pool, size=int(lengths.sum()))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return signs.astype(np.uint64), offsets


@pytest.fixture
def grpcio(grpcio_modules: GrpcModules) -> GrpcModules:
    return grpcio_modules


@pytest.fixture
def channel(ps_server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(ps_server.address) as channel:
        yield channel


@pytest.fixture
def ps(grpcio: GrpcModules, channel: grpc.Channel) -> Any:
    return grpcio.pb_grpc.PsStub(channel)


def create(ps: Any, pb: Any, variable: Variable) -> bool:
    response = ps.CreateVariable(variable.request(pb), timeout=TIMEOUT)
    return bool(response.created)


def train_step(
    ps: Any,
    pb: Any,
    batch_id: int,
    batch: dict[str, tuple[NDArray[np.uint64], NDArray[np.int64]]],
    grads: dict[str, NDArray[np.float32]],
) -> dict[str, NDArray[np.float32]]:
    """FeedSample, EmbeddingLookup and PushGrad of one batch; returns the pooled embeddings."""
    ps.FeedSample(
        pb.FeedSampleRequest(
            batch_id=batch_id,
            variables=[
                pb.VariableSigns(
                    name=name, signs=to_tensor(pb, signs), offsets=to_tensor(pb, offsets)
                )
                for name, (signs, offsets) in batch.items()
            ],
        ),
        timeout=TIMEOUT,
    )
    response = ps.EmbeddingLookup(
        pb.EmbeddingLookupRequest(batch_id=batch_id, names=list(batch)), timeout=TIMEOUT
    )
    pooled = {e.name: from_tensor(e.pooled, "float32") for e in response.embeddings}
    assert all(e.kernel_seconds > 0 for e in response.embeddings)
    pushed = ps.PushGrad(
        pb.PushGradRequest(
            batch_id=batch_id,
            grads=[
                pb.VariableGradient(name=name, grad=to_tensor(pb, grad))
                for name, grad in grads.items()
            ],
        ),
        timeout=TIMEOUT,
    )
    assert pushed.dropped_nonfinite == 0
    return pooled


def pull(ps: Any, pb: Any, name: str, signs: NDArray[np.uint64]) -> NDArray[np.float32]:
    response = ps.Pull(pb.PullRequest(name=name, signs=to_tensor(pb, signs)), timeout=TIMEOUT)
    return from_tensor(response.rows, "float32")


def train(
    ps: Any, pb: Any, specs: list[Variable], tables: dict[str, EmbeddingTable], seed: int
) -> NDArray[np.uint64]:
    """Three training steps on the server and on the reference tables, compared after each.

    Returns every sign the steps used, plus one that was never fed.
    """
    rng = np.random.default_rng(seed)
    seen = [np.array([99_999], dtype=np.uint64)]
    for step in range(3):
        batch = {v.name: ragged_batch(rng, examples=6) for v in specs}
        grads = {v.name: rng.normal(size=(6, v.dim)).astype(np.float32) for v in specs}
        pooled = train_step(ps, pb, 1000 + seed * 10 + step, batch, grads)
        assert sorted(pooled) == sorted(batch)
        for v in specs:
            signs, offsets = batch[v.name]
            expected = tables[v.name].lookup_pool(signs, offsets)
            assert pooled[v.name].shape == (6, v.dim)
            np.testing.assert_allclose(pooled[v.name], expected, rtol=RTOL, atol=ATOL)
            np.testing.assert_array_equal(pooled[v.name][1], 0)  # the empty example
            tables[v.name].push_grad(signs, offsets, grads[v.name])
            seen.append(signs)
    return np.unique(np.concatenate(seen))


def test_training_steps_match_the_local_table(grpcio: GrpcModules, ps: Any) -> None:
    pb = grpcio.pb
    specs = variables("train_")
    tables = {v.name: v.table() for v in specs}
    assert all(create(ps, pb, v) for v in specs)
    signs = train(ps, pb, specs, tables, seed=1)
    for v in specs:
        rows = pull(ps, pb, v.name, signs)
        assert rows.shape == (len(signs), v.dim)
        np.testing.assert_allclose(rows, tables[v.name].get(signs), rtol=RTOL, atol=ATOL)
        # The rows moved away from their initial values: the gradients were applied.
        assert not np.allclose(rows[:-1], v.table().get(signs)[:-1])


def test_health_check(grpcio: GrpcModules, channel: grpc.Channel) -> None:
    health = grpcio.health_grpc.HealthStub(channel)
    serving = grpcio.health.HealthCheckResponse.SERVING
    for service in ("", "sniper.v1.Ps"):
        request = grpcio.health.HealthCheckRequest(service=service)
        assert health.Check(request, timeout=TIMEOUT).status == serving
    with pytest.raises(grpc.RpcError) as info:
        health.Check(grpcio.health.HealthCheckRequest(service="nope.v1.Nope"), timeout=TIMEOUT)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert "nope.v1.Nope" in info.value.details()


def test_stats_report_latencies_and_variables(grpcio: GrpcModules, ps: Any) -> None:
    pb = grpcio.pb
    specs = variables("stats_")
    tables = {v.name: v.table() for v in specs}
    for v in specs:
        create(ps, pb, v)
    train(ps, pb, specs, tables, seed=2)
    stats = ps.Stats(pb.StatsRequest(), timeout=TIMEOUT)
    latencies = {s.name: s for s in stats.latencies}
    for name in ("EmbeddingLookup", "PushGrad", "FeedSample", "CreateVariable"):
        assert latencies[name].count >= 3
        assert 0 < latencies[name].p50_us <= latencies[name].max_us
    assert latencies["EmbeddingLookup.kernel"].count >= 9
    by_name = {s.name: s for s in stats.variables}
    for v in specs:
        s = by_name[v.name]
        assert (s.rows, s.capacity, s.shards) == (len(tables[v.name]), v.capacity, v.shards)
        assert s.inserts == len(tables[v.name])
        assert s.bytes > 0
    assert stats.scheduler == "thread_pool"
    assert stats.pending_batches == 0


def test_create_variable_is_idempotent_and_refuses_a_conflict(grpcio: GrpcModules, ps: Any) -> None:
    pb = grpcio.pb
    spec = variables("idem_")[0]
    assert create(ps, pb, spec) is True
    assert create(ps, pb, spec) is False
    conflicting = spec.request(pb)
    conflicting.dim = 16
    with pytest.raises(grpc.RpcError) as info:
        ps.CreateVariable(conflicting, timeout=TIMEOUT)
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert spec.name in info.value.details()


def test_identical_create_variable_with_reordered_map_is_not_a_conflict(
    grpcio: GrpcModules, channel: grpc.Channel
) -> None:
    """Protobuf leaves the wire order of map entries unspecified: the same configuration
    serialized with its optimizer params in another order is still the same configuration."""
    pb = grpcio.pb
    spec = variables("maporder_")[0]
    request = spec.request(pb)
    request.ClearField("optimizer")
    head: bytes = request.SerializeToString()

    def with_params(order: list[str]) -> bytes:
        optimizer: bytes = pb.OptimizerConfig(name=spec.optimizer).SerializeToString()
        for key in order:
            optimizer += pb.OptimizerConfig(params={key: spec.params[key]}).SerializeToString()
        return head + _length_delimited(4, optimizer)

    keys = list(spec.params)
    first, second = with_params(keys), with_params(keys[::-1])
    assert pb.CreateVariableRequest.FromString(first) == pb.CreateVariableRequest.FromString(second)
    call = channel.unary_unary(
        "/sniper.v1.Ps/CreateVariable",
        request_serializer=None,
        response_deserializer=pb.CreateVariableResponse.FromString,
    )
    assert call(first, timeout=TIMEOUT).created is True
    assert call(second, timeout=TIMEOUT).created is False


def _length_delimited(field: int, payload: bytes) -> bytes:
    key = _varint(field << 3 | 2)
    return key + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def test_save_then_restore_on_a_fresh_server(grpcio: GrpcModules, ps: Any, tmp_path: Path) -> None:
    pb = grpcio.pb
    specs = variables("ckpt_")
    tables = {v.name: v.table() for v in specs}
    for v in specs:
        create(ps, pb, v)
    signs = train(ps, pb, specs, tables, seed=3)
    before = {v.name: pull(ps, pb, v.name, signs) for v in specs}
    directory = tmp_path / "checkpoint"
    saved = ps.Save(pb.SaveRequest(directory=str(directory)), timeout=TIMEOUT)
    assert {v.name for v in specs} <= set(saved.variables)
    assert (directory / "manifest.json").is_file()

    fresh = start_server(tmp_path, "--checkpoint-root", str(tmp_path))
    try:
        with grpc.insecure_channel(fresh.address) as channel:
            other = grpcio.pb_grpc.PsStub(channel)
            restored = other.Restore(pb.RestoreRequest(directory=str(directory)), timeout=TIMEOUT)
            assert list(restored.variables) == list(saved.variables)
            assert restored.rows == saved.rows
            for v in specs:
                np.testing.assert_array_equal(pull(other, pb, v.name, signs), before[v.name])
            # The optimizer state came back too: one more step agrees with the reference.
            rng = np.random.default_rng(4)
            batch = {v.name: ragged_batch(rng, examples=6) for v in specs}
            grads = {v.name: rng.normal(size=(6, v.dim)).astype(np.float32) for v in specs}
            train_step(other, pb, 77, batch, grads)
            for v in specs:
                tables[v.name].push_grad(*batch[v.name], grads[v.name])
                np.testing.assert_allclose(
                    pull(other, pb, v.name, signs),
                    tables[v.name].get(signs),
                    rtol=RTOL,
                    atol=ATOL,
                )
            # Creating a restored variable again with its configuration is an idempotent retry.
            assert create(other, pb, specs[0]) is False
    finally:
        status = stop_server(fresh)
    assert status == 0, fresh.stderr()


def test_restore_onto_the_server_that_saved(grpcio: GrpcModules, ps: Any, tmp_path: Path) -> None:
    """The configurations in a checkpoint equal those the variables were created with."""
    pb = grpcio.pb
    specs = variables("resave_")
    tables = {v.name: v.table() for v in specs}
    for v in specs:
        create(ps, pb, v)
    signs = train(ps, pb, specs, tables, seed=5)
    ps.Save(pb.SaveRequest(directory=str(tmp_path / "ck")), timeout=TIMEOUT)
    ps.Restore(pb.RestoreRequest(directory=str(tmp_path / "ck")), timeout=TIMEOUT)
    for v in specs:
        np.testing.assert_allclose(
            pull(ps, pb, v.name, signs), tables[v.name].get(signs), rtol=RTOL, atol=ATOL
        )
