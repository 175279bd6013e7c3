"""``PsService``: the ``sniper.v1.Ps`` gRPC service over a :class:`PsEngine`.

A grpclib service class: mount it in any grpclib ``Server`` next to your own services (see
``examples/embedded_ps.py``). Handlers decode tensors, call the engine (whose kernels run on the
scheduler's threads: the event loop never runs a kernel), and encode the answer.

Errors are part of the contract. Every failure is a ``GRPCError`` with a message naming what
is wrong, and nothing is changed by a failed call:

- unknown variable or batch id: NOT_FOUND;
- wrong dtype, shape, length, offsets, or a bad configuration value: INVALID_ARGUMENT;
- a NaN or Inf gradient: INVALID_ARGUMENT (``nonfinite="reject"``, the default), or the
  variable's gradient is dropped and counted (``nonfinite="drop"``);
- more distinct signs in a batch than a shard holds, or a table over the memory budget:
  RESOURCE_EXHAUSTED;
- a call arriving while the server drains for shutdown: UNAVAILABLE.

Latency histograms cover every RPC and, for EmbeddingLookup and PushGrad, their stages:
``decode`` (tensors from bytes), ``dispatch`` (plan and submit tasks), ``wait`` (until the last
task is done), ``kernel`` (store kernel time, per variable) and ``encode``. They match the seed
system's ``PsEmbeddingLookup{Dispatch,Waiting,OneVariable}`` lines.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

import numpy as np
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from sniper._metrics import Histogram
from sniper.roles._checkpoint import load_checkpoint, save_checkpoint
from sniper.roles._engine import PsEngine, UnknownBatchError, UnknownVariableError
from sniper.roles._variables import MemoryBudgetError, same_config, table_from_request
from sniper.rpc._generated.sniper.v1 import (
    CreateVariableRequest,
    CreateVariableResponse,
    EmbeddingLookupRequest,
    EmbeddingLookupResponse,
    FeedSampleRequest,
    FeedSampleResponse,
    LatencySummary,
    PsBase,
    PullRequest,
    PullResponse,
    PushGradRequest,
    PushGradResponse,
    PushRequest,
    PushResponse,
    RestoreRequest,
    RestoreResponse,
    SaveRequest,
    SaveResponse,
    StatsRequest,
    StatsResponse,
    VariableGradient,
    VariableSigns,
    VariableStats,
)
from sniper.rpc._tensor import decode, encode
from sniper.rpc._wire import (
    FeedSampleView,
    PushGradView,
    VariableGradientView,
    VariableSignsView,
    lookup_response,
)
from sniper.store import CapacityError, EmbeddingTable, TableExport

__all__ = ["PsService", "PsServiceConfig"]

log = logging.getLogger("sniper.ps")

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class PsServiceConfig:
    """Policies of a ps service; validated at construction."""

    nonfinite: Literal["reject", "drop"] = "reject"
    """What a NaN or Inf gradient gets: an INVALID_ARGUMENT, or dropped and counted."""
    max_table_bytes: int = 16 * 2**30
    """Memory all tables of this ps may preallocate together."""

    def __post_init__(self) -> None:
        if self.nonfinite not in ("reject", "drop"):
            raise ValueError(f"nonfinite must be 'reject' or 'drop', got {self.nonfinite!r}")
        if self.max_table_bytes < 1:
            raise ValueError(f"max_table_bytes must be positive, got {self.max_table_bytes}")


_STATUS_OF: tuple[tuple[type[BaseException], Status], ...] = (
    (UnknownVariableError, Status.NOT_FOUND),
    (UnknownBatchError, Status.NOT_FOUND),
    (FileNotFoundError, Status.NOT_FOUND),
    (OSError, Status.FAILED_PRECONDITION),
    (CapacityError, Status.RESOURCE_EXHAUSTED),
    (MemoryBudgetError, Status.RESOURCE_EXHAUSTED),
    (MemoryError, Status.RESOURCE_EXHAUSTED),
    (ValueError, Status.INVALID_ARGUMENT),
    (TypeError, Status.INVALID_ARGUMENT),
    (IndexError, Status.INVALID_ARGUMENT),
)


Handler = Callable[P, Coroutine[Any, Any, R]]


def _rpc(name: str) -> Callable[[Handler[P, R]], Handler[P, R]]:
    """Count, time and map the exceptions of one RPC handler to gRPC statuses."""

    def decorate(handler: Handler[P, R]) -> Handler[P, R]:
        @functools.wraps(handler)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            service = args[0]
            assert isinstance(service, PsService)
            with service._in_flight(name):
                try:
                    return await handler(*args, **kwargs)
                except GRPCError:
                    raise
                except Exception as exc:
                    for kind, status in _STATUS_OF:
                        if isinstance(exc, kind):
                            raise GRPCError(status, str(exc)) from None
                    log.exception("%s failed", name)
                    raise GRPCError(Status.INTERNAL, f"{type(exc).__name__}: {exc}") from None

        return wrapper

    return decorate


class PsService(PsBase):
    """The ``sniper.v1.Ps`` service; construct with an engine, mount in a grpclib server."""

    def __init__(self, engine: PsEngine, config: PsServiceConfig | None = None) -> None:
        self.engine = engine
        self.config = config or PsServiceConfig()
        self.histograms: dict[str, Histogram] = {}
        self.nonfinite_gradients = 0
        self._configs: dict[str, CreateVariableRequest] = {}
        self._in_flight_calls = 0
        self._draining = False
        self._idle = asyncio.Event()
        self._idle.set()

    # -- lifecycle ------------------------------------------------------------------------------

    @contextmanager
    def _in_flight(self, name: str) -> Iterator[None]:
        if self._draining:
            raise GRPCError(Status.UNAVAILABLE, "this ps is shutting down; retry on another")
        self._in_flight_calls += 1
        self._idle.clear()
        start = time.perf_counter()
        try:
            yield
        finally:
            self._record(name, time.perf_counter() - start)
            self._in_flight_calls -= 1
            if self._in_flight_calls == 0:
                self._idle.set()

    @property
    def draining(self) -> bool:
        """True once :meth:`drain` was called: new calls get UNAVAILABLE."""
        return self._draining

    async def drain(self) -> None:
        """Refuse new calls and wait until the calls in flight have answered."""
        self._draining = True
        await self._idle.wait()

    def _record(self, name: str, seconds: float) -> None:
        histogram = self.histograms.get(name)
        if histogram is None:
            histogram = self.histograms.setdefault(name, Histogram())
        histogram.record(seconds)

    # -- variables ------------------------------------------------------------------------------

    def _tables_bytes(self) -> int:
        return sum(self.engine.table(name).nbytes for name in self.engine.variables)

    @_rpc("CreateVariable")
    async def create_variable(self, request: CreateVariableRequest) -> CreateVariableResponse:
        existing = self._configs.get(request.name)
        if existing is not None:
            if same_config(existing, request):
                return CreateVariableResponse(created=False)
            raise GRPCError(
                Status.ALREADY_EXISTS,
                f"variable {request.name!r} exists with another configuration",
            )
        budget = self.config.max_table_bytes - self._tables_bytes()
        table = table_from_request(request, budget)
        self.engine.create_variable(request.name, table)
        self._configs[request.name] = request
        return CreateVariableResponse(created=True)

    # -- the training step ----------------------------------------------------------------------

    @_rpc("FeedSample")
    async def feed_sample(self, request: FeedSampleRequest | FeedSampleView) -> FeedSampleResponse:
        start = time.perf_counter()
        items = []
        variables: Sequence[VariableSigns | VariableSignsView] = request.variables
        for i, var in enumerate(variables):
            signs = decode(var.signs, f"variables[{i}].signs ({var.name!r})", "uint64", 1)
            offsets = decode(var.offsets, f"variables[{i}].offsets ({var.name!r})", "int64", 1)
            items.append((var.name, signs, offsets))
        self._record("FeedSample.decode", time.perf_counter() - start)
        # Splitting by shard is kernel work: it runs on the scheduler, not on the event loop.
        key = items[0][0] if items else "__feed__"
        await self.engine.scheduler.run(key, self.engine.feed_many, request.batch_id, items)
        return FeedSampleResponse()

    @_rpc("EmbeddingLookup")
    async def embedding_lookup(self, request: EmbeddingLookupRequest) -> EmbeddingLookupResponse:
        start = time.perf_counter()
        pending = self.engine.start_lookup(request.batch_id, request.names)
        dispatched = time.perf_counter()
        results = await pending.wait()
        waited = time.perf_counter()
        if request.release:
            self.engine.release(request.batch_id, request.names)
        response = lookup_response(
            [(name, r.pooled, r.kernel_seconds) for name, r in results.items()]
        )
        self._record("EmbeddingLookup.dispatch", dispatched - start)
        self._record("EmbeddingLookup.wait", waited - dispatched)
        self._record("EmbeddingLookup.encode", time.perf_counter() - waited)
        for r in results.values():
            self._record("EmbeddingLookup.kernel", r.kernel_seconds)
        return response

    @_rpc("PushGrad")
    async def push_grad(self, request: PushGradRequest | PushGradView) -> PushGradResponse:
        start = time.perf_counter()
        grads: dict[str, np.ndarray] = {}
        received: Sequence[VariableGradient | VariableGradientView] = request.grads
        for i, var in enumerate(received):
            if var.name in grads:
                raise ValueError(f"grads[{i}] repeats variable {var.name!r}")
            grads[var.name] = decode(var.grad, f"grads[{i}].grad ({var.name!r})", "float32", 2)
        bad = [name for name, grad in grads.items() if not np.isfinite(grad).all()]
        self.nonfinite_gradients += len(bad)
        if bad and self.config.nonfinite == "reject":
            raise ValueError(
                f"gradient of {', '.join(map(repr, bad))} has NaN or Inf; nothing was applied"
            )
        decoded = time.perf_counter()
        await self.engine.push_grad_async(
            request.batch_id, {n: g for n, g in grads.items() if n not in bad}
        )
        self.engine.release(request.batch_id, bad)
        self._record("PushGrad.decode", decoded - start)
        self._record("PushGrad.apply", time.perf_counter() - decoded)
        return PushGradResponse(dropped_nonfinite=len(bad))

    # -- rows, checkpoints, statistics --------------------------------------------------------

    @_rpc("Pull")
    async def pull(self, request: PullRequest) -> PullResponse:
        table = self.engine.table(request.name)
        signs = decode(request.signs, "signs", "uint64", 1)
        rows = await self.engine.scheduler.run(request.name, table.get, signs)
        return PullResponse(rows=encode(rows))

    @_rpc("Push")
    async def push(self, request: PushRequest) -> PushResponse:
        table = self.engine.table(request.name)
        signs = decode(request.signs, "signs", "uint64", 1)
        rows = decode(request.rows, "rows", "float32", 2)
        if rows.shape != (len(signs), table.dim):
            raise ValueError(f"rows must have shape ({len(signs)}, {table.dim}), got {rows.shape}")
        n, slots = len(signs), table.optimizer.slots
        state = np.broadcast_to(
            table.optimizer.state_init()[None, :, None], (n, slots, table.dim)
        ).astype(np.float32)
        data = TableExport(
            signs=signs, weights=rows, state=state, steps=np.zeros(n, dtype=np.int32)
        )
        await self.engine.scheduler.run(request.name, table.import_, data)
        return PushResponse()

    def _variables(self) -> list[tuple[CreateVariableRequest, EmbeddingTable]]:
        return [(self._configs[name], self.engine.table(name)) for name in self.engine.variables]

    @_rpc("Save")
    async def save(self, request: SaveRequest) -> SaveResponse:
        if not request.directory:
            raise ValueError("directory must not be empty")
        variables = self._variables()
        rows = await self.engine.scheduler.run(
            "__checkpoint__", save_checkpoint, Path(request.directory), variables
        )
        return SaveResponse(variables=[c.name for c, _ in variables], rows=rows)

    @_rpc("Restore")
    async def restore(self, request: RestoreRequest) -> RestoreResponse:
        if not request.directory:
            raise ValueError("directory must not be empty")
        loaded = await self.engine.scheduler.run(
            "__checkpoint__", load_checkpoint, Path(request.directory)
        )
        tables = self._tables_for_restore(loaded)
        # Everything is checked before anything changes: a bad checkpoint leaves this ps as
        # it was, with no half-restored or empty variable behind.
        for (_, data), table in zip(loaded, tables, strict=True):
            table.check_import(data)
        for (config, data), table in zip(loaded, tables, strict=True):
            if config.name not in self._configs:
                self.engine.create_variable(config.name, table)
                self._configs[config.name] = config
            await self.engine.scheduler.run(config.name, table.import_, data)
        return RestoreResponse(
            variables=[c.name for c, _ in loaded], rows=sum(len(d.signs) for _, d in loaded)
        )

    def _tables_for_restore(
        self, loaded: list[tuple[CreateVariableRequest, TableExport]]
    ) -> list[EmbeddingTable]:
        """The table each checkpoint variable goes into: existing ones, or new unregistered
        ones built within the memory budget."""
        names = [config.name for config, _ in loaded]
        if len(set(names)) != len(names):
            raise ValueError("checkpoint lists a variable more than once")
        budget = self.config.max_table_bytes - self._tables_bytes()
        tables = []
        for config, _ in loaded:
            existing = self._configs.get(config.name)
            if existing is not None:
                if not same_config(existing, config):
                    raise ValueError(
                        f"variable {config.name!r} exists here with another "
                        "configuration than in the checkpoint"
                    )
                tables.append(self.engine.table(config.name))
            else:
                table = table_from_request(config, budget)
                budget -= table.nbytes
                tables.append(table)
        return tables

    @_rpc("Stats")
    async def stats(self, request: StatsRequest) -> StatsResponse:
        return StatsResponse(
            latencies=self.latency_summaries(),
            variables=[
                _variable_stats(name, self.engine.table(name)) for name in self.engine.variables
            ],
            scheduler=self.engine.scheduler.statistics().backend,
            pending_batches=self.engine.pending_batches(),
            nonfinite_gradients=self.nonfinite_gradients,
        )

    def latency_summaries(self) -> list[LatencySummary]:
        """p50/p95/p99/max in microseconds of every RPC and stage, sorted by name."""
        summaries = []
        for name in sorted(self.histograms):
            snap = self.histograms[name].snapshot()
            summaries.append(
                LatencySummary(
                    name=name,
                    count=snap.count,
                    p50_us=snap.p50_seconds * 1e6,
                    p95_us=snap.p95_seconds * 1e6,
                    p99_us=snap.p99_seconds * 1e6,
                    max_us=snap.max_seconds * 1e6,
                )
            )
        return summaries

    def log_statistics(self) -> None:
        """One line per RPC and stage, in the seed system's format."""
        for s in self.latency_summaries():
            log.info(
                "Ps%s statistics in microseconds, count: %d, p50: %.0f, p95: %.0f, "
                "p99: %.0f, max: %.0f",
                s.name,
                s.count,
                s.p50_us,
                s.p95_us,
                s.p99_us,
                s.max_us,
            )


def _variable_stats(name: str, table: EmbeddingTable) -> VariableStats:
    s = table.statistics()
    return VariableStats(
        name=name,
        rows=s.rows,
        capacity=s.capacity,
        inserts=s.inserts,
        evictions=s.evictions,
        hits=s.hits,
        misses=s.misses,
        admitted=s.admitted,
        rejected=s.rejected,
        dropped_gradients=s.dropped_gradients,
        bytes=s.bytes,
        shards=s.shards,
    )
