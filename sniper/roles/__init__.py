"""The hub, ps and trainer roles.

So far: :class:`PsEngine`, the ps's tables, batches and scheduler dispatch, which the gRPC
service wraps and which can be embedded in a custom server directly.
"""

from sniper.roles._engine import LookupResult as LookupResult
from sniper.roles._engine import PsEngine as PsEngine
from sniper.roles._engine import UnknownBatchError as UnknownBatchError
from sniper.roles._engine import UnknownVariableError as UnknownVariableError

__all__ = ["LookupResult", "PsEngine", "UnknownBatchError", "UnknownVariableError"]
