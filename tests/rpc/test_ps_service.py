"""PsService in process over real loopback gRPC (sniper.testing.running_ps)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from numpy.typing import NDArray

from sniper.roles import MAX_PUSH_VALUE, PsRoleConfig
from sniper.roles._checkpoint import manifest_digest
from sniper.roles._ps import _nonfinite
from sniper.rpc import Checkpointed, LookupTarget, NextLookup, PsClient, VariableConfig
from sniper.rpc._generated.grpc.health.v1 import (
    HealthCheckRequest,
    HealthCheckResponseServingStatus,
    HealthStub,
)
from sniper.store import Adagrad, EmbeddingTable, uniform
from sniper.testing import running_ps

pytestmark = pytest.mark.anyio

SIGNS = np.array([5, 6, 5, 7, 8, 9], dtype=np.uint64)
OFFSETS = np.array([0, 3, 3, 6], dtype=np.int64)
GRADS = np.linspace(-1, 1, 3 * 4, dtype=np.float32).reshape(3, 4)


def reference() -> EmbeddingTable:
    return EmbeddingTable(
        4, capacity=100, optimizer=Adagrad(lr=0.5), num_shards=2, initializer=uniform(-1, 1), seed=3
    )


async def create(client: PsClient, name: str = "emb", *, created: bool = True) -> None:
    """Create the tests' standard variable; ``created=False`` expects it to exist already."""
    result = await client.create_variable(
        VariableConfig(
            name,
            4,
            100,
            optimizer="adagrad",
            optimizer_params={"lr": 0.5},
            shards=2,
            initializer=("uniform", -1, 1),
            seed=3,
        )
    )
    assert result is created


async def expect(status: Status, message: str, call: object) -> None:
    with pytest.raises(GRPCError) as info:
        await call  # type: ignore[misc]
    assert (info.value.status, info.value.message) == (status, message)


async def test_training_step_matches_the_store() -> None:
    table = reference()
    async with running_ps() as (_service, client):
        await create(client)
        await client.feed_sample(1, {"emb": (SIGNS, OFFSETS)})
        pooled = await client.embedding_lookup(1, ["emb"])
        np.testing.assert_allclose(
            pooled["emb"].pooled, table.lookup_pool(SIGNS, OFFSETS), rtol=1e-6
        )
        assert pooled["emb"].kernel_seconds > 0
        assert await client.push_grad(1, {"emb": GRADS}) == 0
        table.push_grad(SIGNS, OFFSETS, GRADS)
        np.testing.assert_allclose(await client.pull("emb", SIGNS), table.get(SIGNS), rtol=1e-6)
        stats = await client.stats()
        names = set(stats.latencies)
        assert {
            "EmbeddingLookup",
            "EmbeddingLookup.dispatch",
            "EmbeddingLookup.wait",
            "EmbeddingLookup.kernel",
            "EmbeddingLookup.encode",
            "PushGrad",
        } <= names
        assert stats.pending_batches == 0
        assert stats.variables[0].rows == 5


async def test_a_lookup_into_a_matrix_over_grpc_fills_each_block() -> None:
    """The gRPC client decodes each answer into its block of the trainer's matrix; a
    matrix of the wrong size is refused by the client, and the batch can still be looked up."""
    table = reference()
    async with running_ps() as (_service, client):
        await create(client)
        await create(client, "other")
        await client.feed_sample(1, {"emb": (SIGNS, OFFSETS), "other": (SIGNS, OFFSETS)})
        with pytest.raises(ValueError, match="matrix has 2 rows but the batch has 3 examples"):
            await client.embedding_lookup(
                1, ["emb"], into=LookupTarget(np.zeros((2, 4), np.float32), {"emb": 0})
            )
        matrix = np.full((3, 9), -1.0, dtype=np.float32)
        got = await client.embedding_lookup(
            1, ["emb", "other"], into=LookupTarget(matrix, {"other": 0, "emb": 5})
        )
        want = table.lookup_pool(SIGNS, OFFSETS)
        np.testing.assert_allclose(matrix[:, 5:], want, rtol=1e-6)
        np.testing.assert_allclose(matrix[:, :4], want, rtol=1e-6)
        np.testing.assert_array_equal(matrix[:, 4], -1.0)
        assert np.shares_memory(got["emb"].pooled, matrix)


async def test_a_push_answers_the_next_batch_lookup_once_its_gradients_are_applied() -> None:
    """PushGrad's then_lookup: one call pushes batch 1 and looks up batch 2, whose answer
    (written into the trainer's matrix) already sees batch 1's gradients."""
    table = reference()
    async with running_ps() as (service, client):
        await create(client)
        await client.feed_sample(1, {"emb": (SIGNS, OFFSETS)})
        await client.feed_sample(2, {"emb": (SIGNS[::-1].copy(), OFFSETS)})
        matrix = np.full((3, 6), -1.0, dtype=np.float32)
        then = NextLookup(2, ["emb"], into=LookupTarget(matrix, {"emb": 1}))
        dropped, answers = await client.push_grad_then_lookup(1, {"emb": GRADS}, then)
        table.push_grad(SIGNS, OFFSETS, GRADS)
        want = table.lookup_pool(SIGNS[::-1].copy(), OFFSETS)
        assert dropped == 0 and answers is not None and list(answers) == ["emb"]
        np.testing.assert_allclose(answers["emb"].pooled, want, rtol=1e-6)
        np.testing.assert_allclose(matrix[:, 1:5], want, rtol=1e-6)
        assert np.shares_memory(answers["emb"].pooled, matrix)
        assert service.engine.pending_batches() == 1  # batch 2 waits for its own push
        then = NextLookup(3, ["emb"], release=True)
        await client.feed_sample(3, {"emb": (SIGNS, OFFSETS)})
        assert (await client.push_grad_then_lookup(2, {"emb": GRADS}, then))[1] is not None
        assert service.engine.pending_batches() == 0  # a held-out batch is released


async def test_a_then_lookup_the_ps_cannot_answer_leaves_the_push_applied() -> None:
    """The push stands and the answer says the lookup is not answered (None); the caller's
    own EmbeddingLookup then says why."""
    table = reference()
    async with running_ps() as (_service, client):
        await create(client)
        await client.feed_sample(1, {"emb": (SIGNS, OFFSETS)})
        answer = await client.push_grad_then_lookup(1, {"emb": GRADS}, NextLookup(2, ["emb"]))
        assert answer == (0, None)
        table.push_grad(SIGNS, OFFSETS, GRADS)
        np.testing.assert_allclose(await client.pull("emb", SIGNS), table.get(SIGNS), rtol=1e-6)
        await expect(
            Status.NOT_FOUND,
            "batch 2 of variable 'emb' was not fed to this ps (or was already pushed or expired)",
            client.embedding_lookup(2, ["emb"]),
        )
        await expect(
            Status.ALREADY_EXISTS,
            "batch 1 of variable 'emb' was already pushed; a gradient is applied once",
            client.push_grad(1, {"emb": GRADS}),
        )


def test_a_lookup_target_is_a_writable_contiguous_float32_matrix() -> None:
    cases: tuple[Any, ...] = (
        np.zeros((3, 4), np.float64),
        np.zeros((3, 8), np.float32)[:, :4],
        np.zeros(4, np.float32),
    )
    for bad in cases:
        with pytest.raises(ValueError, match="must be a writable C-contiguous float32"):
            LookupTarget(bad, {"emb": 0})


async def test_unknown_names_get_not_found_and_change_nothing() -> None:
    async with running_ps() as (_service, client):
        await create(client)
        await expect(
            Status.NOT_FOUND,
            "unknown variable 'nope'",
            client.feed_sample(1, {"nope": (SIGNS, OFFSETS)}),
        )
        await expect(
            Status.NOT_FOUND,
            "batch 9 of variable 'emb' was not fed to this ps (or was already pushed or expired)",
            client.embedding_lookup(9, ["emb"]),
        )
        await expect(Status.NOT_FOUND, "unknown variable 'nope'", client.pull("nope", SIGNS))
        assert (await client.stats()).variables[0].rows == 0


@pytest.mark.parametrize(
    ("signs", "offsets", "message"),
    [
        (
            SIGNS.astype(np.int64),
            OFFSETS,
            "variables[0].signs ('emb') must have dtype uint64, got 'int64'",
        ),
        (
            SIGNS,
            np.array([0, 3, 7], dtype=np.int64),
            "offsets[-1] must equal len(signs) = 6, got 7",
        ),
        (SIGNS, np.array([1, 3, 6], dtype=np.int64), "offsets[0] must be 0, got 1"),
        (
            SIGNS,
            np.array([0, 4, 3, 6], dtype=np.int64),
            "offsets must be non-decreasing, but offsets[2] = 3 < offsets[1] = 4",
        ),
    ],
)
async def test_bad_feed_is_invalid_argument(
    signs: np.ndarray, offsets: np.ndarray, message: str
) -> None:
    async with running_ps() as (service, client):
        await create(client)
        await expect(
            Status.INVALID_ARGUMENT, message, client.feed_sample(1, {"emb": (signs, offsets)})
        )
        assert service.engine.pending_batches() == 0


async def test_bad_gradients_change_no_row() -> None:
    async with running_ps() as (_service, client):
        await create(client)
        await client.feed_sample(1, {"emb": (SIGNS, OFFSETS)})
        await client.embedding_lookup(1, ["emb"])
        before = await client.pull("emb", SIGNS)
        await expect(
            Status.INVALID_ARGUMENT,
            "gradient of 'emb' must be float32 of shape (3, 4), got float32 of shape (2, 4)",
            client.push_grad(1, {"emb": GRADS[:2]}),
        )
        nan = GRADS.copy()
        nan[1, 2] = np.nan
        await expect(
            Status.INVALID_ARGUMENT,
            "gradient of 'emb' has NaN or Inf; nothing was applied",
            client.push_grad(1, {"emb": nan}),
        )
        np.testing.assert_array_equal(await client.pull("emb", SIGNS), before)
        assert (await client.stats()).nonfinite_gradients == 1


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, -np.nan])
async def test_any_nonfinite_value_in_a_gradient_is_refused(bad: float) -> None:
    async with running_ps() as (_service, client):
        await create(client)
        await client.feed_sample(1, {"emb": (SIGNS, OFFSETS)})
        before = await client.pull("emb", SIGNS)
        grads = GRADS.copy()
        grads[2, 3] = bad  # the last value: the check must read to the end
        await expect(
            Status.INVALID_ARGUMENT,
            "gradient of 'emb' has NaN or Inf; nothing was applied",
            client.push_grad(1, {"emb": grads}),
        )
        np.testing.assert_array_equal(await client.pull("emb", SIGNS), before)


def test_the_finite_check_reads_strided_and_other_dtypes_too() -> None:
    """Float32 matrices of any positive strides are checked in one kernel call; a gradient
    that is not one (an embedder's float64, a 1-D array, reversed rows) takes numpy's check,
    and each name is judged by its own gradient."""
    product = np.ones((24, 8), dtype=np.float32)
    grads: dict[str, NDArray[Any]] = {
        "block": product[8:16].T,  # a block of the trainer's transposed product
        "strided": product[:, ::2],
        "reversed": product[::-1],
        "float64": np.ones((4, 4)),
        "flat": np.array([1.0, 2.0], dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    assert _nonfinite(grads) == []
    assert _nonfinite({}) == []
    product[23, 6] = np.nan  # in "strided" and "reversed", not in "block"
    grads["float64"][3, 3] = -np.inf
    grads["flat"][1] = np.inf
    assert _nonfinite(grads) == ["strided", "reversed", "float64", "flat"]
    product[15, 7] = np.inf
    assert "block" in _nonfinite(grads)


async def test_nonfinite_drop_policy_drops_and_counts() -> None:
    async with running_ps(config=PsRoleConfig(nonfinite="drop")) as (service, client):
        await create(client)
        await create(client, "other")
        await client.feed_sample(1, {"emb": (SIGNS, OFFSETS), "other": (SIGNS, OFFSETS)})
        await client.embedding_lookup(1, ["emb", "other"])
        before = await client.pull("emb", SIGNS)
        inf = np.full_like(GRADS, np.inf)
        assert await client.push_grad(1, {"emb": inf, "other": GRADS}) == 1
        np.testing.assert_array_equal(await client.pull("emb", SIGNS), before)
        assert not np.array_equal(await client.pull("other", SIGNS), before)
        assert service.engine.pending_batches() == 0


@pytest.mark.parametrize("policy", ["reject", "drop"])
async def test_an_optimizer_overflow_never_serves_a_nonfinite_row(
    policy: Literal["reject", "drop"],
) -> None:
    """A finite gradient too large for Adagrad's accumulator (g*g past float32's range):
    before, the ps served -inf/NaN rows from then on. Now the row keeps its values under either
    policy and Stats counts it."""
    async with running_ps(config=PsRoleConfig(nonfinite=policy)) as (_service, client):
        await create(client)
        await client.feed_sample(1, {"emb": (SIGNS, OFFSETS)})
        await client.embedding_lookup(1, ["emb"])
        before = await client.pull("emb", SIGNS)
        huge = GRADS.copy()
        huge[0] = 3e38  # the first example's signs (5, 6, 5)
        assert await client.push_grad(1, {"emb": huge}) == 0
        after = await client.pull("emb", SIGNS)
        assert np.isfinite(after).all()
        np.testing.assert_array_equal(after[:3], before[:3])  # 5 and 6 kept their values
        assert not np.array_equal(after[3:], before[3:])  # the others were updated
        await client.feed_sample(2, {"emb": (SIGNS, OFFSETS)})
        assert np.isfinite((await client.embedding_lookup(2, ["emb"]))["emb"].pooled).all()
        stats = (await client.stats()).variables[0]
        assert stats.nonfinite_updates == 2


async def test_oversized_message_is_resource_exhausted() -> None:
    async with running_ps(max_message_bytes=1000) as (_service, client):
        await create(client)
        big = np.arange(1000, dtype=np.uint64)
        with pytest.raises(GRPCError) as info:
            await client.feed_sample(1, {"emb": (big, np.array([0, 1000]))})
        assert info.value.status == Status.RESOURCE_EXHAUSTED
        assert "exceeds this server's limit of 1,000 bytes" in str(info.value.message)


@pytest.mark.parametrize(
    ("kwargs", "status", "message"),
    [
        (
            {"optimizer": "rmsprop"},
            Status.INVALID_ARGUMENT,
            "optimizer.name must be one of sgd, adagrad, adam, ftrl, got 'rmsprop'",
        ),
        (
            {"optimizer_params": {"momentum": 0.9}},
            Status.INVALID_ARGUMENT,
            "optimizer.params has 'momentum', which adagrad does not take; it takes eps, "
            "initial_accumulator_value, lr",
        ),
        ({"dim": 0}, Status.INVALID_ARGUMENT, "dim must be in [1, 4096], got 0"),
        ({"capacity": 2**40}, Status.RESOURCE_EXHAUSTED, None),
    ],
)
async def test_bad_variable_configs(
    kwargs: dict[str, object], status: Status, message: str | None
) -> None:
    args: dict[str, object] = {"name": "v", "dim": 4, "capacity": 10} | kwargs
    async with running_ps() as (service, client):
        with pytest.raises(GRPCError) as info:
            await client.create_variable(VariableConfig(**args))  # type: ignore[arg-type]
        assert info.value.status == status
        if message is not None:
            assert info.value.message == message
        assert service.engine.variables == ()


async def test_create_is_idempotent_and_conflicts_are_refused() -> None:
    async with running_ps() as (_service, client):
        await create(client)
        await create(client, created=False)
        await expect(
            Status.ALREADY_EXISTS,
            "variable 'emb' exists with another configuration",
            client.create_variable(VariableConfig("emb", 8, 100)),
        )


async def test_lookup_with_release_frees_the_batch_and_repeats_are_refused() -> None:
    async with running_ps() as (service, client):
        await create(client)
        await client.feed_sample(1, {"emb": (SIGNS, OFFSETS)})
        await expect(
            Status.INVALID_ARGUMENT,
            "names repeats 'emb'; ask once",
            client.embedding_lookup(1, ["emb", "emb"]),
        )
        await client.embedding_lookup(1, ["emb"], release=True)
        assert service.engine.pending_batches() == 0


async def test_save_and_restore_round_trip(tmp_path: Path) -> None:
    config = PsRoleConfig(checkpoint_root=str(tmp_path))
    async with running_ps(config=config) as (_, client):
        await create(client)
        await client.feed_sample(1, {"emb": (SIGNS, OFFSETS)})
        await client.embedding_lookup(1, ["emb"])
        await client.push_grad(1, {"emb": GRADS})
        saved = await client.pull("emb", SIGNS)
        done = await client.save(str(tmp_path / "ck"))
        digest = manifest_digest(tmp_path / "ck")  # what a job checkpoint records
        assert done == Checkpointed(("emb",), 5, digest)
    async with running_ps(scheduler="work_stealing", config=config) as (_service, client):
        restored = await client.restore("ck")  # relative to the root
        assert restored == Checkpointed(("emb",), 5, digest)
        np.testing.assert_array_equal(await client.pull("emb", SIGNS), saved)
        await expect(
            Status.NOT_FOUND,
            f"{tmp_path / 'missing'} has no manifest.json: not a sniper checkpoint",
            client.restore(str(tmp_path / "missing")),
        )


async def test_push_overwrites_rows() -> None:
    async with running_ps() as (_service, client):
        await create(client)
        rows = np.arange(8, dtype=np.float32).reshape(2, 4)
        await client.push("emb", SIGNS[:2], rows)
        np.testing.assert_array_equal(await client.pull("emb", SIGNS[:2]), rows)


async def test_push_refuses_rows_a_lookup_could_pool_to_inf() -> None:
    async with running_ps() as (_service, client):
        await create(client)
        huge = np.full((2, 4), 3e38, np.float32)  # finite, but two of them sum to Inf
        await expect(
            Status.INVALID_ARGUMENT,
            "rows of 'emb' hold a value of magnitude 3e+38, over Push's bound of 1e+30 (a "
            "lookup's sum of such rows could overflow float32); nothing was written",
            client.push("emb", SIGNS[:2], huge),
        )
        assert (await client.stats()).variables[0].rows == 0
        bound = np.full((2, 4), -MAX_PUSH_VALUE, np.float32)  # the bound itself is written
        await client.push("emb", SIGNS[:2], bound)
        await client.feed_sample(1, {"emb": (SIGNS[:2], np.array([0, 2]))})
        pooled = (await client.embedding_lookup(1, ["emb"]))["emb"].pooled
        assert np.isfinite(pooled).all()
        np.testing.assert_allclose(pooled, np.full((1, 4), -2e30), rtol=1e-6)


async def test_health_turns_not_serving_once_the_ps_cannot_serve() -> None:
    request = HealthCheckRequest(service="sniper.v1.Ps")
    for stop in ("drain", "close the scheduler"):
        async with running_ps() as (service, client):
            health = HealthStub(client.channel)
            assert (await health.check(request)).status == HealthCheckResponseServingStatus.SERVING
            if stop == "drain":
                await service.drain()
            else:
                service.engine.scheduler.close()  # nothing can run its kernels any more
            answer = await health.check(request)
            assert answer.status == HealthCheckResponseServingStatus.NOT_SERVING, stop


async def test_draining_refuses_new_calls() -> None:
    async with running_ps() as (service, client):
        await create(client)
        await service.drain()
        await expect(
            Status.UNAVAILABLE, "this ps is shutting down; retry on another", client.stats()
        )


async def test_a_bug_is_internal_with_an_id_and_a_logged_traceback(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_ps() as (role, client):

        async def broken() -> None:
            raise IndexError("a bug in Stats")

        monkeypatch.setattr(role, "stats", broken)
        with caplog.at_level(logging.ERROR), pytest.raises(GRPCError) as info:
            await client.stats()
    assert info.value.status == Status.INTERNAL  # not INVALID_ARGUMENT: not the caller's fault
    found = re.fullmatch(
        r"internal error ([0-9a-f]{12}) in Stats \(IndexError\); this is a bug in sniper: "
        r"the server's log has the traceback under this id",
        info.value.message or "",
    )
    assert found is not None
    assert any(found.group(1) in r.getMessage() and r.exc_info is not None for r in caplog.records)


async def test_a_pull_bigger_than_the_message_limit_is_refused_before_gathering() -> None:
    async with running_ps(max_message_bytes=2**20) as (_role, client):
        await client.create_variable(VariableConfig("wide", 4096, 1000))
        signs = np.arange(100, dtype=np.uint64)  # 100 rows of 16 KB: 1.6 MB
        await expect(
            Status.RESOURCE_EXHAUSTED,
            "Pull of 100 rows of 'wide' would answer 2 MB, over this server's max_message_mb "
            "of 1; pull fewer signs at a time",
            client.pull("wide", signs),
        )
        assert (await client.pull("wide", signs[:50])).shape == (50, 4096)


async def test_a_lookup_bigger_than_the_message_limit_is_refused_before_gathering() -> None:
    """The finding's numbers: an answer of 305 MiB against max_message_mb 256."""
    async with running_ps(max_message_bytes=256 * 2**20) as (role, client):
        await client.create_variable(VariableConfig("wide", 1024, 16))
        examples = 78_125  # one sign each, the same one: 78,125 x 1024 x 4 B = 305 MiB pooled
        signs = np.full(examples, 7, dtype=np.uint64)
        await client.feed_sample(1, {"wide": (signs, np.arange(examples + 1, dtype=np.int64))})
        await expect(
            Status.RESOURCE_EXHAUSTED,
            "EmbeddingLookup of batch 1 (1 variables) would answer 305 MB, over this server's "
            "max_message_mb of 256; look up fewer variables at a time, or smaller batches",
            client.embedding_lookup(1, ["wide"]),
        )
        assert role.engine.pending_batches() == 1  # refused before anything: still fed
        host, _, port = client.address.rpartition(":")
        narrow = PsClient(host, int(port), wire_dtype="bfloat16")  # 153 MB: within the limit
        try:
            half = await narrow.embedding_lookup(1, ["wide"])
        finally:
            narrow.close()
        assert half["wide"].pooled.shape == (examples, 1024)
