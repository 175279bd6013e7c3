"""Test helpers for code that embeds or talks to sniper, and the contract suites.

- :func:`running_ps` starts a real ps on a free loopback port inside the running asyncio loop
  and yields its :class:`~sniper.roles.PsRole` with a connected :class:`~sniper.rpc.PsClient`:
  real gRPC, no mocks, no subprocess (grpclib runs on asyncio only).
- :func:`local_cluster` starts a whole job in this process: ``num_ps`` ps, ``num_hubs`` hubs
  reading one :class:`~sniper.data.Reader`, over a transport chosen by name. On ``inprocess``
  it runs on any anyio backend, trio included; :meth:`LocalCluster.train` trains on it through
  the same functions ``sniper train`` uses.
- The contract suites: :func:`check_scheduler` (and the other ``check_*``) prove a scheduler
  backend, an embedding store or a hash port in another language against sniper's contracts
  (see the README's "Plugins and conformance").
"""

from sniper._contracts import Blockers as Blockers
from sniper._contracts import ContractViolation as ContractViolation
from sniper._contracts import HashCommandError as HashCommandError
from sniper._contracts import HashMismatch as HashMismatch
from sniper._contracts import HashReport as HashReport
from sniper._contracts import OpenBackend as OpenBackend
from sniper._contracts import OpenStore as OpenStore
from sniper._contracts import ReferenceTable as ReferenceTable
from sniper._contracts import check_backpressure as check_backpressure
from sniper._contracts import check_cancellation as check_cancellation
from sniper._contracts import check_errors as check_errors
from sniper._contracts import check_exactly_once as check_exactly_once
from sniper._contracts import check_export_import_round_trip as check_export_import_round_trip
from sniper._contracts import check_hash_command as check_hash_command
from sniper._contracts import check_merge as check_merge
from sniper._contracts import check_per_key_order as check_per_key_order
from sniper._contracts import check_scheduler as check_scheduler
from sniper._contracts import check_shutdown as check_shutdown
from sniper._contracts import check_statistics as check_statistics
from sniper._contracts import check_store_matches_reference as check_store_matches_reference
from sniper._contracts import ragged_batches as ragged_batches
from sniper.testing._cluster import LocalCluster as LocalCluster
from sniper.testing._cluster import local_cluster as local_cluster
from sniper.testing._cluster import running_ps as running_ps

__all__ = [
    "Blockers",
    "ContractViolation",
    "HashCommandError",
    "HashMismatch",
    "HashReport",
    "LocalCluster",
    "OpenBackend",
    "OpenStore",
    "ReferenceTable",
    "check_backpressure",
    "check_cancellation",
    "check_errors",
    "check_exactly_once",
    "check_export_import_round_trip",
    "check_hash_command",
    "check_merge",
    "check_per_key_order",
    "check_scheduler",
    "check_shutdown",
    "check_statistics",
    "check_store_matches_reference",
    "local_cluster",
    "ragged_batches",
    "running_ps",
]
