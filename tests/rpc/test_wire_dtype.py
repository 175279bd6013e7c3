"""Pooled embeddings and gradients in half the bytes (``wire_dtype``): bfloat16 and float16 on
the wire, float32 on both ends, over real loopback gRPC."""

from __future__ import annotations

import numpy as np
import pytest
from grpclib.const import Status
from hypothesis import given
from hypothesis import strategies as st

from sniper.rpc import PsClient
from sniper.rpc._generated.sniper.v1 import EmbeddingLookupRequest
from sniper.rpc._tensor import decode_floats, encode, narrow
from sniper.rpc._wire import lookup_response, push_grad_wire
from sniper.testing import running_ps
from tests.rpc.test_ps_service import GRADS, OFFSETS, SIGNS, create, expect

pytestmark = pytest.mark.anyio


def _round_trip(values: np.ndarray, dtype: str) -> np.ndarray:
    return decode_floats(encode(narrow(values, dtype), dtype), "x", values.ndim)


@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1))
def test_bfloat16_keeps_8_bits_of_mantissa_and_float32_range(values: list[float]) -> None:
    array = np.array(values, dtype=np.float32)
    back = _round_trip(array, "bfloat16")
    assert back.dtype == np.float32
    size, error = np.abs(array), np.abs(back - array)
    normal = (size >= np.finfo(np.float32).tiny) & (size < np.float32(3.38e38))  # top: to inf
    assert np.all(error[normal] <= size[normal] * 2**-8)
    assert np.all(error[size < np.finfo(np.float32).tiny] <= 2.0**-134)  # subnormals: absolute


def test_bfloat16_rounds_to_nearest_even_and_keeps_specials() -> None:
    # 1 + 2**-8 is halfway between 1 and 1 + 2**-7: ties go to the even mantissa (1).
    halfway = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1.5, -2.0, 0.0], dtype=np.float32)
    assert _round_trip(halfway, "bfloat16").tolist() == [1.0, 1 + 2**-6, 1.5, -2.0, 0.0]
    specials = np.array([np.nan, np.inf, -np.inf], dtype=np.float32)
    specials_bits = np.array([0x7F800001], dtype=np.uint32).view(np.float32)  # a NaN
    back = _round_trip(np.concatenate([specials, specials_bits]), "bfloat16")
    assert np.isnan(back[0]) and np.isnan(back[3]) and back[1] == np.inf and back[2] == -np.inf


def test_float16_is_exact_to_11_bits_and_clips_finite_values_to_its_range() -> None:
    values = np.array([0.1, 65504.0, 70000.0, -1e30, np.inf, np.nan], dtype=np.float32)
    back = _round_trip(values, "float16")
    assert abs(back[0] - 0.1) <= 0.1 * 2**-11
    assert back[1:5].tolist() == [65504.0, 65504.0, -65504.0, np.inf] and np.isnan(back[5])


async def _one_step(wire: str, grads: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """A fresh ps, and a client asking for ``wire``: the standard variable's batch fed, looked
    up and pushed with ``grads``. The pooled answer, the rows after the push, and whether the
    ps's answer said it reads ``grad_transposed``."""
    async with running_ps() as (_, plain):
        host, port = plain.address.rsplit(":", 1)
        client = PsClient(host, int(port), wire_dtype=wire)
        try:
            await create(client)
            await client.feed_sample(1, {"emb": (SIGNS, OFFSETS)})
            looked = (await client.embedding_lookup(1, ["emb"]))["emb"].pooled
            reads_transposed = client._reads_transposed
            assert await client.push_grad(1, {"emb": grads}) == 0
            return looked, await client.pull("emb", np.unique(SIGNS)), reads_transposed
        finally:
            client.close()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
async def test_a_training_step_in_half_the_bytes(dtype: str) -> None:
    results = {}
    for wire in ("float32", dtype):
        looked, rows, _ = await _one_step(wire, GRADS)
        assert looked.dtype == np.float32
        results[wire] = (looked, rows)
    (looked32, rows32), (looked16, rows16) = results["float32"], results[dtype]
    tolerance = 2**-8 if dtype == "bfloat16" else 2**-11
    assert np.allclose(looked16, looked32, rtol=tolerance, atol=1e-6)
    assert np.allclose(rows16, rows32, rtol=4 * tolerance, atol=1e-4)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_the_bytes_on_the_wire(dtype: str) -> None:
    pooled = np.random.default_rng(0).normal(size=(1024, 16)).astype(np.float32)
    items = [(f"v{i}", pooled) for i in range(4)]
    full = len(lookup_response([(n, a, 0.0) for n, a in items]).wire)
    half = len(lookup_response([(n, a, 0.0) for n, a in items], dtype).wire)
    assert half < 0.51 * full
    assert len(push_grad_wire(7, items, dtype).wire) < 0.51 * len(push_grad_wire(7, items).wire)


async def test_an_unknown_pooled_dtype_is_refused_and_frees_nothing() -> None:
    async with running_ps() as (_, client):
        await create(client)
        await client.feed_sample(1, {"emb": (SIGNS, OFFSETS)})
        request = EmbeddingLookupRequest(
            batch_id=1, names=["emb"], release=True, pooled_dtype="int8"
        )
        await expect(
            Status.INVALID_ARGUMENT,
            "pooled_dtype must be one of float32, bfloat16, float16 (or empty), got 'int8'",
            client.stub.embedding_lookup(request),
        )
        assert (await client.embedding_lookup(1, ["emb"], release=True))["emb"].pooled.shape == (
            3,
            4,
        )


def test_a_client_refuses_an_unknown_wire_dtype() -> None:
    with pytest.raises(ValueError, match="wire_dtype must be one of float32, bfloat16, float16"):
        PsClient("127.0.0.1", 1, wire_dtype="float64")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
async def test_a_gradient_sent_transposed_updates_the_rows_a_c_ordered_one_does(dtype: str) -> None:
    """The numpy MLP's gradients lie transposed in memory and travel so (``grad_transposed``):
    over real gRPC the ps applies exactly the update of the same gradient laid out C-ordered."""
    rows = {}
    for layout, grads in (("C", GRADS), ("F", np.asfortranarray(GRADS))):
        _, rows[layout], reads_transposed = await _one_step(dtype, grads)
        assert reads_transposed  # the ps's lookup answer said so: "F" goes as its transpose
    assert np.array_equal(rows["C"], rows["F"])
    assert not np.array_equal(rows["C"], np.zeros_like(rows["C"]))
