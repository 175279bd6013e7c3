"""The hub, ps and trainer roles.

- :class:`PsEngine`: a ps's tables and batches, dispatched to a scheduler; embeddable as is.
- :class:`PsService`: the ``sniper.v1.Ps`` gRPC service over an engine, mountable in any
  grpclib server; :class:`HealthService` answers ``grpc.health.v1``.
- :func:`serve_ps`: what ``sniper serve --role ps`` runs.
"""

from sniper.roles._engine import LookupResult as LookupResult
from sniper.roles._engine import PendingLookup as PendingLookup
from sniper.roles._engine import PsEngine as PsEngine
from sniper.roles._engine import UnknownBatchError as UnknownBatchError
from sniper.roles._engine import UnknownVariableError as UnknownVariableError
from sniper.roles._health import HealthService as HealthService
from sniper.roles._ps_service import PsService as PsService
from sniper.roles._ps_service import PsServiceConfig as PsServiceConfig
from sniper.roles._serve import ServeConfig as ServeConfig
from sniper.roles._serve import bound_address as bound_address
from sniper.roles._serve import serve_ps as serve_ps

__all__ = [
    "HealthService",
    "LookupResult",
    "PendingLookup",
    "PsEngine",
    "PsService",
    "PsServiceConfig",
    "ServeConfig",
    "UnknownBatchError",
    "UnknownVariableError",
    "bound_address",
    "serve_ps",
]
