"""gRPC clients of the ps (:class:`PsClient`) and the hub (:class:`HubClient`).

Each implements its role's protocol (:class:`~sniper.rpc.PsApi`, :class:`~sniper.rpc.HubApi`)
over grpclib, so :class:`~sniper.roles.PsCluster`, the hub and the trainer use them exactly as
they use an in-process role.

Every call has a deadline, and fails as ``GRPCError`` naming its peer, never as a cancellation
of the caller (``sniper.rpc._peer``): UNAVAILABLE for a lost connection, a refused connect or a
dead peer, DEADLINE_EXCEEDED for no answer in time. Idempotent calls (CreateVariable,
FeedSample, a lookup that does not release its batch, Pull, Push, Stats, Save, Restore) are
retried on those two with exponential backoff, which rides over a ps restart or a dropped
connection. PushGrad is never retried: applying a gradient twice is worse than reporting the
failure.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import numpy as np
from grpclib.client import UnaryUnaryMethod
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from numpy.typing import NDArray

from sniper.placement import Placement
from sniper.rpc._api import (
    Checkpointed,
    LookupTarget,
    MovedVariable,
    NextLookup,
    Pooled,
    Sample,
    Signs,
    Weights,
)
from sniper.rpc._generated.sniper.v1 import (
    AckSampleRequest,
    DropVariableRequest,
    EmbeddingLookupRequest,
    ExportVariableRequest,
    FeedSampleResponse,
    HubStub,
    PsStub,
    PullRequest,
    PushRequest,
    ReadSampleRequest,
    RestoreRequest,
    SaveRequest,
    StatsRequest,
)
from sniper.rpc._http2 import Channel
from sniper.rpc._moves import moved_from_message, moved_to_message
from sniper.rpc._peer import call_peer
from sniper.rpc._placement import placement_to_message
from sniper.rpc._security import Security
from sniper.rpc._served import served_from_message
from sniper.rpc._stats import PsStats, stats_from_message
from sniper.rpc._tensor import (
    FLOAT_DTYPES,
    check_wire_dtype,
    decode,
    decode_floats,
    encode,
    wire_array,
)
from sniper.rpc._variable import VariableConfig, config_to_message
from sniper.rpc._wire import (
    Encoded,
    LookupAnswer,
    LookupArrays,
    PushAnswer,
    PushArrays,
    feed_sample_wire,
    push_grad_wire,
)

__all__ = ["HubClient", "PsClient"]

T = TypeVar("T")
_MB = 2**20
_RETRIED = (Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED)


def _method(channel: Channel, name: str, request: type, reply: type) -> UnaryUnaryMethod[Any, Any]:
    return UnaryUnaryMethod(channel, f"/sniper.v1.Ps/{name}", request, reply)


class PsClient:
    """A connection to one ps."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.05,
        max_message_mb: float = 256.0,
        http2_window_mb: float = 16.0,
        http2_frame_kb: int = 512,
        security: Security | None = None,
        wire_dtype: str = "float32",
    ) -> None:
        check_wire_dtype(wire_dtype)
        self.wire_dtype = wire_dtype
        """How pooled embeddings are asked for and gradients go out (``FLOAT_DTYPES``)."""
        self._answered = wire_dtype  # what the ps answers lookups in: a ps older than the
        # pooled_dtype field answers float32, and takes only float32 gradients
        self._reads_transposed = False  # its lookup answers said it reads grad_transposed
        self.address = f"{host}:{port}"
        self.peer = f"ps {self.address}"
        """How errors name this ps."""
        self.channel = Channel(
            host,
            port,
            max_message_bytes=int(max_message_mb * _MB),
            window_bytes=int(http2_window_mb * _MB),
            frame_bytes=http2_frame_kb * 1024,
            security=security,
        )
        self.stub = PsStub(self.channel, timeout=timeout)
        self.timeout = timeout
        self._tls = security is not None and security.tls
        # The heavy calls skip betterproto objects: requests are written from the arrays, and
        # a lookup answer is parsed into array views (see sniper.rpc._wire).
        self._feed: UnaryUnaryMethod[Encoded, FeedSampleResponse] = _method(
            self.channel, "FeedSample", Encoded, FeedSampleResponse
        )
        self._push_grad: UnaryUnaryMethod[Encoded, PushAnswer] = _method(
            self.channel, "PushGrad", Encoded, PushArrays
        )
        self._lookup: UnaryUnaryMethod[EmbeddingLookupRequest, LookupAnswer] = _method(
            self.channel, "EmbeddingLookup", EmbeddingLookupRequest, LookupArrays
        )
        self.retries = retries
        self.backoff = backoff

    def close(self) -> None:
        self.channel.close()

    async def __aenter__(self) -> PsClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        """One call, its failures mapped at the boundary (see the module doc)."""
        return await call_peer(self.peer, call, tls=self._tls)

    async def _retry(self, call: Callable[[], Awaitable[T]]) -> T:
        delay = self.backoff
        for attempt in range(self.retries + 1):
            try:
                return await self._call(call)
            except GRPCError as exc:
                if exc.status not in _RETRIED or attempt == self.retries:
                    raise
            await anyio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    async def create_variable(self, config: VariableConfig) -> bool:
        """Create a variable; False if it already existed with this configuration."""
        request = config_to_message(config)
        response = await self._retry(lambda: self.stub.create_variable(request))
        return response.created

    async def feed_sample(
        self, batch_id: int, variables: Mapping[str, Signs], *, weights: Weights | None = None
    ) -> None:
        request = feed_sample_wire(
            batch_id,
            [
                (name, wire_array(signs), wire_array(offsets))
                for name, (signs, offsets) in variables.items()
            ],
            {name: wire_array(w) for name, w in (weights or {}).items() if name in variables},
        )
        await self._retry(lambda: self._feed(request, timeout=self.timeout))

    async def embedding_lookup(
        self,
        batch_id: int,
        names: Sequence[str],
        *,
        release: bool = False,
        into: LookupTarget | None = None,
    ) -> dict[str, Pooled]:
        request = self._lookup_request(batch_id, names, release)

        async def call() -> LookupAnswer:
            return await self._lookup(request, timeout=self.timeout)

        answer = await (self._call(call) if release else self._retry(call))
        return self._answers(answer, into)

    def _lookup_request(
        self, batch_id: int, names: Sequence[str], release: bool
    ) -> EmbeddingLookupRequest:
        return EmbeddingLookupRequest(
            batch_id=batch_id, names=list(names), release=release, pooled_dtype=self.wire_dtype
        )

    def _answers(self, answer: LookupAnswer, into: LookupTarget | None) -> dict[str, Pooled]:
        """A lookup's answers as arrays (placed in ``into``); what the answer says of the ps
        (the dtype it answers in, whether it reads transposed gradients) is kept for pushes."""
        items = answer.items
        self._reads_transposed = answer.reads_grad_transposed
        if items and items[0][1] is not None:
            self._answered = items[0][1].dtype or "float32"
        answers = {}
        for name, pooled_tensor, seconds, offsets_tensor in items:
            pooled = decode_floats(pooled_tensor, name, 2)
            if offsets_tensor is not None:  # unpooled: no block of ``into`` holds it
                offsets = decode(offsets_tensor, f"{name} offsets", "int64", 1)
                answers[name] = Pooled(pooled, seconds, offsets)
            else:
                answers[name] = Pooled(
                    pooled if into is None else into.place(name, pooled), seconds
                )
        return answers

    async def push_grad(self, batch_id: int, grads: Mapping[str, NDArray[np.float32]]) -> int:
        """Apply gradients; returns how many the ps dropped as non-finite. Never retried."""
        return (await self._push(batch_id, grads, None)).dropped_nonfinite

    async def push_grad_then_lookup(
        self, batch_id: int, grads: Mapping[str, NDArray[np.float32]], then: NextLookup
    ) -> tuple[int, dict[str, Pooled] | None]:
        """Apply gradients, then look up ``then`` in the same call (never retried, as a push).
        A ps from before ``then_lookup`` applies the gradients and answers no lookup (None)."""
        request = self._lookup_request(then.batch_id, then.names, then.release)
        answer = await self._push(batch_id, grads, request)
        looked_up = answer.looked_up
        pooled = None if looked_up is None else self._answers(looked_up, then.into)
        return answer.dropped_nonfinite, pooled

    async def _push(
        self,
        batch_id: int,
        grads: Mapping[str, NDArray[np.float32]],
        then: EmbeddingLookupRequest | None,
    ) -> PushAnswer:
        dtype = self._answered if self._answered in FLOAT_DTYPES else "float32"
        request = push_grad_wire(
            batch_id, grads.items(), dtype, transposed=self._reads_transposed, then=then
        )
        return await self._call(lambda: self._push_grad(request, timeout=self.timeout))

    async def pull(self, name: str, signs: NDArray[np.uint64]) -> NDArray[np.float32]:
        request = PullRequest(name=name, signs=encode(signs))
        response = await self._retry(lambda: self.stub.pull(request))
        rows: NDArray[np.float32] = decode(response.rows, "rows", "float32", 2)
        return rows

    async def push(self, name: str, signs: NDArray[np.uint64], rows: NDArray[np.float32]) -> None:
        request = PushRequest(name=name, signs=encode(signs), rows=encode(rows))
        await self._retry(lambda: self.stub.push(request))

    async def save(self, directory: str) -> Checkpointed:
        response = await self._retry(lambda: self.stub.save(SaveRequest(directory=directory)))
        return Checkpointed(tuple(response.variables), response.rows, response.manifest_sha256)

    async def restore(self, directory: str) -> Checkpointed:
        request = RestoreRequest(directory=directory)
        response = await self._retry(lambda: self.stub.restore(request))
        return Checkpointed(tuple(response.variables), response.rows, response.manifest_sha256)

    async def stats(self) -> PsStats:
        return stats_from_message(await self._retry(lambda: self.stub.stats(StatsRequest())))

    async def export_variable(self, name: str) -> MovedVariable:
        request = ExportVariableRequest(name=name)
        return moved_from_message(await self._retry(lambda: self.stub.export_variable(request)))

    async def import_variable(self, moved: MovedVariable) -> int:
        """Retried: a second import of the same variable writes the same rows again."""
        request = moved_to_message(moved)
        return (await self._retry(lambda: self.stub.import_variable(request))).rows

    async def drop_variable(self, name: str) -> bool:
        request = DropVariableRequest(name=name)
        return (await self._retry(lambda: self.stub.drop_variable(request))).dropped


class HubClient:
    """A connection to one hub. ReadSample is never retried: a batch handed out to a call
    that then failed is handed out again when its lease expires. Nor is AckSample: an
    acknowledgement lost means the batch comes once more, and the reader knows it by its id."""

    def __init__(
        self, host: str, port: int, *, timeout: float = 600.0, security: Security | None = None
    ) -> None:
        self.address = f"{host}:{port}"
        self.peer = f"hub {self.address}"
        """How errors name this hub."""
        self.channel = Channel(host, port, security=security)
        self.stub = HubStub(self.channel, timeout=timeout)
        self._tls = security is not None and security.tls

    def close(self) -> None:
        self.channel.close()

    async def read_sample(self, *, describe: bool = False) -> Sample | None:
        request = ReadSampleRequest(describe=describe)
        response = await call_peer(self.peer, lambda: self.stub.read_sample(request), tls=self._tls)
        if response.end_of_data:
            return None
        served = response.served if describe else None  # None or a default when unsent
        return Sample(
            response.batch_id,
            decode(response.labels, "labels", "float32", (1, 2)),
            decode(response.dense, "dense", "float32", 2),
            served_from_message(served),
        )

    async def acknowledge(self, batch_ids: Sequence[int]) -> int:
        request = AckSampleRequest(batch_ids=list(batch_ids))
        response = await call_peer(self.peer, lambda: self.stub.ack_sample(request), tls=self._tls)
        return response.acknowledged

    async def set_placement(self, placement: Placement) -> int:
        request = placement_to_message(placement)
        return (
            await call_peer(self.peer, lambda: self.stub.set_placement(request), tls=self._tls)
        ).version
