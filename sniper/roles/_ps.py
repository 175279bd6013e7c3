"""``PsRole``: a ps as an actor, whatever transport carries its calls.

The role implements :class:`~sniper.rpc.PsApi` on Python values: it owns a :class:`PsEngine`,
the CreateVariable configuration of every variable, the policies (non-finite gradients, the
memory budget), the latency histograms and the drain on shutdown. A transport decodes a request,
calls the role, and encodes the answer; the role calls the engine, the engine the scheduler,
the scheduler the store. That is the one path of every RPC, FeedSample included, so the gRPC
server, the in-process transport and a custom server embedding a role behave the same.

Errors are raised as ``sniper.roles`` exceptions (:class:`UnknownVariableError`,
:class:`Unavailable`, ``ValueError`` for a bad value...) and mapped to gRPC statuses by the
transport. Nothing is changed by a failed call.

Latency histograms cover every call and, for EmbeddingLookup and PushGrad, their stages:
``dispatch`` (plan and submit tasks), ``wait`` (until the last task is done), ``kernel`` (store
kernel time, per variable), ``apply``; the gRPC transport adds ``decode`` and ``encode``. They
match the seed system's ``PsEmbeddingLookup{Dispatch,Waiting,OneVariable}`` lines.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread
import numpy as np
from numpy.typing import NDArray

from sniper._config import RunSettings, Validated, check_at_least, check_positive, fields_of
from sniper._metrics import Histogram
from sniper.roles._checkpoint import (
    CheckpointPathError,
    confined,
    load_checkpoint,
    manifest_digest,
    save_checkpoint,
)
from sniper.roles._engine import EngineConfig, PsEngine
from sniper.roles._errors import (
    InFlightLimitError,
    Unavailable,
    UnknownVariableError,
    VariableExistsError,
)
from sniper.roles._variables import table_from_config
from sniper.rpc import (
    Checkpointed,
    LatencySummary,
    LookupTarget,
    MovedVariable,
    NextLookup,
    PendingFeed,
    Pooled,
    PsStats,
    Signs,
    VariableConfig,
    VariableStats,
    Weights,
)
from sniper.runtime import release_freed_memory
from sniper.scheduler import Scheduler, scheduler_names
from sniper.store import (
    FLOAT32_MAX,
    LOCK_MODES,
    POOLINGS,
    EmbeddingTable,
    LockMode,
    Pooling,
    TableExport,
    load_kernels,
    max_abs_matrices,
    strides_of,
)

__all__ = ["MAX_PUSH_VALUE", "PsRole", "PsRoleConfig", "PsSettings"]

log = logging.getLogger("sniper.ps")

_MB = 2**20
_RELEASE_AFTER_BYTES = 64 * _MB
"""Requests in flight past this, once all done, have the freed memory given back..."""
_RELEASE_DELAY = 0.5
"""...this many seconds later."""

MAX_PUSH_VALUE = 1e30
"""The largest ``|value|`` Push writes into a row; a row holding more is refused whole.

Push is the one call that writes rows of the caller's choosing, and a lookup sums a bag's
rows in float32: two finite rows of 3e38 pool to Inf. Below this bound a bag of up to 3.4e8
rows (far more than one request can carry) pools to a finite sum, so the lookup need not
check or saturate what it serves. Trained rows stay far below it: an optimizer step that
would make a row non-finite is not applied (``nonfinite_updates``)."""


@dataclass(frozen=True)
class PsRoleConfig(Validated):
    """Policies of a ps; validated at construction."""

    nonfinite: Literal["reject", "drop"] = "reject"
    """What a NaN or Inf gradient gets: an INVALID_ARGUMENT, or dropped and counted. A finite
    gradient that the optimizer would turn into a NaN or Inf row (one too large for the row's
    state) is found only while rows are updated, so it cannot refuse the whole push: under
    either policy that row keeps its values and is counted (Stats ``nonfinite_updates``).
    No lookup is ever served a non-finite row."""
    max_table_gb: float = 16.0
    """Memory all tables of this ps may preallocate together."""
    checkpoint_root: str = ""
    """Save and Restore name directories under this one (relative to it, or absolute inside
    it); anything else is refused with PERMISSION_DENIED, and so is every Save and Restore
    while it is unset: a client must not choose where the ps process writes."""
    lock: LockMode = "shard"
    """What every table's lookups and pushes lock: ``shard`` (one lock per shard), ``table``,
    ``global`` (one lock over every variable of the process, the seeds' first design) or
    ``none`` (only index changes and pushes are locked; lookups read rows unlocked)."""
    pooling: Pooling = "fused"
    """``fused`` pools rows as they are read; ``separate`` copies them out first, then sums
    (the seeds' Embedding + SeqPool, for the experiment that compares them)."""
    max_inflight_mb: float = 1024.0
    """Request bytes (FeedSample signs, PushGrad gradients, Push rows, a moved variable's
    rows) this ps works on at once. A request that would take it past this is refused at
    once with RESOURCE_EXHAUSTED naming the numbers, not made to wait: its bytes are in
    memory already, and a refusal frees them where a wait would hold them. A training job
    keeps a few MB in flight per ps; 8 concurrent 229 MiB Push calls took a ps from 451 MB
    to 5.3 GB without it. Once the requests in flight are done after a burst of more than
    64 MB, the ps gives the freed memory back to the kernel."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.nonfinite not in ("reject", "drop"):
            raise ValueError(f"nonfinite must be 'reject' or 'drop', got {self.nonfinite!r}")
        if self.lock not in LOCK_MODES:
            raise ValueError(f"lock must be one of {', '.join(LOCK_MODES)}, got {self.lock!r}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        check_positive(self, "max_table_gb", "max_inflight_mb")

    def table(self, config: VariableConfig, budget_bytes: int) -> EmbeddingTable:
        """The table of a variable's configuration, with this ps's lock and pooling."""
        return table_from_config(config, budget_bytes, lock=self.lock, pooling=self.pooling)

    @property
    def max_table_bytes(self) -> int:
        return int(self.max_table_gb * 2**30)


@dataclass(frozen=True)
class PsSettings(PsRoleConfig, EngineConfig, RunSettings):
    """A ps process: its role's policies, its engine's limits and what it runs them on.
    ``sniper serve`` and ``sniper train`` configs inherit these keys, so each is declared and
    checked once."""

    scheduler: str = "adaptive"
    """A name of :func:`sniper.scheduler.scheduler_names` (built-in or plugin). ``adaptive``
    runs small requests (see ``small_request_signs``) on the thread that received them and
    the rest on work-stealing workers."""
    workers: int = 0
    """Scheduler threads per ps (0: the machine's cores, shared among the ps started)."""
    map_rows: Literal["feed", "lookup"] = "feed"
    """When a batch's signs are resolved to rows: ``feed`` (when FeedSample arrives, while the
    trainer is busy with earlier batches; the rows stay pinned until PushGrad, so the lookup
    only gathers) or ``lookup`` (the index is probed on the trainer's critical path)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.scheduler not in scheduler_names():
            raise ValueError(
                f"scheduler must be one of {', '.join(scheduler_names())}, got {self.scheduler!r}"
            )
        check_at_least(self, 0, "workers")
        if self.map_rows not in ("feed", "lookup"):
            raise ValueError(f"map_rows must be 'feed' or 'lookup', got {self.map_rows!r}")

    def engine(self, scheduler: Scheduler) -> PsEngine:
        """An engine on ``scheduler`` with these settings' batch limits."""
        return PsEngine(
            scheduler, **fields_of(self, EngineConfig), map_at_feed=self.map_rows == "feed"
        )

    async def ps_role(self, scheduler: Scheduler) -> PsRole:
        """A ps role on ``scheduler`` with these settings, the store's kernels loaded first, on
        a thread (:func:`~sniper.store.load_kernels`): on an empty numba cache they compile for
        17 s, which in the first CreateVariable would hold the role's loop that long and come
        near a client's 30 s deadline. Every server of a ps (``sniper serve``, a Ray actor,
        the one-process job) makes its role here, before it takes a request."""
        await anyio.to_thread.run_sync(load_kernels)
        return PsRole(self.engine(scheduler), self)

    def worker_threads(self, num_ps: int = 1) -> int:
        """Threads each of ``num_ps`` ps on this machine runs: ``workers``, or a share."""
        return self.workers or max(1, (os.cpu_count() or 1) // max(1, num_ps))


class PsRole:
    """The ps: construct with an engine, serve with any transport (see the module doc)."""

    def __init__(self, engine: PsEngine, config: PsRoleConfig | None = None) -> None:
        self.engine = engine
        self.config = config or PsRoleConfig()
        self.histograms: dict[str, Histogram] = {}
        self.nonfinite_gradients = 0
        self._configs: dict[str, VariableConfig] = {}
        self._in_flight_calls = 0
        self._in_flight_bytes = 0
        self._peak_bytes = 0  # the most in flight since the last release to the kernel
        self._draining = False
        self._idle: anyio.Event | None = None  # made by drain(): it needs a running loop
        self._layout: anyio.Lock | None = None  # made on first use, for the same reason

    # -- lifecycle ------------------------------------------------------------------------------

    @contextmanager
    def call(self, name: str, nbytes: int = 0) -> Iterator[None]:
        """Count and time one call of ``nbytes`` request bytes; refused with
        :class:`Unavailable` once draining, and with ``MemoryError`` (RESOURCE_EXHAUSTED) past
        ``max_inflight_mb`` (see :attr:`PsRoleConfig.max_inflight_mb`)."""
        if self._draining:
            raise Unavailable("this ps is shutting down; retry on another")
        self._admit_bytes(name, nbytes)
        self._in_flight_calls += 1
        self._in_flight_bytes += nbytes
        self._peak_bytes = max(self._peak_bytes, self._in_flight_bytes)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.record(name, time.perf_counter() - start)
            self._in_flight_calls -= 1
            self._in_flight_bytes -= nbytes
            if self._in_flight_bytes == 0 and self._peak_bytes > _RELEASE_AFTER_BYTES:
                self._peak_bytes = 0
                # Soon, not now: the transport frees the last request's message (and sends
                # its answer) only after this call returns.
                timer = threading.Timer(_RELEASE_DELAY, release_freed_memory)
                timer.daemon = True
                timer.start()
            if self._in_flight_calls == 0 and self._idle is not None:
                self._idle.set()

    def _admit_bytes(self, name: str, nbytes: int) -> None:
        """Refuse a request whose bytes would take those in flight past ``max_inflight_mb``."""
        cap = self.config.max_inflight_mb
        if self._in_flight_bytes + nbytes <= cap * _MB:
            return
        size = f"{name} of {nbytes / _MB:.1f} MB"
        if nbytes > cap * _MB:
            raise InFlightLimitError(
                f"{size} is over this ps's max_inflight_mb of {cap:g}; send it in parts, "
                "or raise max_inflight_mb"
            )
        raise InFlightLimitError(
            f"{size} refused: this ps has {self._in_flight_bytes / _MB:.1f} MB of requests in "
            f"flight and max_inflight_mb is {cap:g}; retry once they are done, or raise "
            "max_inflight_mb"
        )

    @property
    def draining(self) -> bool:
        """True once :meth:`drain` was called: new calls are refused."""
        return self._draining

    @property
    def healthy(self) -> bool:
        """Whether this ps can serve (its health answer): not draining, and its scheduler,
        which runs every kernel, still takes work."""
        return not self._draining and not self.engine.scheduler.closed

    async def drain(self) -> None:
        """Refuse new calls and wait until the calls in flight have answered."""
        self._draining = True
        while self._in_flight_calls:
            self._idle = anyio.Event()
            await self._idle.wait()

    def record(self, name: str, seconds: float) -> None:
        """Add one latency to the histogram ``name`` (a call or a stage of one)."""
        histogram = self.histograms.get(name)
        if histogram is None:
            histogram = self.histograms.setdefault(name, Histogram())
        histogram.record(seconds)

    # -- variables ------------------------------------------------------------------------------

    def _tables_bytes(self) -> int:
        return sum(self.engine.table(name).nbytes for name in self.engine.variables)

    def _layout_lock(self) -> anyio.Lock:
        """Serializes what changes or reads the set of tables as a whole (CreateVariable,
        Save, Restore): a Save retried while the first still runs must not interleave its
        files with it, and a CreateVariable must not slip in between a Restore's checks and
        its swap. The training step never takes it."""
        if self._layout is None:
            self._layout = anyio.Lock()
        return self._layout

    async def create_variable(self, config: VariableConfig) -> bool:
        with self.call("CreateVariable"):
            async with self._layout_lock():
                return self._create_variable(config)

    def _create_variable(self, config: VariableConfig) -> bool:
        existing = self._configs.get(config.name)
        if existing is not None:
            if existing == config:
                return False
            raise VariableExistsError(f"variable {config.name!r} exists with another configuration")
        budget = self.config.max_table_bytes - self._tables_bytes()
        table = self.config.table(config, budget)
        self.engine.create_variable(config.name, table)
        self._configs[config.name] = config
        return True

    # -- the training step ----------------------------------------------------------------------

    async def feed_sample(
        self, batch_id: int, variables: Mapping[str, Signs], *, weights: Weights | None = None
    ) -> None:
        nbytes = sum(signs.nbytes + offsets.nbytes for signs, offsets in variables.values())
        nbytes += sum(w.nbytes for w in (weights or {}).values())
        with self.call("FeedSample", nbytes):
            await self.engine.feed_async(
                batch_id,
                [(name, signs, offsets) for name, (signs, offsets) in variables.items()],
                weights,
            )

    async def embedding_lookup(
        self,
        batch_id: int,
        names: Sequence[str],
        *,
        release: bool = False,
        into: LookupTarget | None = None,
    ) -> dict[str, Pooled]:
        with self.call("EmbeddingLookup"):
            start = time.perf_counter()
            pending = self.engine.start_lookup(batch_id, names, into)
            dispatched = time.perf_counter()
            results = await pending.wait()
            if release:
                self.engine.release(batch_id, names)
            self.record("EmbeddingLookup.dispatch", dispatched - start)
            self.record("EmbeddingLookup.wait", time.perf_counter() - dispatched)
            for result in results.values():
                self.record("EmbeddingLookup.kernel", result.kernel_seconds)
            return results

    async def push_grad(self, batch_id: int, grads: Mapping[str, NDArray[np.float32]]) -> int:
        with self.call("PushGrad", sum(np.asarray(grad).nbytes for grad in grads.values())):
            start = time.perf_counter()
            bad = _nonfinite(grads)
            self.nonfinite_gradients += len(bad)
            if bad and self.config.nonfinite == "reject":
                raise ValueError(
                    f"gradient of {', '.join(map(repr, bad))} has NaN or Inf; nothing was applied"
                )
            await self.engine.push_grad_async(
                batch_id, {n: g for n, g in grads.items() if n not in bad}
            )
            self.engine.release(batch_id, bad)
            self.record("PushGrad.apply", time.perf_counter() - start)
            return len(bad)

    async def push_grad_then_lookup(
        self, batch_id: int, grads: Mapping[str, NDArray[np.float32]], then: NextLookup
    ) -> tuple[int, dict[str, Pooled] | None]:
        dropped = await self.push_grad(batch_id, grads)
        start = time.perf_counter()
        try:
            pooled = await self.embedding_lookup(
                then.batch_id, then.names, release=then.release, into=then.into
            )
        except Exception as exc:  # the push stands: the caller's own lookup says why
            log.debug("PushGrad of batch %d: then_lookup not answered: %s", batch_id, exc)
            return dropped, None
        self.record("PushGrad.then_lookup", time.perf_counter() - start)
        return dropped, pooled

    # -- rows, checkpoints, statistics --------------------------------------------------------

    def row_bytes(self, name: str) -> int:
        """Bytes of one row of variable ``name`` as a Pull answers it."""
        return 4 * self.engine.table(name).dim

    def lookup_bytes(self, batch_id: int, names: Sequence[str], itemsize: int = 4) -> int:
        """Bytes of the pooled rows an EmbeddingLookup of ``names`` would answer, at
        ``itemsize`` bytes a value (a variable or batch not held counts 0: its lookup fails
        for that, naming it)."""
        total = 0
        for name in names:
            size = self.engine.fed_batch_size(batch_id, name)
            if size is not None and name in self._configs:
                total += size * self.engine.table(name).dim * itemsize
        return total

    async def pull(self, name: str, signs: NDArray[np.uint64]) -> NDArray[np.float32]:
        with self.call("Pull"):
            return await self.engine.pull_async(name, signs)

    async def push(self, name: str, signs: NDArray[np.uint64], rows: NDArray[np.float32]) -> None:
        with self.call("Push", signs.nbytes + rows.nbytes):
            table = self.engine.table(name)
            if rows.shape != (len(signs), table.dim):
                raise ValueError(
                    f"rows must have shape ({len(signs)}, {table.dim}), got {rows.shape}"
                )
            _check_push_rows(name, rows)
            n, slots = len(signs), table.optimizer.slots
            state = np.broadcast_to(
                table.optimizer.state_init()[None, :, None], (n, slots, table.dim)
            ).astype(np.float32)
            data = TableExport(
                signs=signs, weights=rows, state=state, steps=np.zeros(n, dtype=np.int32)
            )
            await self.engine.import_async(name, data)

    def _variables(self) -> list[tuple[VariableConfig, EmbeddingTable]]:
        return [(self._configs[name], self.engine.table(name)) for name in self.engine.variables]

    def _checkpoint_path(self, directory: str) -> Path:
        if not self.config.checkpoint_root:
            raise CheckpointPathError(
                "this ps has no checkpoint_root, so Save and Restore are off; start it with "
                "--checkpoint-root DIR (checkpoint_root in its config)"
            )
        return confined(Path(self.config.checkpoint_root), directory)

    async def save(self, directory: str) -> Checkpointed:
        with self.call("Save"):
            path = self._checkpoint_path(directory)
            async with self._layout_lock():
                variables = self._variables()
                rows = await self.engine.run_exclusive(save_checkpoint, path, variables)
            digest = await anyio.to_thread.run_sync(manifest_digest, path)
            return Checkpointed(tuple(config.name for config, _ in variables), rows, digest)

    async def restore(self, directory: str) -> Checkpointed:
        """Replace each checkpoint variable's rows with the checkpoint's (variables it does
        not hold are left alone). The rows go into fresh tables first, and the tables are
        swapped in only once every one is filled: a bad checkpoint changes nothing."""
        with self.call("Restore"):
            path = self._checkpoint_path(directory)
            async with self._layout_lock():
                return await self._restore(path)

    async def _restore(self, path: Path) -> Checkpointed:
        loaded = await self.engine.run_exclusive(load_checkpoint, path)
        digest = await anyio.to_thread.run_sync(manifest_digest, path)
        tables = self._fresh_tables(loaded)
        for (_, data), table in zip(loaded, tables, strict=True):
            table.check_import(data)
        for (_, data), table in zip(loaded, tables, strict=True):
            await self.engine.run_exclusive(table.import_, data)
        for (config, _), table in zip(loaded, tables, strict=True):
            self.engine.put_variable(config.name, table)
            self._configs[config.name] = config
        self.engine.forget_pushed(config.name for config, _ in loaded)
        rows = sum(len(d.signs) for _, d in loaded)
        return Checkpointed(tuple(c.name for c, _ in loaded), rows, digest)

    def _fresh_tables(
        self, loaded: list[tuple[VariableConfig, TableExport]], source: str = "checkpoint"
    ) -> list[EmbeddingTable]:
        """An empty table for each variable loaded from ``source`` (a checkpoint, or a move),
        within the memory budget (a table that will be replaced counts as free)."""
        replaced = 0
        for config, _ in loaded:
            existing = self._configs.get(config.name)
            if existing is None:
                continue
            if existing != config:
                raise ValueError(
                    f"variable {config.name!r} exists here with another "
                    f"configuration than in the {source}"
                )
            replaced += self.engine.table(config.name).nbytes
        budget = self.config.max_table_bytes - self._tables_bytes() + replaced
        tables = []
        for config, _ in loaded:
            table = self.config.table(config, budget)
            budget -= table.nbytes
            tables.append(table)
        return tables

    # -- moving a variable (auto_shard) ---------------------------------------------------------

    async def export_variable(self, name: str) -> MovedVariable:
        with self.call("ExportVariable"):
            async with self._layout_lock():
                config = self._configs.get(name)
                if config is None:
                    raise UnknownVariableError(f"unknown variable {name!r}")
                rows = await self.engine.run_exclusive(self.engine.table(name).export)
                pending = tuple(
                    PendingFeed(batch_id, *batch.unsplit())
                    for batch_id, batch in self.engine.batches_of(name)
                )
                return MovedVariable(
                    config, rows.signs, rows.weights, rows.state, rows.steps, pending
                )

    async def import_variable(self, moved: MovedVariable) -> int:
        """Hold a variable moved here: a fresh table filled with its rows replaces any table of
        it (one created for the move holds fed batches, never rows), then its fed batches join
        those fed here. Everything is checked before anything changes."""
        moved_bytes = sum(
            array.nbytes for array in (moved.signs, moved.weights, moved.state, moved.steps)
        )
        with self.call("ImportVariable", moved_bytes):
            async with self._layout_lock():
                data = TableExport(moved.signs, moved.weights, moved.state, moved.steps)
                (table,) = self._fresh_tables([(moved.config, data)], "move")
                table.check_import(data)
                for feed in moved.pending:
                    table.split(*feed[1:])  # validates; the engine splits them again
                await self.engine.run_exclusive(table.import_, data)
                name = moved.config.name
                self.engine.put_variable(name, table)
                self._configs[name] = moved.config
                self.engine.adopt(name, moved.pending)
                return len(moved.signs)

    async def drop_variable(self, name: str) -> bool:
        with self.call("DropVariable"):
            async with self._layout_lock():
                self._configs.pop(name, None)
                return self.engine.drop_variable(name)

    async def stats(self) -> PsStats:
        with self.call("Stats"):
            kernel = self.engine.kernel_seconds
            return PsStats(
                latencies=self.latency_summaries(),
                variables=tuple(
                    _variable_stats(name, self.engine.table(name), kernel.get(name, 0.0))
                    for name in self.engine.variables
                ),
                scheduler=self.engine.scheduler.statistics().backend,
                pending_batches=self.engine.pending_batches(),
                nonfinite_gradients=self.nonfinite_gradients,
                cpu_seconds=time.process_time(),
            )

    def latency_summaries(self) -> dict[str, LatencySummary]:
        """Count and p50/p95/p99/max in microseconds of every call and stage, sorted by name."""
        return {name: self.histograms[name].summary() for name in sorted(self.histograms)}

    def log_statistics(self) -> None:
        """One line per call and stage, in the seed system's format."""
        for name, s in self.latency_summaries().items():
            log.info(
                "Ps%s statistics in microseconds, count: %d, p50: %.0f, p95: %.0f, "
                "p99: %.0f, max: %.0f",
                name,
                s.count,
                s.p50_us,
                s.p95_us,
                s.p99_us,
                s.max_us,
            )


def _variable_stats(name: str, table: EmbeddingTable, kernel_seconds: float) -> VariableStats:
    statistics = asdict(table.statistics())
    return VariableStats(name=name, kernel_seconds=kernel_seconds, **statistics)


def _check_push_rows(name: str, rows: NDArray[Any]) -> None:
    """Refuse rows with NaN, Inf, or a value above :data:`MAX_PUSH_VALUE` (its doc says why)."""
    if not rows.size:
        return
    if strides_of(rows) is not None:
        largest = float(max_abs_matrices([rows])[0])
    else:
        largest = float(np.abs(rows).max())
    if largest <= np.float32(MAX_PUSH_VALUE):  # 1e30 as float32 holds it: 1.0000000150e30
        return
    if not np.isfinite(largest):
        raise ValueError(f"rows of {name!r} have NaN or Inf; nothing was written")
    raise ValueError(
        f"rows of {name!r} hold a value of magnitude {largest:.3g}, over Push's bound of "
        f"{MAX_PUSH_VALUE:g} (a lookup's sum of such rows could overflow float32); nothing was "
        "written"
    )


def _nonfinite(grads: Mapping[str, NDArray[Any]]) -> list[str]:
    """The names whose gradient has NaN or Inf. Gradients as they arrive (float32 with positive
    strides: blocks of the trainer's transposed product are read in place) are checked in one
    kernel call without the GIL (:func:`~sniper.store._grouped.max_abs_matrices` says why one);
    any other (an embedder's float64, a 1-D array) by numpy."""
    readable = {name: grad for name, grad in grads.items() if strides_of(grad) is not None}
    largest = dict(zip(readable, max_abs_matrices(list(readable.values())), strict=True))
    return [
        name
        for name, grad in grads.items()
        if not (largest[name] <= FLOAT32_MAX if name in largest else np.isfinite(grad).all())
    ]
