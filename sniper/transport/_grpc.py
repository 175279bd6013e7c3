"""The gRPC transport: grpclib services that decode, call a role, and encode.

:class:`PsService` and :class:`HubService` are the ``sniper.v1`` services as thin adapters over a
:class:`~sniper.roles.PsRole` and a :class:`~sniper.roles.HubRole`: every rule of what a call
does lives in the role, so the in-process transport and an embedding application get the same
answers. Mount them in any grpclib ``Server`` next to your own services (see
``examples/embedded_ps.py``), or let :class:`GrpcTransport` serve them.

Errors are part of the contract: every failure is a ``GRPCError`` whose status says whose fault
it is (``sniper.transport._errors``), and nothing is changed by a failed call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, cast

import betterproto
import grpclib.server
import numpy as np
import sniffio

from sniper._config import Validated, check_positive
from sniper.roles import HubRole, PsRole
from sniper.rpc import (
    EncodedLookupResponse,
    FeedSampleView,
    HubApi,
    HubClient,
    LookupRequestView,
    PsApi,
    PsClient,
    PushGradView,
    Security,
    Server,
    Signs,
    VariableGradientView,
    VariableSignsView,
    check_wire_dtype,
    config_from_message,
    decode,
    decode_gradient,
    encode,
    lookup_response,
    moved_from_message,
    moved_to_message,
    placement_from_message,
    push_response,
    read_sample_wire,
    served_to_message,
    stats_to_message,
    tensor_present,
)
from sniper.rpc.v1 import (
    AckSampleRequest,
    AckSampleResponse,
    CreateVariableRequest,
    CreateVariableResponse,
    DropVariableRequest,
    DropVariableResponse,
    EmbeddingLookupRequest,
    EmbeddingLookupResponse,
    ExportVariableRequest,
    FeedSampleRequest,
    FeedSampleResponse,
    HubBase,
    ImportVariableResponse,
    PsBase,
    PullRequest,
    PullResponse,
    PushGradRequest,
    PushGradResponse,
    PushRequest,
    PushResponse,
    ReadSampleRequest,
    ReadSampleResponse,
    RestoreRequest,
    RestoreResponse,
    SaveRequest,
    SaveResponse,
    SetPlacementResponse,
    StatsRequest,
    StatsResponse,
    VariableData,
    VariableGradient,
    VariableSigns,
)
from sniper.rpc.v1 import Placement as PlacementMessage
from sniper.store import CapacityError
from sniper.transport._abc import Transport
from sniper.transport._errors import grpc_error
from sniper.transport._health import HealthService

__all__ = [
    "AsyncioOnlyError",
    "GrpcSettings",
    "GrpcTransport",
    "HubService",
    "PsService",
    "bound_address",
    "split_address",
]

log = logging.getLogger("sniper.grpc")

P = ParamSpec("P")
R = TypeVar("R")
Handler = Callable[P, Coroutine[Any, Any, R]]
_MB = 2**20


def _rpc(name: str) -> Callable[[Handler[P, R]], Handler[P, R]]:
    """Map what a handler raises to the ``GRPCError`` its status table gives."""

    def decorate(handler: Handler[P, R]) -> Handler[P, R]:
        @functools.wraps(handler)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                if isinstance(args[1], betterproto.Message):
                    check_fields(args[1])
                return await handler(*args, **kwargs)
            except Exception as exc:
                raise grpc_error(exc, name, log) from None

        return wrapper

    return decorate


def check_fields(message: betterproto.Message, path: str = "") -> None:
    """Refuse a message whose fields were decoded with the wrong wire type.

    betterproto parses what it is given: a length-delimited value sent for an integer field
    becomes a list, and the role would fail on it with a ``TypeError`` (an INTERNAL error, as
    if sniper were wrong). Comparing each field with the type of its default names the field
    as the caller's mistake instead.
    """
    for name, expected in _field_types(type(message)):
        value = getattr(message, name)
        if isinstance(value, bool) != (expected is bool) or not isinstance(value, expected):
            raise ValueError(
                f"{path}{name} is malformed: expected {expected.__name__}, "
                f"got {type(value).__name__}"
            )
        if isinstance(value, betterproto.Message):
            check_fields(value, f"{path}{name}.")


@functools.cache
def _field_types(cls: type[betterproto.Message]) -> tuple[tuple[str, type], ...]:
    """Each field of a message class with the type of its default, found once per class: the
    check runs on every EmbeddingLookup, which need not build a default message each time."""
    fresh = cls()
    return tuple(
        (field.name, type(getattr(fresh, field.name)))
        for field in dataclasses.fields(fresh)  # type: ignore[arg-type]
    )


def _then_lookup(
    request: PushGradRequest | PushGradView,
) -> EmbeddingLookupRequest | LookupRequestView | None:
    """A PushGrad's ``then_lookup``, None where it sent none (betterproto gives an unset
    message field a default instance)."""
    then = request.then_lookup
    if isinstance(then, betterproto.Message) and not betterproto.serialized_on_wire(then):
        return None
    return then


class PsService(PsBase):
    """The ``sniper.v1.Ps`` service over a :class:`~sniper.roles.PsRole`.

    ``max_message_mb`` is the largest answer it may send (the server's limit, so a client with
    the same limit can read it): a Pull or EmbeddingLookup that would answer more is refused
    before any row is gathered, instead of building a message no one can receive.
    """

    def __init__(self, role: PsRole, max_message_mb: float = 256.0) -> None:
        self.role = role
        self.max_message_bytes = int(max_message_mb * _MB)

    @_rpc("CreateVariable")
    async def create_variable(self, request: CreateVariableRequest) -> CreateVariableResponse:
        created = await self.role.create_variable(config_from_message(request))
        return CreateVariableResponse(created=created)

    @_rpc("FeedSample")
    async def feed_sample(self, request: FeedSampleRequest | FeedSampleView) -> FeedSampleResponse:
        start = time.perf_counter()
        variables: dict[str, Signs] = {}
        weights: dict[str, np.ndarray] = {}
        received: Sequence[VariableSigns | VariableSignsView] = request.variables
        for i, var in enumerate(received):
            if var.name in variables:
                raise ValueError(f"variables[{i}] repeats variable {var.name!r}")
            variables[var.name] = (
                decode(var.signs, f"variables[{i}].signs ({var.name!r})", "uint64", 1),
                decode(var.offsets, f"variables[{i}].offsets ({var.name!r})", "int64", 1),
            )
            if tensor_present(var.weights):
                field = f"variables[{i}].weights ({var.name!r})"
                weights[var.name] = decode(var.weights, field, "float32", 1)
        self.role.record("FeedSample.decode", time.perf_counter() - start)
        await self.role.feed_sample(request.batch_id, variables, weights=weights)
        return FeedSampleResponse()

    @_rpc("EmbeddingLookup")
    async def embedding_lookup(
        self, request: EmbeddingLookupRequest | LookupRequestView
    ) -> EmbeddingLookupResponse:
        return await self._looked_up(request)

    async def _looked_up(
        self, request: EmbeddingLookupRequest | LookupRequestView
    ) -> EncodedLookupResponse:
        """An EmbeddingLookup's answer, asked on its own or as a PushGrad's ``then_lookup``."""
        check_wire_dtype(request.pooled_dtype, "pooled_dtype", empty_ok=True)
        dtype = request.pooled_dtype or "float32"
        answer = self.role.lookup_bytes(
            request.batch_id, request.names, 4 if dtype == "float32" else 2
        )
        if answer > self.max_message_bytes:
            raise CapacityError(
                f"EmbeddingLookup of batch {request.batch_id} ({len(request.names)} variables) "
                f"would answer {answer / _MB:.0f} MB, over this server's max_message_mb of "
                f"{self.max_message_bytes / _MB:g}; look up fewer variables at a time, or "
                "smaller batches"
            )
        results = await self.role.embedding_lookup(
            request.batch_id, request.names, release=request.release
        )
        start = time.perf_counter()
        response = lookup_response(
            [(name, r.pooled, r.kernel_seconds, r.offsets) for name, r in results.items()], dtype
        )
        self.role.record("EmbeddingLookup.encode", time.perf_counter() - start)
        return response

    @_rpc("PushGrad")
    async def push_grad(self, request: PushGradRequest | PushGradView) -> PushGradResponse:
        start = time.perf_counter()
        grads: dict[str, np.ndarray] = {}
        received: Sequence[VariableGradient | VariableGradientView] = request.grads
        for i, var in enumerate(received):
            if var.name in grads:
                raise ValueError(f"grads[{i}] repeats variable {var.name!r}")
            grads[var.name] = decode_gradient(var, i)
        self.role.record("PushGrad.decode", time.perf_counter() - start)
        dropped = await self.role.push_grad(request.batch_id, grads)
        then = _then_lookup(request)
        if then is None:
            return push_response(dropped, None)
        start = time.perf_counter()
        try:
            looked_up = await self._looked_up(then)
        except Exception as exc:  # the push stands: the caller's own EmbeddingLookup says why
            log.debug("PushGrad of batch %d: then_lookup not answered: %s", request.batch_id, exc)
            return push_response(dropped, None)
        self.role.record("PushGrad.then_lookup", time.perf_counter() - start)
        return push_response(dropped, looked_up)

    @_rpc("Pull")
    async def pull(self, request: PullRequest) -> PullResponse:
        signs = decode(request.signs, "signs", "uint64", 1)
        answer = len(signs) * self.role.row_bytes(request.name)
        if answer > self.max_message_bytes:
            raise CapacityError(
                f"Pull of {len(signs)} rows of {request.name!r} would answer "
                f"{answer / _MB:.0f} MB, over this server's max_message_mb of "
                f"{self.max_message_bytes / _MB:g}; pull fewer signs at a time"
            )
        return PullResponse(rows=encode(await self.role.pull(request.name, signs)))

    @_rpc("Push")
    async def push(self, request: PushRequest) -> PushResponse:
        signs = decode(request.signs, "signs", "uint64", 1)
        rows = decode(request.rows, "rows", "float32", 2)
        await self.role.push(request.name, signs, rows)
        return PushResponse()

    @_rpc("Save")
    async def save(self, request: SaveRequest) -> SaveResponse:
        done = await self.role.save(request.directory)
        return SaveResponse(
            variables=list(done.variables), rows=done.rows, manifest_sha256=done.manifest_sha256
        )

    @_rpc("Restore")
    async def restore(self, request: RestoreRequest) -> RestoreResponse:
        done = await self.role.restore(request.directory)
        return RestoreResponse(
            variables=list(done.variables), rows=done.rows, manifest_sha256=done.manifest_sha256
        )

    @_rpc("Stats")
    async def stats(self, request: StatsRequest) -> StatsResponse:
        return stats_to_message(await self.role.stats())

    @_rpc("ExportVariable")
    async def export_variable(self, request: ExportVariableRequest) -> VariableData:
        return moved_to_message(await self.role.export_variable(request.name))

    @_rpc("ImportVariable")
    async def import_variable(self, request: VariableData) -> ImportVariableResponse:
        moved = moved_from_message(request)
        return ImportVariableResponse(
            rows=await self.role.import_variable(moved), pending=len(moved.pending)
        )

    @_rpc("DropVariable")
    async def drop_variable(self, request: DropVariableRequest) -> DropVariableResponse:
        return DropVariableResponse(dropped=await self.role.drop_variable(request.name))


class HubService(HubBase):
    """The ``sniper.v1.Hub`` service over a :class:`~sniper.roles.HubRole`."""

    def __init__(self, role: HubRole) -> None:
        self.role = role

    @_rpc("ReadSample")
    async def read_sample(self, request: ReadSampleRequest) -> ReadSampleResponse:
        sample = await self.role.read_sample(describe=request.describe)
        if sample is None:
            return ReadSampleResponse(end_of_data=True)
        served = None if sample.served is None else served_to_message(sample.served)
        return read_sample_wire(sample.batch_id, sample.labels, sample.dense, served)

    @_rpc("AckSample")
    async def ack_sample(self, request: AckSampleRequest) -> AckSampleResponse:
        return AckSampleResponse(acknowledged=await self.role.acknowledge(request.batch_ids))

    @_rpc("SetPlacement")
    async def set_placement(self, request: PlacementMessage) -> SetPlacementResponse:
        version = await self.role.set_placement(placement_from_message(request))
        return SetPlacementResponse(version=version)


def bound_address(server: grpclib.server.Server) -> tuple[str, int]:
    """The host and port a started grpclib server listens on (port 0 picks a free one)."""
    listener = cast(asyncio.Server, server._server)
    host, port = listener.sockets[0].getsockname()[:2]
    return str(host), int(port)


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` as a pair; ``ValueError`` names the bad address."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{address!r} is not host:port")
    return host, int(port)


@dataclass(frozen=True)
class GrpcSettings(Validated):
    """Message and HTTP/2 sizes of the gRPC transport (keys of ``sniper serve`` too)."""

    max_message_mb: float = 256.0
    """The largest message a server or client accepts."""
    http2_window_mb: float = 16.0
    """HTTP/2 flow-control windows; grpclib's 4 MiB default stalls a 5 MB lookup response."""
    http2_frame_kb: int = 512
    """The largest HTTP/2 frame accepted (HTTP/2's default is 16)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "max_message_mb", "http2_window_mb")
        if not 16 <= self.http2_frame_kb < 16384:
            raise ValueError(
                "http2_frame_kb must be in [16, 16383] (HTTP/2's bounds), "
                f"got {self.http2_frame_kb}"
            )


class AsyncioOnlyError(ValueError):
    """The gRPC transport was used under another event loop than asyncio (trio)."""


def require_asyncio(what: str) -> None:
    """Refuse, in one line, to run ``what`` over gRPC under an event loop other than asyncio:
    grpclib is asyncio-only, and under trio it fails deep inside with trio's ``TypeError``
    (unrecognized yield message), naming nothing. Outside any loop nothing is checked."""
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return
    if library != "asyncio":
        raise AsyncioOnlyError(
            f"{what} needs asyncio: the gRPC transport (grpclib) runs on asyncio only, and this "
            f"runs under {library}; run it with asyncio (anyio.run(..., backend='asyncio')), "
            "or use the inprocess transport, which runs under any anyio backend"
        )


class GrpcTransport(Transport):
    """grpclib over HTTP/2 on asyncio: across processes and hosts. Addresses are
    ``host:port`` (port 0 picks a free one when serving)."""

    name = "grpc"

    def __init__(
        self,
        settings: GrpcSettings | None = None,
        *,
        timeout: float = 30.0,
        security: Security | None = None,
    ) -> None:
        self.settings = settings or GrpcSettings()
        self.timeout = timeout
        self.security = security or Security()
        """TLS and token of this transport's servers and clients."""

    def server(self, services: list[Any]) -> Server:
        """A grpclib server with sniper's codec (size limit) and HTTP/2 windows and frames."""
        require_asyncio("a gRPC server")
        return Server(
            services,
            max_message_bytes=int(self.settings.max_message_mb * _MB),
            window_bytes=int(self.settings.http2_window_mb * _MB),
            frame_bytes=self.settings.http2_frame_kb * 1024,
            security=self.security,
        )

    @asynccontextmanager
    async def serve(self, role: PsRole | HubRole, address: str) -> AsyncIterator[str]:
        if isinstance(role, PsRole):
            services: list[Any] = [PsService(role, self.settings.max_message_mb)]
            name = "sniper.v1.Ps"
        else:
            services = [HubService(role)]
            name = "sniper.v1.Hub"
        server = self.server([*services, HealthService((name,), lambda: role.healthy)])
        await server.start(*split_address(address))
        try:
            host, port = bound_address(server)
            yield f"{host}:{port}"
        finally:
            server.close()
            await server.wait_closed()

    def ps_client(self, address: str) -> PsApi:
        require_asyncio("a gRPC client")
        return PsClient(
            *split_address(address),
            timeout=self.timeout,
            max_message_mb=self.settings.max_message_mb,
            http2_window_mb=self.settings.http2_window_mb,
            http2_frame_kb=self.settings.http2_frame_kb,
            security=self.security,
        )

    def hub_client(self, address: str) -> HubApi:
        require_asyncio("a gRPC client")
        return HubClient(*split_address(address), security=self.security)
