"""One map from a role's exceptions to gRPC statuses, shared by every transport.

The status says whose fault a failure is. A request naming what does not exist is NOT_FOUND;
a value the caller got wrong is INVALID_ARGUMENT with the field; a full table is
RESOURCE_EXHAUSTED; a role that cannot answer now is UNAVAILABLE (retry). A checkpoint
directory that cannot be read or written is FAILED_PRECONDITION: the path is the caller's; so
is a FeedSample of a batch id already pushed (a batch is never reopened).
Anything else is sniper's own bug: INTERNAL, with the traceback logged under an id that the
message gives, so an operator can find it (grpclib keeps ``GRPCError`` and ``ProtocolError``
apart for the same reason).
"""

from __future__ import annotations

import logging
import uuid

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from sniper.roles import (
    AlreadyPushedError,
    CheckpointPathError,
    CorruptCheckpointError,
    MemoryBudgetError,
    ReopenedBatchError,
    Unavailable,
    UnknownBatchError,
    UnknownVariableError,
    VariableExistsError,
)
from sniper.store import CapacityError

__all__ = ["STATUS_OF", "grpc_error"]

STATUS_OF: tuple[tuple[type[BaseException], Status], ...] = (
    (UnknownVariableError, Status.NOT_FOUND),
    (AlreadyPushedError, Status.ALREADY_EXISTS),
    (UnknownBatchError, Status.NOT_FOUND),
    (FileNotFoundError, Status.NOT_FOUND),
    (VariableExistsError, Status.ALREADY_EXISTS),
    (ReopenedBatchError, Status.FAILED_PRECONDITION),
    (Unavailable, Status.UNAVAILABLE),
    (CheckpointPathError, Status.PERMISSION_DENIED),
    (CorruptCheckpointError, Status.DATA_LOSS),
    (OSError, Status.FAILED_PRECONDITION),
    (CapacityError, Status.RESOURCE_EXHAUSTED),
    (MemoryBudgetError, Status.RESOURCE_EXHAUSTED),
    (MemoryError, Status.RESOURCE_EXHAUSTED),
    (ValueError, Status.INVALID_ARGUMENT),
)
"""First match wins: subclasses before their bases."""


def grpc_error(exc: Exception, call: str, log: logging.Logger) -> GRPCError:
    """The ``GRPCError`` a client sees for ``exc`` raised while answering ``call``."""
    if isinstance(exc, GRPCError):
        return exc
    for kind, status in STATUS_OF:
        if isinstance(exc, kind):
            return GRPCError(status, str(exc))
    error_id = uuid.uuid4().hex[:12]
    log.error("%s failed with an internal error (id %s)", call, error_id, exc_info=exc)
    return GRPCError(
        Status.INTERNAL,
        f"internal error {error_id} in {call} ({type(exc).__name__}); this is a bug in "
        "sniper: the server's log has the traceback under this id",
    )
