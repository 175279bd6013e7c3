"""What a role raises when a call cannot be answered, named for whose fault it is.

Transports map these to gRPC statuses in one place (``sniper.transport``): the caller's
mistakes (an unknown variable or batch, a bad value) are theirs to fix, ``Unavailable`` says
"retry elsewhere or later", and anything not listed is sniper's own bug.
"""

from __future__ import annotations

from grpclib.exceptions import GRPCError, StreamTerminatedError

__all__ = [
    "RPC_ERRORS",
    "AlreadyPushedError",
    "DataError",
    "DataMismatchError",
    "InFlightLimitError",
    "ReopenedBatchError",
    "TrainingError",
    "Unavailable",
    "UnknownBatchError",
    "UnknownVariableError",
    "VariableExistsError",
    "describe_error",
]


class _Message(KeyError):
    """A ``KeyError`` whose text is its message, not the repr of its key."""

    def __str__(self) -> str:
        return str(self.args[0])


class UnknownVariableError(_Message):
    """A request named a variable this ps does not hold (create it first, or ask its owner)."""


class UnknownBatchError(_Message):
    """A request named a batch id this ps was never fed, or has already freed."""


class AlreadyPushedError(UnknownBatchError):
    """A PushGrad named a batch whose gradients were already applied: it is applied once."""


class ReopenedBatchError(Exception):
    """A FeedSample named a batch whose gradients were already pushed: a batch id is never
    reopened (a second PushGrad would apply to it again). Feed a new id; a Restore of the
    variable forgets the pushes it rolls back, so a resumed job feeds its batches again."""


class InFlightLimitError(MemoryError):
    """A request would take the bytes a ps works on at once past its ``max_inflight_mb``
    (RESOURCE_EXHAUSTED: retry once the requests in flight are done)."""


class VariableExistsError(ValueError):
    """CreateVariable named a variable that exists with another configuration."""


class Unavailable(Exception):
    """The role cannot answer now (shutting down, or its input failed); retry elsewhere."""


class DataError(Exception):
    """A hub's reader failed: the data's fault (a malformed line), not the cluster's."""


RPC_ERRORS = (GRPCError, StreamTerminatedError, OSError, TimeoutError, Unavailable)
"""What a call to a hub or ps raises when the server fails or goes away (a role called
directly, without a transport, raises :class:`Unavailable`)."""


def describe_error(exc: BaseException) -> str:
    """One line for a failed call: ``STATUS: message`` for a gRPC error, else the type."""
    if isinstance(exc, GRPCError):
        return f"{exc.status.name}: {exc.message}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class TrainingError(RuntimeError):
    """Training cannot go on: a hub or ps failed. The message names it."""

    steps: int = 0
    """Training steps done when it failed (set by the trainer's ``run``)."""


class DataMismatchError(TrainingError):
    """A hub serves other data than the trainer was configured for; the message names both."""
