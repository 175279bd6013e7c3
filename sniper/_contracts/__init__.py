"""Contract checks that sniper's own tests run, shipped for code that extends sniper.

A scheduler plugin, an embedding store, or a port of the placement hashes and feature signs
to another language is checked with the same functions that check sniper's own implementations:

- the ``Scheduler`` contract (exactly once, per-key order, cancellation, shutdown, errors,
  backpressure, merging, statistics): coroutine functions that take a factory of the backend
  under test, for asyncio and trio tests (:mod:`._scheduler`);
- an embedding store against a naive :class:`ReferenceTable`, on hypothesis-generated
  batches (:mod:`._store`);
- a command in any language that speaks the hash line protocol, against
  :mod:`sniper.hashing`; ``sniper conformance hash -- CMD ARGS...`` runs the same check
  (:mod:`._hash`).

Nothing in ``sniper`` imports this package, and hypothesis (a development dependency) is
imported only while a check that uses it runs.
"""

from ._common import ContractViolation as ContractViolation
from ._hash import HashCommandError as HashCommandError
from ._hash import HashMismatch as HashMismatch
from ._hash import HashReport as HashReport
from ._hash import check_hash_command as check_hash_command
from ._scheduler import Blockers as Blockers
from ._scheduler import OpenBackend as OpenBackend
from ._scheduler import check_backpressure as check_backpressure
from ._scheduler import check_cancellation as check_cancellation
from ._scheduler import check_errors as check_errors
from ._scheduler import check_exactly_once as check_exactly_once
from ._scheduler import check_merge as check_merge
from ._scheduler import check_per_key_order as check_per_key_order
from ._scheduler import check_scheduler as check_scheduler
from ._scheduler import check_shutdown as check_shutdown
from ._scheduler import check_statistics as check_statistics
from ._store import OpenStore as OpenStore
from ._store import ReferenceTable as ReferenceTable
from ._store import check_export_import_round_trip as check_export_import_round_trip
from ._store import check_store_matches_reference as check_store_matches_reference
from ._store import ragged_batches as ragged_batches

__all__ = [
    "Blockers",
    "ContractViolation",
    "HashCommandError",
    "HashMismatch",
    "HashReport",
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
    "ragged_batches",
]
