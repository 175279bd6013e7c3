"""Typed async clients of the ps: one server (``PsClient``) or a cluster (``PsCluster``).

Every call has a deadline. Idempotent calls (CreateVariable, FeedSample, a lookup that does
not release its batch, Pull, Push, Stats, Save, Restore) are retried on UNAVAILABLE with
exponential backoff, which rides over a ps restart or a dropped connection. PushGrad is never
retried: applying a gradient twice is worse than reporting the failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from grpclib.client import UnaryUnaryMethod
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError
from numpy.typing import NDArray

from sniper.hashing import ps_for_variable
from sniper.rpc._generated.sniper.v1 import (
    AdmissionConfig,
    CreateVariableRequest,
    EmbeddingLookupRequest,
    FeedSampleResponse,
    InitializerConfig,
    OptimizerConfig,
    PsStub,
    PullRequest,
    PushGradResponse,
    PushRequest,
    RestoreRequest,
    SaveRequest,
    StatsRequest,
    StatsResponse,
)
from sniper.rpc._http2 import Channel
from sniper.rpc._tensor import decode, encode, wire_array
from sniper.rpc._wire import (
    Encoded,
    LookupArrays,
    LookupItem,
    feed_sample_wire,
    push_grad_wire,
)

__all__ = ["Pooled", "PsClient", "PsCluster"]

T = TypeVar("T")
_MB = 2**20
Signs = tuple[NDArray[np.uint64], NDArray[np.int64]]


@dataclass(frozen=True)
class Pooled:
    """One variable's answer to EmbeddingLookup."""

    pooled: NDArray[np.float32]
    kernel_seconds: float


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
    ) -> None:
        self.address = f"{host}:{port}"
        self.channel = Channel(
            host,
            port,
            max_message_bytes=int(max_message_mb * _MB),
            window_bytes=int(http2_window_mb * _MB),
            frame_bytes=http2_frame_kb * 1024,
        )
        self.stub = PsStub(self.channel, timeout=timeout)
        self.timeout = timeout
        # The heavy calls skip betterproto objects: requests are written from the arrays, and
        # a lookup answer is parsed into array views (see sniper.rpc._wire).
        self._feed: UnaryUnaryMethod[Encoded, FeedSampleResponse] = _method(
            self.channel, "FeedSample", Encoded, FeedSampleResponse
        )
        self._push_grad: UnaryUnaryMethod[Encoded, PushGradResponse] = _method(
            self.channel, "PushGrad", Encoded, PushGradResponse
        )
        self._lookup: UnaryUnaryMethod[EmbeddingLookupRequest, list[LookupItem]] = _method(
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

    async def _retry(self, call: Callable[[], Awaitable[T]]) -> T:
        delay = self.backoff
        for attempt in range(self.retries + 1):
            try:
                return await call()
            except (GRPCError, StreamTerminatedError, ConnectionError, OSError) as exc:
                retryable = not isinstance(exc, GRPCError) or exc.status == Status.UNAVAILABLE
                if not retryable or attempt == self.retries:
                    raise
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    async def create_variable(
        self,
        name: str,
        dim: int,
        capacity: int,
        *,
        optimizer: str = "adagrad",
        optimizer_params: Mapping[str, float] | None = None,
        initializer: tuple[str, float, float] | None = None,
        shards: int = 1,
        admission_min_count: int = 0,
        eviction: str = "lru",
        seed: int = 0,
    ) -> bool:
        """Create a variable; False if it already existed with this configuration."""
        request = CreateVariableRequest(
            name=name,
            dim=dim,
            capacity=capacity,
            optimizer=OptimizerConfig(name=optimizer, params=dict(optimizer_params or {})),
            initializer=InitializerConfig(*initializer) if initializer else InitializerConfig(),
            shards=shards,
            admission=AdmissionConfig(min_count=admission_min_count),
            eviction=eviction,
            seed=seed,
        )
        response = await self._retry(lambda: self.stub.create_variable(request))
        return response.created

    async def feed_sample(self, batch_id: int, variables: Mapping[str, Signs]) -> None:
        request = feed_sample_wire(
            batch_id,
            [
                (name, wire_array(signs), wire_array(offsets))
                for name, (signs, offsets) in variables.items()
            ],
        )
        await self._retry(lambda: self._feed(request, timeout=self.timeout))

    async def embedding_lookup(
        self, batch_id: int, names: Sequence[str], *, release: bool = False
    ) -> dict[str, Pooled]:
        request = EmbeddingLookupRequest(batch_id=batch_id, names=list(names), release=release)

        async def call() -> list[LookupItem]:
            return await self._lookup(request, timeout=self.timeout)

        items = await (call() if release else self._retry(call))
        return {
            name: Pooled(decode(pooled, name, "float32", 2), seconds)
            for name, pooled, seconds in items
        }

    async def push_grad(self, batch_id: int, grads: Mapping[str, NDArray[np.float32]]) -> int:
        """Apply gradients; returns how many the ps dropped as non-finite. Never retried."""
        request = push_grad_wire(
            batch_id, [(name, wire_array(grad)) for name, grad in grads.items()]
        )
        return (await self._push_grad(request, timeout=self.timeout)).dropped_nonfinite

    async def pull(self, name: str, signs: NDArray[np.uint64]) -> NDArray[np.float32]:
        request = PullRequest(name=name, signs=encode(signs))
        response = await self._retry(lambda: self.stub.pull(request))
        rows: NDArray[np.float32] = decode(response.rows, "rows", "float32", 2)
        return rows

    async def push(self, name: str, signs: NDArray[np.uint64], rows: NDArray[np.float32]) -> None:
        request = PushRequest(name=name, signs=encode(signs), rows=encode(rows))
        await self._retry(lambda: self.stub.push(request))

    async def save(self, directory: str) -> int:
        response = await self._retry(lambda: self.stub.save(SaveRequest(directory=directory)))
        return response.rows

    async def restore(self, directory: str) -> int:
        request = RestoreRequest(directory=directory)
        return (await self._retry(lambda: self.stub.restore(request))).rows

    async def stats(self) -> StatsResponse:
        return await self._retry(lambda: self.stub.stats(StatsRequest()))


class PsCluster:
    """Several ps, each variable on ``ps_for_variable(name, len(clients))``; calls fan out."""

    def __init__(self, clients: Sequence[PsClient]) -> None:
        if not clients:
            raise ValueError("a cluster needs at least one ps")
        self.clients = list(clients)

    def owner(self, name: str) -> PsClient:
        return self.clients[ps_for_variable(name, len(self.clients))]

    def _by_owner(self, names: Sequence[str]) -> dict[int, list[str]]:
        groups: dict[int, list[str]] = {}
        for name in names:
            groups.setdefault(ps_for_variable(name, len(self.clients)), []).append(name)
        return groups

    def close(self) -> None:
        for client in self.clients:
            client.close()

    async def feed_sample(self, batch_id: int, variables: Mapping[str, Signs]) -> None:
        await asyncio.gather(
            *(
                self.clients[ps].feed_sample(batch_id, {n: variables[n] for n in names})
                for ps, names in self._by_owner(list(variables)).items()
            )
        )

    async def embedding_lookup(
        self, batch_id: int, names: Sequence[str], *, release: bool = False
    ) -> dict[str, Pooled]:
        parts = await asyncio.gather(
            *(
                self.clients[ps].embedding_lookup(batch_id, group, release=release)
                for ps, group in self._by_owner(names).items()
            )
        )
        return {name: pooled for part in parts for name, pooled in part.items()}

    async def push_grad(self, batch_id: int, grads: Mapping[str, NDArray[np.float32]]) -> int:
        dropped = await asyncio.gather(
            *(
                self.clients[ps].push_grad(batch_id, {n: grads[n] for n in names})
                for ps, names in self._by_owner(list(grads)).items()
            )
        )
        return sum(dropped)
