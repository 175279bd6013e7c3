"""The ps and hub contracts as Python: what a role answers, whatever carries the call.

``sniper.proto`` fixes the bytes; these protocols fix the calls. A role (``sniper.roles``)
implements them directly, the gRPC clients (:class:`~sniper.rpc.PsClient`,
:class:`~sniper.rpc.HubClient`) implement them over HTTP/2, and the in-process transport
(``sniper.transport``) as tasks of the called role. The hub, the trainer and
:class:`~sniper.roles.PsCluster` are written against these protocols only, which is what lets
one training job run across processes over gRPC or inside one process on trio.

The calls take and answer sniper's own values (:class:`~sniper.rpc.VariableConfig`,
:class:`~sniper.rpc.PsStats`, :class:`Pooled`...), never generated messages: the gRPC client
and service convert them at the wire, so a role and its callers know nothing of protobuf.

Failures keep gRPC's vocabulary on every transport: a call that fails raises
``grpclib.exceptions.GRPCError`` with the status and message a gRPC client would see, so code
that handles ``NOT_FOUND`` or ``UNAVAILABLE`` works unchanged on either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray

from sniper._arrays import is_float32_matrix
from sniper.placement import Placement
from sniper.rpc._stats import PsStats
from sniper.rpc._variable import VariableConfig

__all__ = [
    "Checkpointed",
    "HubApi",
    "LookupTarget",
    "MovedVariable",
    "NextLookup",
    "PendingFeed",
    "Pooled",
    "PsApi",
    "Sample",
    "Signs",
    "Weights",
]

Signs = tuple[NDArray[np.uint64], NDArray[np.int64]]
"""One variable's signs of a batch and the ``batch + 1`` offsets that split them by example."""

Weights = Mapping[str, NDArray[np.float32]]
"""The per-sign weights (float32 ``[n]``, in the order of the signs) of the variables of a
batch whose bags are weighted; a variable left out has every weight 1."""


@dataclass(frozen=True)
class Pooled:
    """One variable's answer to EmbeddingLookup."""

    pooled: NDArray[np.float32]
    """``[batch, dim]`` pool of each example's rows, as the variable's pooling says; for
    pooling ``none``, ``[values, dim]``: every value's row, example ``b``'s at
    ``pooled[offsets[b]:offsets[b + 1]]``."""
    kernel_seconds: float
    """Seconds the store kernels spent on this variable, summed over its shards: the load a
    variable puts on its ps (the seeds' ``time_spends``), whatever the other tasks did."""
    offsets: NDArray[np.int64] | None = None
    """Pooling ``none`` only: ``[batch + 1]`` offsets of each example's values in
    :attr:`pooled` (None for a pooled variable)."""


@dataclass(frozen=True)
class LookupTarget:
    """Where an EmbeddingLookup's answers go: each variable's block of columns in one matrix.

    A trainer's dense model takes ``[pooled embedding of each variable ‖ dense features]`` as
    one ``[batch, width]`` matrix. Naming the columns each variable fills lets a lookup write
    there directly (a ps in the same process pools into it; a gRPC client decodes into it)
    instead of answering one array per variable that the trainer then copies into place:
    76 strided copies a seed_ctr batch, 1.8 to 3.4 ms of the dense step.
    """

    matrix: NDArray[np.float32]
    """``[batch, width]`` float32, C-contiguous."""
    columns: Mapping[str, int]
    """Each variable's first column; its block is as wide as the variable's dim."""

    def __post_init__(self) -> None:
        if not is_float32_matrix(self.matrix):
            raise ValueError(
                "a lookup target's matrix must be a writable C-contiguous float32 array "
                "[batch, width]"
            )

    def check_rows(self, batch_size: int) -> None:
        """Refuse a batch of another size than the matrix's rows."""
        if self.matrix.shape[0] != batch_size:
            raise ValueError(
                f"the lookup target's matrix has {self.matrix.shape[0]} rows but the batch "
                f"has {batch_size} examples"
            )

    def column(self, name: str, dim: int) -> int:
        """Where variable ``name``'s block of ``dim`` columns starts; the error names what
        does not fit."""
        start = self.columns.get(name)
        if start is None:
            raise ValueError(f"the lookup target has no columns for variable {name!r}")
        if not 0 <= start <= self.matrix.shape[1] - dim:
            raise ValueError(
                f"variable {name!r} needs columns [{start}, {start + dim}) but the lookup "
                f"target's matrix has {self.matrix.shape[1]}"
            )
        return start

    def block(self, name: str, dim: int) -> NDArray[np.float32]:
        """Variable ``name``'s columns (a view)."""
        start = self.column(name, dim)
        return self.matrix[:, start : start + dim]

    def place(self, name: str, pooled: NDArray[np.float32]) -> NDArray[np.float32]:
        """Copy one variable's answer into its block; the block."""
        self.check_rows(pooled.shape[0])
        block = self.block(name, pooled.shape[1])
        block[...] = pooled
        return block


@dataclass(frozen=True)
class NextLookup:
    """An EmbeddingLookup to answer once a push is applied (:meth:`PsApi.push_grad_then_lookup`):
    the arguments of :meth:`PsApi.embedding_lookup`."""

    batch_id: int
    names: Sequence[str]
    release: bool = False
    into: LookupTarget | None = None


@dataclass(frozen=True)
class DataServed:
    """The data a hub serves (or a trainer expects): a trainer compares the two on its first
    read of each hub, so a hub serving other data than the trainer's is one line naming both,
    not a hang or a model trained on the wrong columns."""

    data: str
    """The ``data`` key: ``synthetic``, ``criteo:PATH``, ``parquet:PATH``."""
    variables: tuple[str, ...]
    dense_features: int
    batch_size: int
    digest: str
    """Of every data key (:meth:`sniper.data.DataSource.data_digest`): keys that change the
    batches without changing their shape (``scale``, ``seed``...) differ here."""

    def describe(self) -> str:
        """One line: what data, its shape, and its keys' digest."""
        return (
            f"data {self.data!r} ({len(self.variables)} variables, {self.dense_features} dense "
            f"features, batch_size {self.batch_size}, data keys digest {self.digest})"
        )

    def agrees_with(self, other: DataServed) -> bool:
        """The same data and shape (variables in any order)."""
        return (
            self.data,
            sorted(self.variables),
            self.dense_features,
            self.batch_size,
            self.digest,
        ) == (
            other.data,
            sorted(other.variables),
            other.dense_features,
            other.batch_size,
            other.digest,
        )


@dataclass(frozen=True)
class Sample:
    """One batch as the hub hands it to a trainer: its id, labels and dense features."""

    batch_id: int
    labels: NDArray[np.float32]
    """``[batch]``, or ``[batch, labels]`` for several."""
    dense: NDArray[np.float32]
    served: DataServed | None = None
    """What data the hub serves, when the read asked (``describe``) and the hub knows."""


@dataclass(frozen=True)
class Checkpointed:
    """What a Save or Restore wrote or loaded."""

    variables: tuple[str, ...]
    rows: int
    manifest_sha256: str = ""
    """SHA-256 of the checkpoint's manifest (which holds every file's): a job checkpoint
    records it, so a ps's part can live on the ps's own disk and still be verified."""


class PendingFeed(NamedTuple):
    """A batch fed to a ps and not yet pushed, as it moves with its variable."""

    batch_id: int
    signs: NDArray[np.uint64]
    offsets: NDArray[np.int64]
    weights: NDArray[np.float32] | None = None
    """Its signs' weights, if the batch was fed weighted."""


@dataclass(frozen=True)
class MovedVariable:
    """A variable on its way from one ps to another (ExportVariable, then ImportVariable).

    Its rows travel with their optimizer state, so training goes on where it was; the signs of
    its batches fed to the old ps and not yet pushed travel too, so no gradient is lost.
    """

    config: VariableConfig
    signs: NDArray[np.uint64]
    """``[rows]`` the signs that have a row."""
    weights: NDArray[np.float32]
    """``[rows, dim]``."""
    state: NDArray[np.float32]
    """``[rows, slots, dim]`` the optimizer's per-row state."""
    steps: NDArray[np.int32]
    """``[rows]`` optimizer steps (Adam), or empty."""
    pending: tuple[PendingFeed, ...]
    """Each batch fed and not yet pushed (a plain ``(batch id, signs, offsets)`` tuple is
    taken as an unweighted one)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "pending", tuple(PendingFeed(*p) for p in self.pending))


class PsApi(Protocol):
    """The calls of ``sniper.v1.Ps``, as a ps answers them."""

    async def create_variable(self, config: VariableConfig) -> bool:
        """Create a variable; False if it already existed with this configuration."""
        ...

    async def feed_sample(
        self, batch_id: int, variables: Mapping[str, Signs], *, weights: Weights | None = None
    ) -> None:
        """Keep each variable's signs of the batch until it is pushed or released; a
        variable in ``weights`` has weighted bags."""
        ...

    async def embedding_lookup(
        self,
        batch_id: int,
        names: Sequence[str],
        *,
        release: bool = False,
        into: LookupTarget | None = None,
    ) -> dict[str, Pooled]:
        """Pooled embeddings of a fed batch; ``release`` frees it (an evaluation batch).
        With ``into``, each answer is written into its block of ``into.matrix`` and the
        returned arrays are those blocks (except an unpooled variable's, which has no block:
        it is answered as an array of its own, with its offsets)."""
        ...

    async def push_grad(self, batch_id: int, grads: Mapping[str, NDArray[np.float32]]) -> int:
        """Apply gradients (``[batch, dim]``; ``[values, dim]`` for pooling ``none``) and
        free the batch; returns how many were dropped as non-finite."""
        ...

    async def push_grad_then_lookup(
        self, batch_id: int, grads: Mapping[str, NDArray[np.float32]], then: NextLookup
    ) -> tuple[int, dict[str, Pooled] | None]:
        """:meth:`push_grad`, then :meth:`embedding_lookup` of ``then``, in one call.

        A synchronous trainer's next lookup waits for its push anyway; answered in the push's
        call, it saves a round trip and a call a batch. Returns what :meth:`push_grad` does and
        the lookup's answers, or None where the lookup was not answered (the gradients are
        applied all the same): ask with :meth:`embedding_lookup` then, which says why.
        """
        ...

    async def pull(self, name: str, signs: NDArray[np.uint64]) -> NDArray[np.float32]:
        """Rows of ``signs`` (zeros for absent ones), without inserting any."""
        ...

    async def push(self, name: str, signs: NDArray[np.uint64], rows: NDArray[np.float32]) -> None:
        """Overwrite rows, resetting their optimizer state."""
        ...

    async def save(self, directory: str) -> Checkpointed:
        """Write every variable under ``directory``."""
        ...

    async def restore(self, directory: str) -> Checkpointed:
        """Load a checkpoint written by :meth:`save`."""
        ...

    async def stats(self) -> PsStats:
        """Latencies, tables and scheduler counters of this ps."""
        ...

    async def export_variable(self, name: str) -> MovedVariable:
        """Variable ``name`` with its rows and fed batches, to move it (changes nothing)."""
        ...

    async def import_variable(self, moved: MovedVariable) -> int:
        """Hold a moved variable: its rows replace any this ps has of it, and its fed batches
        join those fed here. Returns the rows written."""
        ...

    async def drop_variable(self, name: str) -> bool:
        """Forget a variable that moved away; False if it was not here."""
        ...


class HubApi(Protocol):
    """The call of ``sniper.v1.Hub``."""

    async def read_sample(self, *, describe: bool = False) -> Sample | None:
        """The next fed batch, or None at the end of the hub's data. The batch is leased to
        the caller: acknowledge it, or the hub hands it out again after its lease. With
        ``describe``, the sample says what data the hub serves (:attr:`Sample.served`)."""
        ...

    async def acknowledge(self, batch_ids: Sequence[int]) -> int:
        """Settle batches read (AckSample); how many of them were outstanding."""
        ...

    async def set_placement(self, placement: Placement) -> int:
        """Feed by ``placement`` from now on (SetPlacement), once the feeds in flight have
        answered; returns the version the hub now feeds with."""
        ...
