"""Garbage at every method of a real ``sniper serve``: a status, never a crash or a hang.

Raw request bytes go through grpcio's generic ``unary_unary`` (no serializer), so the server
sees exactly what hypothesis made: random bytes, valid messages truncated or with flipped
bytes, and well-formed messages whose fields are wrong (dtypes, shapes, offsets, names,
configurations, NaN gradients). Every call must answer one of ``ALLOWED`` within its deadline,
the process must stay up, and afterwards a variable trained before the campaign must still
equal a local ``EmbeddingTable`` fed the same steps: no garbage changed a table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import grpc
import numpy as np
import pytest
from grpclib.exceptions import GRPCError
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from sniper.rpc import SniperCodec
from sniper.rpc.v1 import CreateVariableRequest, SaveRequest
from sniper.store import Adagrad, EmbeddingTable, uniform
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
SERVE_ARGS = ("--max-message-mb", "1")

CALL_TIMEOUT = 10.0
ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.PERMISSION_DENIED,  # a Save or Restore outside the checkpoint_root
    grpc.StatusCode.DATA_LOSS,  # a checkpoint whose files do not match its manifest
    grpc.StatusCode.FAILED_PRECONDITION,
}
PS_METHODS = {
    "CreateVariable": ("CreateVariableRequest", "CreateVariableResponse"),
    "FeedSample": ("FeedSampleRequest", "FeedSampleResponse"),
    "EmbeddingLookup": ("EmbeddingLookupRequest", "EmbeddingLookupResponse"),
    "PushGrad": ("PushGradRequest", "PushGradResponse"),
    "Pull": ("PullRequest", "PullResponse"),
    "Push": ("PushRequest", "PushResponse"),
    "Save": ("SaveRequest", "SaveResponse"),
    "Restore": ("RestoreRequest", "RestoreResponse"),
    "Stats": ("StatsRequest", "StatsResponse"),
}
METHODS = [*(f"/sniper.v1.Ps/{m}" for m in PS_METHODS), "/grpc.health.v1.Health/Check"]

FUZZ_DIM = 4
REF_DIM = 8
REF_SIGNS = np.array([5, 6, 7, 2**64 - 1, 6, 5, 123, 2**63], dtype=np.uint64)
REF_OFFSETS = np.array([0, 3, 3, 6, 8], dtype=np.int64)
REF_BATCH = 900_001  # fed once, never pushed during the campaign: the target of bad gradients
FUZZ_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class Fuzz:
    """The grpcio side of the campaign: raw callables, generated messages and the reference."""

    server: ServerProcess
    channel: grpc.Channel
    grpcio: GrpcModules
    reference: EmbeddingTable
    calls: dict[str, Callable[..., bytes]] = field(default_factory=dict)

    @property
    def pb(self) -> Any:
        return self.grpcio.pb

    def call(self, method: str, data: bytes) -> tuple[grpc.StatusCode, str, bytes]:
        """Send raw bytes; the status must be allowed and the server still running."""
        path = method if method.startswith("/") else f"/sniper.v1.Ps/{method}"
        callable_ = self.calls.get(path)
        if callable_ is None:
            callable_ = self.calls[path] = self.channel.unary_unary(
                path, request_serializer=None, response_deserializer=None
            )
        try:
            response = callable_(data, timeout=CALL_TIMEOUT)
        except grpc.RpcError as exc:
            code, details, response = exc.code(), exc.details() or "", b""
        else:
            code, details = grpc.StatusCode.OK, ""
        alive = self.server.process.poll() is None
        assert alive, f"server died on {path} {data!r}; stderr:\n{self.server.stderr()}"
        assert code in ALLOWED, f"{path} answered {code.name} ({details}) to {data!r}"
        if code == grpc.StatusCode.OK:
            self.parse_response(path, response)
        return code, details, response

    def parse_response(self, path: str, data: bytes) -> Any:
        """An OK answer is a valid message of the method's response type."""
        if path.startswith("/grpc.health"):
            return self.grpcio.health.HealthCheckResponse.FromString(data)
        _, response_type = PS_METHODS[path.rsplit("/", 1)[1]]
        return getattr(self.pb, response_type).FromString(data)

    def ok(self, method: str, message: Any) -> Any:
        """Send a well-formed message that must succeed; returns the parsed response."""
        code, details, data = self.call(method, message.SerializeToString())
        assert code == grpc.StatusCode.OK, f"{method}: {code.name} {details}"
        return self.parse_response(f"/sniper.v1.Ps/{method}", data)


def reference_table() -> EmbeddingTable:
    return EmbeddingTable(
        REF_DIM,
        capacity=4096,
        optimizer=Adagrad(lr=0.05, initial_accumulator_value=0.1),
        initializer=uniform(-0.1, 0.1),
        num_shards=2,
        seed=99,
    )


def _feed(pb: Any, batch_id: int, name: str, signs: NDArray[Any], offsets: NDArray[Any]) -> Any:
    variable = pb.VariableSigns(
        name=name, signs=to_tensor(pb, signs), offsets=to_tensor(pb, offsets)
    )
    return pb.FeedSampleRequest(batch_id=batch_id, variables=[variable])


def _step(fuzz: Fuzz, batch_id: int, grads: NDArray[np.float32]) -> NDArray[np.float32]:
    """Feed, look up and push one batch of "ref"; the reference table does the same."""
    pb = fuzz.pb
    fuzz.ok("FeedSample", _feed(pb, batch_id, "ref", REF_SIGNS, REF_OFFSETS))
    lookup = fuzz.ok("EmbeddingLookup", pb.EmbeddingLookupRequest(batch_id=batch_id, names=["ref"]))
    pooled = from_tensor(lookup.embeddings[0].pooled, "float32")
    np.testing.assert_allclose(
        pooled, fuzz.reference.lookup_pool(REF_SIGNS, REF_OFFSETS), rtol=1e-6, atol=1e-9
    )
    gradient = pb.VariableGradient(name="ref", grad=to_tensor(pb, grads))
    fuzz.ok("PushGrad", pb.PushGradRequest(batch_id=batch_id, grads=[gradient]))
    fuzz.reference.push_grad(REF_SIGNS, REF_OFFSETS, grads)
    return pooled


def _pull_ref(fuzz: Fuzz) -> NDArray[np.float32]:
    signs = np.unique(np.concatenate([REF_SIGNS, np.array([424242], dtype=np.uint64)]))
    pb = fuzz.pb
    response = fuzz.ok("Pull", pb.PullRequest(name="ref", signs=to_tensor(pb, signs)))
    rows = from_tensor(response.rows, "float32")
    np.testing.assert_allclose(rows, fuzz.reference.get(signs), rtol=1e-6, atol=1e-9)
    return rows


@pytest.fixture(scope="module")
def fuzz(grpcio_modules: GrpcModules, ps_server: ServerProcess) -> Iterator[Fuzz]:
    """A channel to the module's server, with "ref" trained one step and "fuzz" created."""
    with grpc.insecure_channel(
        ps_server.address, options=[("grpc.max_receive_message_length", 64 * 2**20)]
    ) as channel:
        state = Fuzz(ps_server, channel, grpcio_modules, reference_table())
        pb = grpcio_modules.pb
        state.ok(
            "CreateVariable",
            pb.CreateVariableRequest(
                name="ref",
                dim=REF_DIM,
                capacity=4096,
                optimizer=pb.OptimizerConfig(
                    name="adagrad", params={"lr": 0.05, "initial_accumulator_value": 0.1}
                ),
                initializer=pb.InitializerConfig(kind="uniform", a=-0.1, b=0.1),
                shards=2,
                seed=99,
            ),
        )
        state.ok(
            "CreateVariable",
            pb.CreateVariableRequest(
                name="fuzz",
                dim=FUZZ_DIM,
                capacity=256,
                optimizer=pb.OptimizerConfig(name="sgd"),
                shards=2,
                seed=1,
            ),
        )
        grads = np.random.default_rng(0).normal(size=(4, REF_DIM)).astype(np.float32)
        _step(state, 1, grads)
        state.ok("FeedSample", _feed(pb, REF_BATCH, "ref", REF_SIGNS, REF_OFFSETS))
        yield state


# -- strategies ------------------------------------------------------------------------------

NAMES = st.sampled_from(["fuzz", "fuzz", "fuzz", "nope", "", "\x00", "ünï cødé", "ref "])
U64 = st.one_of(
    st.sampled_from([0, 1, 2, 3, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1]),
    st.integers(0, 2**64 - 1),
)
I64 = st.one_of(
    st.sampled_from([-(2**63), -(2**32), -1, 0, 1, 2, 3, 2**31, 2**62, 2**63 - 1]),
    st.integers(-(2**63), 2**63 - 1),
)
FLOATS32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
DTYPES = st.sampled_from(
    ["float32", "uint64", "int64", "", "float64", "int8", "uint8", "bool", "object", "<f4", "\x00"]
)


@st.composite
def tensors(draw: st.DrawFn, pb: Any, array: NDArray[Any]) -> Any:
    """``array`` as a Tensor, untouched about a third of the time, else with one field wrong."""
    tensor = to_tensor(pb, array)
    mutation = draw(st.sampled_from(["none", "none", "dtype", "shape", "data", "missing"]))
    if mutation == "dtype":
        tensor.dtype = draw(DTYPES)
    elif mutation == "shape":
        shape = draw(
            st.one_of(
                st.lists(I64, max_size=4),
                st.just([*array.shape, 1]),
                st.just([2**62, 2**62]),
                st.just([-1]),
                st.just([-(2**63)]),
            )
        )
        tensor.ClearField("shape")
        tensor.shape.extend(shape)
    elif mutation == "data":
        tensor.data = draw(
            st.one_of(
                st.binary(max_size=64),
                st.just(tensor.data[:-1]),
                st.just(tensor.data + b"\x00"),
            )
        )
    elif mutation == "missing":
        return None
    return tensor


@st.composite
def sign_arrays(draw: st.DrawFn, max_size: int = 12) -> NDArray[np.uint64]:
    """Signs with repeats (drawn from a small pool) and extreme values."""
    pool = st.one_of(st.sampled_from([1, 2, 3, 2**64 - 1]), U64)
    return np.array(draw(st.lists(pool, max_size=max_size)), dtype=np.uint64)


@st.composite
def offset_arrays(draw: st.DrawFn, n: int) -> NDArray[np.int64]:
    """Offsets for ``n`` signs: valid, or starting off 0, decreasing, short, negative, huge."""
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    offsets = [0, *cuts, n]
    mutation = draw(
        st.sampled_from(["none", "none", "start", "end", "decreasing", "empty", "value"])
    )
    if mutation == "start":
        offsets[0] = draw(I64.filter(lambda v: v != 0))
    elif mutation == "end":
        offsets[-1] = draw(I64.filter(lambda v: v != n))
    elif mutation == "decreasing":
        offsets = [0, n + 1, *offsets[1:]] if n else [0, 2, 1, 0]
    elif mutation == "empty":
        offsets = []
    elif mutation == "value":
        offsets[draw(st.integers(0, len(offsets) - 1))] = draw(I64)
    return np.array(offsets, dtype=np.int64)


@st.composite
def variable_signs(draw: st.DrawFn, pb: Any) -> Any:
    signs = draw(sign_arrays())
    offsets = draw(offset_arrays(len(signs)))
    return pb.VariableSigns(
        name=draw(NAMES),
        signs=draw(tensors(pb, signs)),
        offsets=draw(tensors(pb, offsets)),
    )


@st.composite
def gradients(draw: st.DrawFn, pb: Any, batch: int, dim: int) -> Any:
    """A gradient tensor: the right shape about half the time, with NaN/Inf now and then."""
    rows = draw(st.sampled_from([batch, batch, batch + 1, max(batch - 1, 0), 0]))
    cols = draw(st.sampled_from([dim, dim, dim + 1, 1]))
    ones = st.just(np.ones((rows, cols), np.float32))
    drawn = st.lists(FLOATS32, min_size=rows * cols, max_size=rows * cols).map(
        lambda v: np.array(v, dtype=np.float32).reshape(rows, cols)
    )
    # Hypothesis draws lists of at most a few thousand elements: a big batch gets ones.
    values = draw(st.one_of(ones, drawn) if rows * cols <= 4096 else ones)
    return draw(tensors(pb, values))


PARAM_KEYS = st.sampled_from(
    ["lr", "eps", "beta1", "beta2", "alpha", "beta", "l1", "l2", "initial_accumulator_value", "x"]
)
DOUBLES = st.one_of(
    st.sampled_from([0.0, -1.0, 0.5, 1.0, 1e300, float("nan"), float("inf"), -float("inf")]),
    st.floats(),
)


@st.composite
def create_requests(draw: st.DrawFn, pb: Any) -> Any:
    """CreateVariable with every field drawn from valid, boundary and absurd values.

    The admission sketch stays small: a huge one is a known failure with a test of its own.
    """
    name = draw(
        st.one_of(st.sampled_from(["fuzz", "ref", ""]), st.text(max_size=8).map("cv_{}".format))
    )
    return pb.CreateVariableRequest(
        name=name,
        dim=draw(st.sampled_from([0, 1, 4, 4096, 4097, 2**32 - 1])),
        capacity=draw(st.sampled_from([0, 1, 2, 3, 64, 1000, 2**20, 2**30, 2**40, 2**64 - 1])),
        optimizer=pb.OptimizerConfig(
            name=draw(st.sampled_from(["sgd", "adagrad", "adam", "ftrl", "", "nope", "SGD"])),
            params=draw(st.dictionaries(PARAM_KEYS, DOUBLES, max_size=3)),
        ),
        initializer=pb.InitializerConfig(
            kind=draw(st.sampled_from(["", "constant", "uniform", "normal", "zeros"])),
            a=draw(DOUBLES),
            b=draw(DOUBLES),
        ),
        shards=draw(st.sampled_from([0, 1, 2, 3, 1000, 2**32 - 1])),
        eviction=draw(st.sampled_from(["", "lru", "lfu", "LRU"])),
        admission=pb.AdmissionConfig(
            min_count=draw(st.sampled_from([0, 1, 2, 3, 2**32 - 1])),
            sketch_width=draw(st.sampled_from([0, 1, 2, 1024])),
            sketch_depth=draw(st.sampled_from([0, 1, 2, 8])),
        ),
        seed=draw(U64),
    )


def valid_messages(pb: Any) -> dict[str, bytes]:
    """One well-formed request per method, to truncate and flip."""
    signs = np.array([1, 2, 1, 2**64 - 1], dtype=np.uint64)
    offsets = np.array([0, 2, 2, 4], dtype=np.int64)
    grad = np.ones((3, FUZZ_DIM), dtype=np.float32)
    messages = {
        "CreateVariable": pb.CreateVariableRequest(
            name="cv_valid",
            dim=4,
            capacity=64,
            optimizer=pb.OptimizerConfig(name="adam", params={"lr": 0.01}),
            initializer=pb.InitializerConfig(kind="normal", a=0.0, b=0.1),
            shards=2,
            admission=pb.AdmissionConfig(min_count=2, sketch_width=64, sketch_depth=2),
            seed=3,
        ),
        "FeedSample": _feed(pb, 77, "fuzz", signs, offsets),
        "EmbeddingLookup": pb.EmbeddingLookupRequest(batch_id=77, names=["fuzz"]),
        "PushGrad": pb.PushGradRequest(
            batch_id=77, grads=[pb.VariableGradient(name="fuzz", grad=to_tensor(pb, grad))]
        ),
        "Pull": pb.PullRequest(name="fuzz", signs=to_tensor(pb, signs)),
        "Push": pb.PushRequest(
            name="fuzz",
            signs=to_tensor(pb, np.array([8, 9], dtype=np.uint64)),
            rows=to_tensor(pb, np.ones((2, FUZZ_DIM), dtype=np.float32)),
        ),
        "Save": pb.SaveRequest(directory="checkpoint"),
        "Restore": pb.RestoreRequest(directory="checkpoint"),
        "Stats": pb.StatsRequest(),
    }
    return {f"/sniper.v1.Ps/{m}": message.SerializeToString() for m, message in messages.items()}


def safe_to_send(path: str, data: bytes) -> bool:
    """False for a request the campaign must not send (decoded as the server decodes it).

    - a Save that would write outside the server's own directory: the server runs as this
      user and Save creates its directory, so garbage must not name an absolute path or
      climb out with "..";
    - a CreateVariable with a ``None`` optimizer parameter (a map value of the wrong wire
      type): a known INTERNAL, tested on its own by
      ``test_a_map_value_of_the_wrong_wire_type_is_invalid_argument``.
    """
    codec = SniperCodec(2**30)
    try:
        if path.endswith("/Save"):
            directory = PurePosixPath(codec.decode(data, SaveRequest).directory or "")
            return not directory.is_absolute() and ".." not in directory.parts
        if path.endswith("/CreateVariable"):
            optimizer = codec.decode(data, CreateVariableRequest).optimizer
            return optimizer is None or None not in optimizer.params.values()
    except GRPCError:
        pass
    return True


# -- the campaign ----------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_random_bytes(fuzz: Fuzz, method: str) -> None:
    @FUZZ_SETTINGS
    @given(data=st.binary(max_size=200))
    def check(data: bytes) -> None:
        assume(safe_to_send(method, data))
        fuzz.call(method, data)

    check()


@pytest.mark.parametrize("method", METHODS[:-1])
def test_truncated_extended_and_flipped_valid_messages(fuzz: Fuzz, method: str) -> None:
    valid = valid_messages(fuzz.pb)[method]

    @FUZZ_SETTINGS
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        message = bytearray(valid)
        kind = data.draw(st.sampled_from(["truncate", "extend", "flip", "splice"]))
        if kind == "truncate" and message:
            message = message[: data.draw(st.integers(0, len(message) - 1))]
        elif kind == "extend":
            message += data.draw(st.binary(min_size=1, max_size=32))
        elif kind == "flip" and message:
            for _ in range(data.draw(st.integers(1, 4))):
                at = data.draw(st.integers(0, len(message) - 1))
                message[at] = data.draw(st.integers(0, 255))
        elif kind == "splice" and message:
            at = data.draw(st.integers(0, len(message)))
            message[at:at] = data.draw(st.binary(min_size=1, max_size=16))
        assume(safe_to_send(method, bytes(message)))
        fuzz.call(method, bytes(message))

    check()


def test_create_variable_with_absurd_fields(fuzz: Fuzz) -> None:
    @settings(FUZZ_SETTINGS, max_examples=300)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        request = data.draw(create_requests(fuzz.pb))
        code, details, _ = fuzz.call("CreateVariable", request.SerializeToString())
        refused = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.ALREADY_EXISTS}
        if request.dim == 0 or request.capacity == 0 or not request.name:
            assert code in refused, details
        if request.capacity >= 2**40:
            assert code in {*refused, grpc.StatusCode.RESOURCE_EXHAUSTED}, details

    check()


def test_training_steps_with_wrong_fields(fuzz: Fuzz) -> None:
    """FeedSample, EmbeddingLookup and PushGrad of one batch id, each possibly malformed."""
    pb = fuzz.pb

    @settings(FUZZ_SETTINGS, max_examples=300)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        batch_id = data.draw(st.one_of(st.integers(1, 3), U64))
        variables = data.draw(st.lists(variable_signs(pb), max_size=3))
        feed = pb.FeedSampleRequest(batch_id=batch_id, variables=variables)
        fuzz.call("FeedSample", feed.SerializeToString())
        names = data.draw(st.lists(NAMES, max_size=3))
        release = data.draw(st.booleans())
        lookup = pb.EmbeddingLookupRequest(batch_id=batch_id, names=names, release=release)
        fuzz.call("EmbeddingLookup", lookup.SerializeToString())
        fed = [v for v in variables if v.name == "fuzz" and len(v.offsets.shape) == 1]
        guess = max(fed[0].offsets.shape[0] - 1, 0) if fed else 2
        examples = data.draw(st.sampled_from([guess, guess, guess, 0, 3]))
        grads = [
            pb.VariableGradient(name=data.draw(NAMES), grad=data.draw(gradients(pb, examples, 4)))
            for _ in range(data.draw(st.integers(0, 2)))
        ]
        push = pb.PushGradRequest(batch_id=batch_id, grads=grads)
        fuzz.call("PushGrad", push.SerializeToString())

    check()


def test_pull_and_push_with_wrong_fields(fuzz: Fuzz) -> None:
    pb = fuzz.pb

    @settings(FUZZ_SETTINGS, max_examples=200)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        signs = data.draw(sign_arrays())
        name = data.draw(NAMES)
        pull = pb.PullRequest(name=name, signs=data.draw(tensors(pb, signs)))
        code, _, _ = fuzz.call("Pull", pull.SerializeToString())
        if name not in ("fuzz",):  # the signs are decoded first: a bad tensor is named first
            assert code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
        distinct = np.unique(signs)
        rows = data.draw(gradients(pb, len(distinct), FUZZ_DIM))
        push = pb.PushRequest(
            name=data.draw(NAMES),
            signs=data.draw(tensors(pb, data.draw(st.sampled_from([distinct, signs])))),
            rows=rows,
        )
        fuzz.call("Push", push.SerializeToString())

    check()


def test_save_and_restore_with_wrong_fields(fuzz: Fuzz) -> None:
    pb = fuzz.pb
    directories = st.sampled_from(["", "\x00", "a\x00b", "ck", "ck/sub", "missing", "."])

    @settings(FUZZ_SETTINGS, max_examples=40)
    @given(save=st.booleans(), directory=directories)
    def check(save: bool, directory: str) -> None:
        if save:
            fuzz.call("Save", pb.SaveRequest(directory=directory).SerializeToString())
        else:
            fuzz.call("Restore", pb.RestoreRequest(directory=directory).SerializeToString())

    check()


def test_health_check_with_any_service_name(fuzz: Fuzz) -> None:
    health = fuzz.grpcio.health

    @FUZZ_SETTINGS
    @given(service=st.text(max_size=30))
    def check(service: str) -> None:
        request = health.HealthCheckRequest(service=service).SerializeToString()
        code, _, data = fuzz.call("/grpc.health.v1.Health/Check", request)
        if service in ("", "sniper.v1.Ps"):
            assert health.HealthCheckResponse.FromString(data).status == 1  # SERVING
        else:
            assert code == grpc.StatusCode.NOT_FOUND

    check()


def test_a_message_over_the_limit_is_resource_exhausted(fuzz: Fuzz) -> None:
    signs = np.arange(200_000, dtype=np.uint64)  # 1.6 MB, over --max-message-mb 1
    request = fuzz.pb.PullRequest(name="fuzz", signs=to_tensor(fuzz.pb, signs))
    code, details, _ = fuzz.call("Pull", request.SerializeToString())
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-message-mb" in details


# -- invalid requests at a trained variable --------------------------------------------------


@st.composite
def bad_ref_gradients(draw: st.DrawFn, pb: Any) -> Any:
    """A PushGrad for the fed "ref" batch that must fail as a whole: one gradient is bad."""
    good = np.ones((4, REF_DIM), dtype=np.float32)
    bad = draw(
        st.sampled_from(
            ["nan", "inf", "shape", "dtype", "length", "repeat", "unknown", "unfed", "missing"]
        )
    )
    grads = [pb.VariableGradient(name="ref", grad=to_tensor(pb, good))]
    if bad in ("nan", "inf"):
        values = good.copy()
        values[draw(st.integers(0, 3)), draw(st.integers(0, REF_DIM - 1))] = (
            np.nan if bad == "nan" else -np.inf
        )
        grads[0].grad.CopyFrom(to_tensor(pb, values))
    elif bad == "shape":
        rows = draw(st.sampled_from([(3, REF_DIM), (5, REF_DIM), (4, REF_DIM + 1), (4, 1)]))
        grads[0].grad.CopyFrom(to_tensor(pb, np.ones(rows, dtype=np.float32)))
    elif bad == "dtype":
        grads[0].grad.dtype = draw(DTYPES.filter(lambda d: d != "float32"))
    elif bad == "length":
        grads[0].grad.data = grads[0].grad.data[: -draw(st.integers(1, 8))]
    elif bad == "repeat":
        grads.append(pb.VariableGradient(name="ref", grad=to_tensor(pb, good)))
    elif bad == "unknown":
        grads.append(pb.VariableGradient(name="nope", grad=to_tensor(pb, good)))
    elif bad == "unfed":  # "fuzz" was never fed under this batch id
        grads.append(
            pb.VariableGradient(name="fuzz", grad=to_tensor(pb, np.ones((4, FUZZ_DIM), "f4")))
        )
    elif bad == "missing":
        grads[0].ClearField("grad")
    if draw(st.booleans()):
        grads.reverse()
    return pb.PushGradRequest(batch_id=REF_BATCH, grads=grads)


def test_failed_calls_leave_a_trained_variable_unchanged(fuzz: Fuzz) -> None:
    """Every request here is invalid as a whole, so "ref" must not change at all."""
    pb = fuzz.pb
    before = _pull_ref(fuzz)
    signs = np.array([5, 6, 7, 777], dtype=np.uint64)

    @settings(FUZZ_SETTINGS, max_examples=200)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        kind = data.draw(st.sampled_from(["grad", "push", "feed"]))
        if kind == "grad":
            request = data.draw(bad_ref_gradients(pb))
        elif kind == "push":
            rows = np.full((4, REF_DIM), 9.0, dtype=np.float32)
            bad = data.draw(st.sampled_from(["duplicate", "rows", "dtype"]))
            request = pb.PushRequest(
                name="ref",
                signs=to_tensor(pb, np.array([5, 6, 5, 7], dtype=np.uint64))
                if bad == "duplicate"
                else to_tensor(pb, signs),
                rows=to_tensor(pb, rows if bad != "rows" else rows[:3]),
            )
            if bad == "dtype":
                request.signs.dtype = "int64"
        else:  # a valid "ref" part and an invalid one: neither may be kept
            batch_id = data.draw(st.integers(2**40, 2**41))
            broken = data.draw(variable_signs(pb).filter(lambda v: v.name != "fuzz"))
            good = _feed(pb, batch_id, "ref", signs, np.array([0, 4], dtype=np.int64))
            good.variables.append(broken)
            code, _, _ = fuzz.call("FeedSample", good.SerializeToString())
            if code == grpc.StatusCode.OK:  # the broken part happened to be valid after all
                return
            lookup = pb.EmbeddingLookupRequest(batch_id=batch_id, names=["ref"])
            code, _, _ = fuzz.call("EmbeddingLookup", lookup.SerializeToString())
            assert code == grpc.StatusCode.NOT_FOUND, "a failed FeedSample kept a variable"
            return
        method = "PushGrad" if kind == "grad" else "Push"
        code, details, _ = fuzz.call(method, request.SerializeToString())
        assert code in {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND}, details

    check()
    np.testing.assert_array_equal(_pull_ref(fuzz), before)


# -- afterwards ------------------------------------------------------------------------------


def test_the_server_still_answers_correctly_after_the_campaign(fuzz: Fuzz) -> None:
    pb = fuzz.pb
    assert fuzz.server.process.poll() is None
    health = fuzz.grpcio.health.HealthCheckRequest(service="sniper.v1.Ps").SerializeToString()
    _, _, data = fuzz.call("/grpc.health.v1.Health/Check", health)
    assert fuzz.grpcio.health.HealthCheckResponse.FromString(data).status == 1  # SERVING
    _pull_ref(fuzz)  # garbage changed no row of "ref"
    # The batch fed before the campaign was never freed by garbage: push it now.
    grads = np.full((4, REF_DIM), 0.25, dtype=np.float32)
    gradient = pb.VariableGradient(name="ref", grad=to_tensor(pb, grads))
    fuzz.ok("PushGrad", pb.PushGradRequest(batch_id=REF_BATCH, grads=[gradient]))
    fuzz.reference.push_grad(REF_SIGNS, REF_OFFSETS, grads)
    _pull_ref(fuzz)
    rng = np.random.default_rng(1)
    for batch_id in (2, 3):
        _step(fuzz, 10**9 + batch_id, rng.normal(size=(4, REF_DIM)).astype(np.float32))
    _pull_ref(fuzz)
    stats = fuzz.ok("Stats", pb.StatsRequest())
    (ref,) = [v for v in stats.variables if v.name == "ref"]
    assert ref.rows == len(fuzz.reference)
    logged = re.findall(r"ERROR .*", fuzz.server.stderr())
    assert not logged, f"the server logged errors: {logged[:5]}"


# -- known failures (each a test of its own; after the campaign, whose log they would fill) --


def test_a_huge_admission_sketch_is_refused_with_a_status(fuzz: Fuzz) -> None:
    """The sketch (shards x depth x width uint32) is outside the memory budget check, and
    numpy's MemoryError is not mapped: the call must still get a client-actionable status."""
    pb = fuzz.pb
    request = pb.CreateVariableRequest(
        name="huge_sketch",
        dim=4,
        capacity=64,
        optimizer=pb.OptimizerConfig(name="sgd"),
        admission=pb.AdmissionConfig(min_count=2, sketch_width=2**20, sketch_depth=2**20),
    )
    fuzz.call("CreateVariable", request.SerializeToString())


@pytest.mark.parametrize("where", ["file", "under_file"])
def test_save_onto_a_file_gets_a_status(fuzz: Fuzz, tmp_path: Path, where: str) -> None:
    existing = tmp_path / "a_file"
    existing.write_text("not a directory")
    directory = existing if where == "file" else existing / "checkpoint"
    request = fuzz.pb.SaveRequest(directory=str(directory))
    fuzz.call("Save", request.SerializeToString())


@pytest.mark.parametrize(
    "manifest",
    [
        "[1]",
        '"just a string"',
        '{"format": 1, "variables": [{"name": "x", "file": "var-0000.npz", "config": 5}]}',
        '{"format": 1, "variables": [7]}',
    ],
)
def test_restore_of_a_malformed_manifest_is_data_loss(
    fuzz: Fuzz, tmp_path: Path, manifest: str
) -> None:
    """``load_checkpoint``: a damaged checkpoint is DATA_LOSS with what is malformed."""
    (tmp_path / "manifest.json").write_text(manifest)
    request = fuzz.pb.RestoreRequest(directory=str(tmp_path))
    code, details, _ = fuzz.call("Restore", request.SerializeToString())
    assert code == grpc.StatusCode.DATA_LOSS
    assert details.startswith(f"checkpoint {tmp_path}")


def test_a_failed_restore_creates_no_variable(fuzz: Fuzz, tmp_path: Path) -> None:
    """A checkpoint whose second variable is corrupt must not leave the first one created
    (nor the second one, empty): "nothing is changed by a failed call"."""
    pb = fuzz.pb
    directory = tmp_path / "checkpoint"
    source = start_server(tmp_path, "--checkpoint-root", str(tmp_path))
    try:
        with grpc.insecure_channel(source.address) as channel:
            ps = fuzz.grpcio.pb_grpc.PsStub(channel)
            for name in ("partial_a", "partial_b"):
                config = pb.CreateVariableRequest(
                    name=name, dim=4, capacity=64, optimizer=pb.OptimizerConfig(name="sgd")
                )
                ps.CreateVariable(config, timeout=CALL_TIMEOUT)
                signs = np.array([1, 2, 3], dtype=np.uint64)
                rows = np.ones((3, 4), dtype=np.float32)
                push = pb.PushRequest(
                    name=name, signs=to_tensor(pb, signs), rows=to_tensor(pb, rows)
                )
                ps.Push(push, timeout=CALL_TIMEOUT)
            ps.Save(pb.SaveRequest(directory=str(directory)), timeout=CALL_TIMEOUT)
    finally:
        assert stop_server(source) == 0
    manifest = json.loads((directory / "manifest.json").read_text())
    assert [v["name"] for v in manifest["variables"]] == ["partial_a", "partial_b"]
    corrupt = directory / manifest["variables"][1]["file"]
    with np.load(corrupt) as arrays:
        data = dict(arrays)
    data["weights"] = data["weights"][:, :2]  # rows of the wrong width
    with corrupt.open("wb") as handle:
        np.savez(handle, **data)

    request = pb.RestoreRequest(directory=str(directory))
    code, details, _ = fuzz.call("Restore", request.SerializeToString())
    assert code == grpc.StatusCode.DATA_LOSS, details
    stats = fuzz.ok("Stats", pb.StatsRequest())
    left = sorted(v.name for v in stats.variables if v.name.startswith("partial_"))
    assert left == [], f"the failed Restore left {left} behind"


def test_a_map_value_of_the_wrong_wire_type_is_invalid_argument(fuzz: Fuzz) -> None:
    """betterproto decodes an optimizer.params value sent as a group as ``None``, which
    ``SniperCodec`` lets through (it checks no map value); for a variable that exists, the
    handler's ``bytes(request)`` then raises ``struct.error``: INTERNAL, not INVALID_ARGUMENT."""
    pb = fuzz.pb
    request = pb.CreateVariableRequest(
        name="map_value", dim=4, capacity=64, optimizer=pb.OptimizerConfig(name="sgd")
    )
    fuzz.ok("CreateVariable", request)
    entry = b"\x0a\x02lr" + b"\x13"  # key "lr", then field 2 (the value) as a start-group
    optimizer = b"\x0a\x03sgd" + b"\x12" + bytes([len(entry)]) + entry
    request.ClearField("optimizer")
    data = request.SerializeToString() + b"\x22" + bytes([len(optimizer)]) + optimizer
    code, details, _ = fuzz.call("CreateVariable", data)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
