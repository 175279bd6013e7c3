"""The fast wire path agrees with betterproto byte for byte, and refuses garbage cleanly."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sniper.rpc import SniperCodec
from sniper.rpc._generated.sniper.v1 import (
    DataServed,
    EmbeddingLookupRequest,
    EmbeddingLookupResponse,
    FeedSampleRequest,
    PooledEmbedding,
    PullRequest,
    PushGradRequest,
    PushGradResponse,
    PushRequest,
    ReadSampleResponse,
    Tensor,
    VariableGradient,
    VariableSigns,
)
from sniper.rpc._tensor import TensorError, decode, encode, wire_array
from sniper.rpc._wire import (
    DECODERS,
    ENCODERS,
    EncodedLookupResponse,
    LookupArrays,
    LookupRequestView,
    WireError,
    decode_gradient,
    decode_lookup_answer,
    decode_push_answer,
    feed_sample_wire,
    lookup_response,
    push_grad_wire,
    push_response,
    read_sample_wire,
)
from sniper.rpc._wire import _tensor as _tensor
from tests.rpc import _grpcio
from tests.rpc._grpcio import GrpcModules

grpcio_modules = _grpcio.grpcio_modules

names = st.text(max_size=12)
tensors = st.builds(
    Tensor,
    dtype=st.sampled_from(["float32", "uint64", "int64", ""]),
    shape=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
    data=st.binary(max_size=64),
)
u64 = st.integers(0, 2**64 - 1)


lookup_requests = st.builds(
    EmbeddingLookupRequest,
    batch_id=u64,
    names=st.lists(names, max_size=4),
    release=st.booleans(),
    pooled_dtype=st.sampled_from(["", "float32", "bfloat16", "float16", "é"]),
)


lookup_responses = st.builds(
    EmbeddingLookupResponse,
    embeddings=st.lists(
        st.builds(
            PooledEmbedding,
            name=names,
            pooled=tensors,
            kernel_seconds=st.floats(allow_nan=False),
            offsets=st.one_of(st.none(), tensors),
        ),
        max_size=3,
    ),
    reads_grad_transposed=st.booleans(),
)


def _sample(served: DataServed | None, **fields: Any) -> ReadSampleResponse:
    message = ReadSampleResponse(**fields)
    if served is not None:
        message.served = served
    return message


messages = st.one_of(
    st.builds(
        _sample,
        served=st.one_of(
            st.none(),
            st.builds(
                DataServed,
                data=names,
                variables=st.lists(names, max_size=3),
                dense_features=st.integers(0, 2**32 - 1),
                batch_size=st.integers(0, 2**32 - 1),
                digest=names,
            ),
        ),
        batch_id=u64,
        labels=st.one_of(st.none(), tensors),
        dense=st.one_of(st.none(), tensors),
        end_of_data=st.booleans(),
    ),
    lookup_requests,
    st.builds(
        FeedSampleRequest,
        batch_id=u64,
        variables=st.lists(
            st.builds(
                VariableSigns,
                name=names,
                signs=tensors,
                offsets=tensors,
                weights=st.one_of(st.none(), tensors),
            ),
            max_size=3,
        ),
    ),
    st.builds(
        PushGradRequest,
        batch_id=u64,
        grads=st.lists(
            st.builds(
                VariableGradient,
                name=names,
                grad=st.one_of(st.none(), tensors),
                grad_transposed=st.one_of(st.none(), tensors),
            ),
            max_size=3,
        ),
        then_lookup=st.one_of(st.none(), lookup_requests),
    ),
    lookup_responses,
)


def normalized(message: Any) -> bytes:
    """Canonical bytes: betterproto's serialization of the message."""
    return bytes(message)


@settings(max_examples=300, deadline=None)
@given(messages)
def test_fast_encoding_is_what_betterproto_writes(message: object) -> None:
    assert ENCODERS[type(message)](message) == normalized(message)


@settings(max_examples=300, deadline=None)
@given(messages)
def test_fast_decoding_reads_what_betterproto_writes(message: object) -> None:
    decoded = DECODERS[type(message)](normalized(message))
    if hasattr(decoded, "to_message"):  # requests decode to plain views
        decoded = decoded.to_message()
    assert normalized(decoded) == normalized(message)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(list(DECODERS)), st.binary(max_size=200))
def test_garbage_is_a_wire_error_or_a_message(kind: type, data: bytes) -> None:
    with contextlib.suppress(WireError):
        DECODERS[kind](data)


def test_tensor_data_is_not_copied() -> None:
    signs = np.arange(1000, dtype=np.uint64)
    request = FeedSampleRequest(
        batch_id=1,
        variables=[
            VariableSigns(
                name="a", signs=Tensor(dtype="uint64", shape=[1000], data=signs.tobytes())
            )
        ],
    )
    wire = ENCODERS[FeedSampleRequest](request)
    decoded = DECODERS[FeedSampleRequest](wire)
    data = decoded.variables[0].signs.data
    assert isinstance(data, memoryview) and data.obj is wire
    assert np.array_equal(np.frombuffer(data, dtype=np.uint64), signs)


def test_prepared_lookup_response_equals_the_betterproto_encoding() -> None:
    pooled = np.arange(12, dtype=np.float32).reshape(3, 4)
    prepared = lookup_response([("a", pooled, 0.5), ("b", pooled[:1], 0.0)])
    reference = EmbeddingLookupResponse(
        embeddings=[
            PooledEmbedding(
                name="a",
                pooled=Tensor(dtype="float32", shape=[3, 4], data=pooled.tobytes()),
                kernel_seconds=0.5,
            ),
            PooledEmbedding(
                name="b", pooled=Tensor(dtype="float32", shape=[1, 4], data=pooled[:1].tobytes())
            ),
        ],
        reads_grad_transposed=True,  # a ps of this version says it reads grad_transposed
    )
    assert SniperCodec(2**20).encode(prepared, EmbeddingLookupResponse) == bytes(reference)
    assert decode_lookup_answer(bytes(reference)).reads_grad_transposed
    reference.reads_grad_transposed = False  # what a ps from before the field answers
    assert not decode_lookup_answer(bytes(reference)).reads_grad_transposed


@pytest.mark.parametrize("dropped", [0, 3])
def test_a_push_answer_carrying_a_lookup_equals_the_betterproto_encoding(dropped: int) -> None:
    """A PushGrad's answer nests the prepared lookup answer as it is; a betterproto reader
    and the client's fast path both read the lookup back, and its absence as None."""
    pooled = np.arange(8, dtype=np.float32).reshape(2, 4)
    looked_up = lookup_response([("a", pooled, 0.25)])
    prepared = push_response(dropped, looked_up)
    reference = PushGradResponse(
        dropped_nonfinite=dropped,
        looked_up=EmbeddingLookupResponse().parse(looked_up.wire),
    )
    wire = SniperCodec(2**20).encode(prepared, PushGradResponse)
    assert wire == bytes(reference)
    answer = decode_push_answer(wire)
    assert answer.dropped_nonfinite == dropped
    assert answer.looked_up == decode_lookup_answer(looked_up.wire)
    plain = SniperCodec(2**20).encode(push_response(dropped, None), PushGradResponse)
    assert plain == bytes(PushGradResponse(dropped_nonfinite=dropped))
    assert decode_push_answer(plain) == (dropped, None)


def test_an_embedded_message_sent_twice_merges_as_protobuf_does(
    grpcio_modules: GrpcModules,
) -> None:
    """Protobuf merges a message field that comes twice (concatenated messages parse as their
    merge): a repeated field appends, a scalar is replaced, as Google's protobuf reads them
    (betterproto keeps the last one instead)."""
    first = PushGradRequest(batch_id=1, then_lookup=EmbeddingLookupRequest(batch_id=4, names=["a"]))
    second = PushGradRequest(then_lookup=EmbeddingLookupRequest(names=["b"], release=True))
    wire = bytes(first) + bytes(second)
    view = DECODERS[PushGradRequest](wire)
    assert view.then_lookup == LookupRequestView(4, ["a", "b"], True, "")
    reference = grpcio_modules.pb.PushGradRequest.FromString(wire)
    assert bytes(view.to_message()) == reference.SerializeToString()
    pooled = lookup_response([("a", np.ones((1, 2), np.float32), 0.5)]).wire
    answer = bytes(PushGradResponse(looked_up=EmbeddingLookupResponse().parse(pooled)))
    merged = decode_push_answer(answer + answer).looked_up
    assert merged is not None and [name for name, *_ in merged.items] == ["a", "a"]


def test_an_unknown_field_3_of_a_feed_is_skipped() -> None:
    """FeedSampleRequest shares PushGradRequest's reader, whose field 3 is then_lookup: in a
    feed, field 3 is unknown and skipped, whatever its wire type, as proto3 requires."""
    feed = FeedSampleRequest(batch_id=9, variables=[VariableSigns(name="a")])
    for extra in (b"\x18\x05", b"\x1a\x01x"):  # a varint, then a length-delimited field 3
        view = DECODERS[FeedSampleRequest](bytes(feed) + extra)
        assert bytes(view.to_message()) == bytes(feed)


@pytest.mark.parametrize("describe", [False, True])
def test_a_prepared_sample_equals_the_betterproto_encoding(describe: bool) -> None:
    labels = np.array([1.0, 0.0, 1.0], dtype=np.float32)
    dense = np.arange(6, dtype=np.float32).reshape(3, 2)[:, ::-1]  # not contiguous: copied
    served = DataServed(data="parquet:x", variables=["a", "b"], dense_features=2, digest="d")
    prepared = read_sample_wire(7, labels, dense, served if describe else None)
    reference = ReadSampleResponse(batch_id=7, labels=encode(labels), dense=encode(dense))
    if describe:
        reference.served = served
    wire = SniperCodec(2**20).encode(prepared, ReadSampleResponse)
    assert wire == bytes(reference)
    view = DECODERS[ReadSampleResponse](wire)
    np.testing.assert_array_equal(decode(view.dense, "dense", "float32", 2), dense)
    assert view.served == (served if describe else None)


def test_a_tensor_sent_in_two_pieces_is_merged_as_protobuf_does() -> None:
    """Protobuf merges an embedded message that occurs twice in one record; grpcio does, so
    the fast path must too (scalars present again replace, repeated fields append)."""
    piece_one = bytes(VariableSigns(name="a", signs=Tensor(dtype="uint64", shape=[2])))
    piece_two = bytes(VariableSigns(signs=Tensor(data=np.array([5, 6], np.uint64).tobytes())))
    record = piece_one + piece_two
    wire = b"\x12" + bytes([len(record)]) + record  # field 2 (variables), one entry
    signs = DECODERS[FeedSampleRequest](wire).variables[0].signs
    assert (signs.dtype, list(signs.shape)) == ("uint64", [2])
    assert np.frombuffer(signs.data, dtype=np.uint64).tolist() == [5, 6]


@settings(max_examples=200, deadline=None)
@given(lookup_responses)
def test_lookup_items_carry_what_the_betterproto_message_carries(message: Any) -> None:
    """PsClient's fast path (LookupArrays) sees the same names, tensors, seconds and flag."""
    answer = DECODERS[LookupArrays](normalized(message))
    items = answer.items
    assert answer.reads_grad_transposed == message.reads_grad_transposed
    expected = DECODERS[EmbeddingLookupResponse](normalized(message)).embeddings
    assert [name for name, _, _, _ in items] == [e.name for e in expected]
    assert [seconds for _, _, seconds, _ in items] == [e.kernel_seconds for e in expected]
    for (_, raw, _, offsets), e in zip(items, expected, strict=True):
        assert raw is not None and e.pooled is not None
        assert (raw.dtype, raw.shape, bytes(raw.data)) == (
            e.pooled.dtype,
            e.pooled.shape,
            bytes(e.pooled.data),
        )
        assert (offsets is None) == (e.offsets is None)
        if offsets is not None:
            assert (offsets.dtype, offsets.shape, bytes(offsets.data)) == (
                e.offsets.dtype,
                e.offsets.shape,
                bytes(e.offsets.data),
            )


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 2**64 - 1),
    st.lists(st.tuples(names, st.integers(0, 5), st.booleans()), max_size=3),
)
def test_requests_written_from_arrays_are_what_betterproto_writes(
    batch_id: int, specs: list[tuple[str, int, bool]]
) -> None:
    """PsClient's FeedSample and PushGrad bytes, also from strided and big-endian arrays."""
    rng = np.random.default_rng(len(specs))
    feed, grads = [], []
    for name, n, odd_layout in specs:
        signs = rng.integers(0, 2**63, size=2 * n, dtype=np.uint64)[::2]
        offsets = np.arange(n + 1, dtype=">i8" if odd_layout else "<i8")
        grad = rng.standard_normal((n, 3)).astype(np.float32)
        feed.append((name, signs, offsets))
        grads.append((name, grad.T.copy().T if odd_layout else grad))
    expected_feed = FeedSampleRequest(
        batch_id=batch_id,
        variables=[
            VariableSigns(name=name, signs=encode(s), offsets=encode(o)) for name, s, o in feed
        ],
    )
    expected_push = PushGradRequest(
        batch_id=batch_id, grads=[VariableGradient(name=n, grad=encode(g)) for n, g in grads]
    )
    as_wire = [(n, wire_array(s), wire_array(o)) for n, s, o in feed]
    assert feed_sample_wire(batch_id, as_wire).wire == bytes(expected_feed)
    as_grads = [(n, wire_array(g)) for n, g in grads]
    assert push_grad_wire(batch_id, as_grads).wire == bytes(expected_push)
    then = EmbeddingLookupRequest(batch_id=batch_id ^ 1, names=[n for n, _, _ in specs])
    expected_push.then_lookup = then
    assert push_grad_wire(batch_id, as_grads, then=then).wire == bytes(expected_push)


# Found by tests/rpc/test_fuzz.py in CI: a flipped bit turned a shape's tag from "length
# delimited" (0x12) into "start group" (0x13), which betterproto reads as a shape of [None].
# The Pull and Push handlers answered INTERNAL (a TypeError) instead of INVALID_ARGUMENT.
_FLIPPED_SHAPE_TAG = {
    PullRequest: b"\n\x04fuzz\x12-\n\x06uint64\x13\x01\x04\x1a \x01\x00\x00\x00\x00\x01\x00\x00"
    b"\x02\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff"
    b"\xff\xff",
    PushRequest: b"\n\x04fuzz\x12\x1d\n\x06uint64\x13\x01\x02\x1a\x10\x08\x00\x00\x00\x00\x01"
    b"\x00\x00\t\x00\x00\x00\x00\x00\x00\x00\x1a/\n\x07float32\x12\x02\x02\x04\x1a \x00\x00\x80?"
    b"\x00\x00\x80?\x00\x00\x80?\x00\x00\x80?\x00\x00\x80?\x00\x00\x80?\x00\x00\x80?\x00\x00\x80?",
}


def test_a_shape_read_from_a_tag_of_another_wire_type_is_refused_by_name() -> None:
    for message, data in _FLIPPED_SHAPE_TAG.items():
        signs = message().parse(data).signs
        with pytest.raises(
            TensorError, match=r"^signs must have 1 non-negative dimensions, got shape \(None,\)$"
        ):
            decode(signs, "signs", "uint64", 1)


@pytest.mark.parametrize(
    "batch_id", [0, 1, 0x7F, 0x80, 0x3FFF, 0x4000, 2**35 - 1, 2**35, 2**63, 2**64 - 1]
)
def test_varints_at_each_length_boundary_are_what_betterproto_writes_and_reads(
    batch_id: int,
) -> None:
    """The one-byte fast paths (below 0x80) and the loop meet at 0x7F/0x80: both sides of it,
    and of each further byte, encode and decode as betterproto does."""
    grad = np.ones((0x80, 1), dtype=np.float32)  # a shape and a length past one byte
    expected = PushGradRequest(
        batch_id=batch_id, grads=[VariableGradient(name="v", grad=encode(grad))]
    )
    wire = push_grad_wire(batch_id, [("v", grad)]).wire
    assert wire == bytes(expected)
    view = DECODERS[PushGradRequest](wire)
    assert view.batch_id == batch_id and view.grads[0].grad.shape == [0x80, 1]


@pytest.mark.parametrize("data", [b"\x08", b"\x08\x80", b"\x12\x05v"])
def test_a_message_cut_inside_a_varint_or_a_field_is_a_wire_error(data: bytes) -> None:
    with pytest.raises(WireError):
        DECODERS[PushGradRequest](data)


def test_a_gradient_laid_out_transposed_travels_as_its_transpose() -> None:
    """The numpy MLP's gradients are blocks of one transposed product: each goes as
    ``grad_transposed``, its bytes the product's rows as they lie (no transposing copy), and it
    reads back as the same ``[batch, dim]`` values; a C-ordered gradient still goes as
    ``grad``."""
    product = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    blocks = {"a": product[0:2].T, "b": product[2:6].T}  # [5, 2] and [5, 4], Fortran-ordered
    plain = np.arange(10, dtype=np.float32).reshape(5, 2)
    wire = push_grad_wire(3, [*blocks.items(), ("c", plain)], transposed=True).wire
    expected = PushGradRequest(
        batch_id=3,
        grads=[
            *(VariableGradient(name=n, grad_transposed=encode(g.T)) for n, g in blocks.items()),
            VariableGradient(name="c", grad=encode(plain)),
        ],
    )
    assert wire == bytes(expected)
    assert product[0:2].tobytes() in wire and product[2:6].tobytes() in wire  # rows as they lie
    # To a ps that has not said it reads grad_transposed (one from before the field), every
    # gradient goes as grad, laid out C-ordered.
    older = push_grad_wire(3, [*blocks.items(), ("c", plain)]).wire
    expected_older = [VariableGradient(name=n, grad=encode(g)) for n, g in blocks.items()]
    expected_older.append(VariableGradient(name="c", grad=encode(plain)))
    assert older == bytes(PushGradRequest(batch_id=3, grads=expected_older))
    for message in (DECODERS[PushGradRequest](wire), PushGradRequest().parse(wire)):
        got = [decode_gradient(variable, i) for i, variable in enumerate(message.grads)]
        assert [g.shape for g in got] == [(5, 2), (5, 4), (5, 2)]
        for back, sent in zip(got, [*blocks.values(), plain], strict=True):
            assert np.array_equal(back, sent)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_transposed_gradient_in_16_bits_is_the_same_as_a_c_ordered_one(dtype: str) -> None:
    grad = np.random.default_rng(1).standard_normal((4, 7)).astype(np.float32).T
    sent = DECODERS[PushGradRequest](push_grad_wire(1, [("v", grad)], dtype, transposed=True).wire)
    plain = DECODERS[PushGradRequest](push_grad_wire(1, [("v", grad.copy())], dtype).wire)
    assert sent.grads[0].grad is None and plain.grads[0].grad_transposed is None
    assert np.array_equal(decode_gradient(sent.grads[0], 0), decode_gradient(plain.grads[0], 0))


def test_a_gradient_sent_both_ways_neither_or_misshapen_is_refused_by_name() -> None:
    tensor = encode(np.ones((2, 3), dtype=np.float32))
    both = VariableGradient(name="v", grad=tensor, grad_transposed=tensor)
    with pytest.raises(ValueError, match=r"^grads\[4\] \('v'\) sets both grad and grad_transposed"):
        decode_gradient(both, 4)
    view = DECODERS[PushGradRequest](b"\x12\x03\x0a\x01v").grads[0]  # a name, no tensor
    for message in (VariableGradient(name="v"), view):
        with pytest.raises(ValueError, match=r"^grads\[1\] \('v'\) sets neither grad nor grad_t"):
            decode_gradient(message, 1)
    flat = VariableGradient(name="v", grad_transposed=encode(np.ones(6, dtype=np.float32)))
    with pytest.raises(TensorError, match=r"^grads\[0\]\.grad_transposed \('v'\) must have 2"):
        decode_gradient(DECODERS[PushGradRequest](bytes(PushGradRequest(grads=[flat]))).grads[0], 0)


def _tensor_records(tensor: Tensor) -> list[bytes]:
    """Each field of ``tensor`` as a record of its own (a Tensor of that field alone)."""
    return [
        bytes(Tensor(dtype=tensor.dtype)),
        bytes(Tensor(shape=tensor.shape)),
        bytes(Tensor(data=tensor.data)),
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(tensors, min_size=1, max_size=3), st.randoms(use_true_random=False), st.booleans())
def test_a_tensor_reads_as_protobuf_merges_it_in_any_order(
    grpcio_modules: GrpcModules, sent: list[Tensor], order: Any, unknown: bool
) -> None:
    """The fields of one or more Tensors in any order, an unknown field among them: read as
    Google's protobuf merges them (the last dtype and data, every shape entry in order),
    whether the reader takes them in one pass (fields once each, in order) or field by
    field."""
    records = [record for tensor in sent for record in _tensor_records(tensor)]
    if len(sent) > 1 or unknown:
        order.shuffle(records)
    if unknown:
        records.insert(order.randrange(len(records) + 1), b"\x20\x05")  # field 4, varint 5
    wire = b"".join(records)
    expected = grpcio_modules.pb.Tensor.FromString(wire)
    read = _tensor(memoryview(wire))
    assert (read.dtype, read.shape, bytes(read.data)) == (
        expected.dtype,
        list(expected.shape),
        expected.data,
    )


def test_a_prepared_answer_is_sent_the_same_from_its_bytes_or_its_pieces() -> None:
    """A handler may prepare an answer from bytes, as before pieces, or from pieces: the codec
    sends the same message either way."""
    answer = lookup_response([("a", np.ones((3, 2), np.float32), 0.5)])
    from_bytes = EncodedLookupResponse(answer.wire)
    codec = SniperCodec(1 << 20)
    assert codec.encode(from_bytes, EmbeddingLookupResponse) == answer.wire
    sent = codec.encode_parts(from_bytes, EmbeddingLookupResponse)
    assert b"".join(sent) == b"".join(codec.encode_parts(answer, EmbeddingLookupResponse))
    assert decode_lookup_answer(answer.wire).items[0][0] == "a"
