"""What a ps reports of itself (Stats) as sniper speaks it, and its ``StatsResponse`` form.

:class:`PsStats` is what :meth:`~sniper.rpc.PsApi.stats` answers on every transport; only the
gRPC client and service see the message (:func:`stats_to_message`, :func:`stats_from_message`).
Its latencies are :class:`~sniper._metrics.LatencySummary`, the one latency type of sniper,
keyed by the call or stage they time; the message carries each with its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TypeVar

from sniper._metrics import LatencySummary
from sniper.rpc._generated.sniper.v1 import LatencySummary as LatencySummaryMessage
from sniper.rpc._generated.sniper.v1 import StatsResponse
from sniper.rpc._generated.sniper.v1 import VariableStats as VariableStatsMessage
from sniper.store import TableStatistics

__all__ = ["PsStats", "VariableStats", "stats_from_message", "stats_to_message"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class VariableStats(TableStatistics):
    """One variable's table on a ps: the table's counters, and the load it puts on its ps."""

    name: str
    """The variable."""
    kernel_seconds: float
    """Store kernel time of its lookups and pushes, ever: the load it puts on its ps."""


@dataclass(frozen=True)
class PsStats:
    """A ps's Stats: latencies, tables and counters, read at one moment."""

    latencies: Mapping[str, LatencySummary] = field(hash=False)
    """Each call (``EmbeddingLookup``) and stage (``EmbeddingLookup.kernel``...) by name,
    sorted by name."""
    variables: tuple[VariableStats, ...]
    """Each variable this ps holds."""
    scheduler: str
    """The scheduler its kernels run on, by name."""
    pending_batches: int
    """(batch, variable) pairs fed and not yet pushed or released."""
    nonfinite_gradients: int
    """Gradients with NaN or Inf it refused or dropped."""
    cpu_seconds: float
    """CPU time of the ps process so far (user + system)."""


def stats_to_message(stats: PsStats) -> StatsResponse:
    """The Stats answer of ``stats``."""
    return StatsResponse(
        latencies=[
            LatencySummaryMessage(name=name, **asdict(summary))
            for name, summary in stats.latencies.items()
        ],
        variables=[VariableStatsMessage(**asdict(v)) for v in stats.variables],
        scheduler=stats.scheduler,
        pending_batches=stats.pending_batches,
        nonfinite_gradients=stats.nonfinite_gradients,
        cpu_seconds=stats.cpu_seconds,
    )


def stats_from_message(message: StatsResponse) -> PsStats:
    """The statistics a Stats answer carries."""
    return PsStats(
        latencies={s.name: _fields_of(s, LatencySummary) for s in message.latencies},
        variables=tuple(_fields_of(v, VariableStats) for v in message.variables),
        scheduler=message.scheduler,
        pending_batches=message.pending_batches,
        nonfinite_gradients=message.nonfinite_gradients,
        cpu_seconds=message.cpu_seconds,
    )


def _fields_of(message: object, cls: type[_T]) -> _T:
    """A ``cls`` of the fields of ``message`` that ``cls`` has (both name them alike)."""
    return cls(**{f.name: getattr(message, f.name) for f in fields(cls)})  # type: ignore[arg-type]
