"""sniper: a Python parameter server for CTR models with huge sparse embedding tables.

Layout, from the bottom up (each package imports only the ones above it in this list, which
``tests/test_boundaries.py`` checks):

- :mod:`sniper.hashing`: which ps holds a variable and which shard holds a sign; the contract
  other languages' ports are checked against (``sniper conformance hash``).
- :mod:`sniper.runtime`: process-wide settings (logging, gc, malloc) and ``/proc`` reading.
- :mod:`sniper.store`: embedding tables (rows, optimizers, eviction, admission) and kernels.
- :mod:`sniper.scheduler`: the pluggable task schedulers a ps runs its kernels on.
- :mod:`sniper.data`: readers (synthetic, Criteo TSV, Parquet), batches, AUC.
- :mod:`sniper.placement`: which ps holds each variable, balanced starts, auto_shard's planner.
- :mod:`sniper.rpc`: the ``sniper.v1`` contract, its Python protocols and the gRPC clients.
- :mod:`sniper.models`: the dense-model interface the trainer calls, and the numpy MLP.
- :mod:`sniper.roles`: the ps, hub and trainer as anyio actors, and :class:`PsCluster`.
- :mod:`sniper.transport`: how calls reach the roles, by name: ``grpc``, ``inprocess``.
- :mod:`sniper.monitoring`: every role's Prometheus metrics.
- :mod:`sniper.cluster`: a whole job: config, plan, launchers by name, supervision, report.
- :mod:`sniper.testing`: an in-process cluster and the contract suites for plugins.
- ``sniper._bench`` (``sniper bench ...``), :mod:`sniper.experiment` and :mod:`sniper.cli`
  (``sniper ...``) sit on top.

The names below are re-exported here for convenience and imported on first use, so
``import sniper`` stays cheap (the CLI starts without loading numba or grpclib).
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

__version__ = "0.1.0"

_EXPORTS = {
    "EmbeddingTable": "sniper.store",
    "HubRole": "sniper.roles",
    "PsCluster": "sniper.roles",
    "PsEngine": "sniper.roles",
    "PsRole": "sniper.roles",
    "Trainer": "sniper.roles",
    "TrainerConfig": "sniper.roles",
    "PsClient": "sniper.rpc",
    "TaskKey": "sniper.scheduler",
    "open_reader": "sniper.data",
    "open_scheduler": "sniper.scheduler",
    "open_transport": "sniper.transport",
}

__all__ = [
    "EmbeddingTable",
    "HubRole",
    "PsClient",
    "PsCluster",
    "PsEngine",
    "PsRole",
    "TaskKey",
    "Trainer",
    "TrainerConfig",
    "__version__",
    "open_reader",
    "open_scheduler",
    "open_transport",
]
# test_exports checks that __all__ and _EXPORTS name the same things.

if _typing.TYPE_CHECKING:
    from sniper.data import open_reader as open_reader
    from sniper.roles import HubRole as HubRole
    from sniper.roles import PsCluster as PsCluster
    from sniper.roles import PsEngine as PsEngine
    from sniper.roles import PsRole as PsRole
    from sniper.roles import Trainer as Trainer
    from sniper.roles import TrainerConfig as TrainerConfig
    from sniper.rpc import PsClient as PsClient
    from sniper.scheduler import TaskKey as TaskKey
    from sniper.scheduler import open_scheduler as open_scheduler
    from sniper.store import EmbeddingTable as EmbeddingTable
    from sniper.transport import open_transport as open_transport


def __getattr__(name: str) -> _typing.Any:
    package = _EXPORTS.get(name)
    if package is None:
        raise AttributeError(f"module 'sniper' has no attribute {name!r}")
    value = getattr(_importlib.import_module(package), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
