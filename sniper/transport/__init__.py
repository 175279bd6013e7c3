"""How calls reach the roles: transports chosen by name, as schedulers are.

- ``grpc`` (:class:`GrpcTransport`): grpclib over HTTP/2 on asyncio, across processes and
  hosts; :class:`PsService` and :class:`HubService` are its thin adapters over the roles,
  mountable in any grpclib server, with :class:`HealthService` for ``grpc.health.v1``.
  ``sniper serve`` runs them (``sniper.cluster.serve_ps`` and ``serve_hub``).
- ``inprocess`` (:class:`InProcessTransport`): each call a task of the called role, in one
  process, on asyncio or trio.
- Others: a :class:`Transport` subclass registered in the ``sniper.transports`` entry-point
  group; :func:`open_transport` opens any of them by name.

This is the only package that speaks asyncio directly (grpclib runs on it); the roles above it
are anyio.
"""

from sniper.transport._abc import Transport as Transport
from sniper.transport._errors import STATUS_OF as STATUS_OF
from sniper.transport._errors import grpc_error as grpc_error
from sniper.transport._grpc import AsyncioOnlyError as AsyncioOnlyError
from sniper.transport._grpc import GrpcSettings as GrpcSettings
from sniper.transport._grpc import GrpcTransport as GrpcTransport
from sniper.transport._grpc import HubService as HubService
from sniper.transport._grpc import PsService as PsService
from sniper.transport._grpc import bound_address as bound_address
from sniper.transport._grpc import split_address as split_address
from sniper.transport._health import HealthService as HealthService
from sniper.transport._inprocess import InProcessHubClient as InProcessHubClient
from sniper.transport._inprocess import InProcessPsClient as InProcessPsClient
from sniper.transport._inprocess import InProcessTransport as InProcessTransport
from sniper.transport._registry import TRANSPORT_NAMES as TRANSPORT_NAMES
from sniper.transport._registry import open_transport as open_transport
from sniper.transport._registry import transport_names as transport_names

__all__ = [
    "STATUS_OF",
    "TRANSPORT_NAMES",
    "AsyncioOnlyError",
    "GrpcSettings",
    "GrpcTransport",
    "HealthService",
    "HubService",
    "InProcessHubClient",
    "InProcessPsClient",
    "InProcessTransport",
    "PsService",
    "Transport",
    "bound_address",
    "grpc_error",
    "open_transport",
    "split_address",
    "transport_names",
]
