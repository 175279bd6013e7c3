"""``Transport``: how calls reach a role, chosen by name as schedulers are."""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, ClassVar

from sniper.rpc import HubApi, PsApi

if TYPE_CHECKING:
    from sniper.roles import HubRole, PsRole

__all__ = ["Transport"]


class Transport(ABC):
    """Serves roles at addresses and connects clients to them.

    A transport carries the calls of :class:`~sniper.rpc.PsApi` and :class:`~sniper.rpc.HubApi`
    and nothing else: it decodes, calls the role, and encodes, and it raises the same
    ``GRPCError`` for the same failure as every other transport, so a job behaves the same
    over any of them. Built-ins: ``grpc`` (across processes and hosts, asyncio) and
    ``inprocess`` (one process, any anyio backend). Others register in the
    ``sniper.transports`` entry-point group and open with :func:`open_transport`.
    """

    name: ClassVar[str]

    @abstractmethod
    def serve(self, role: PsRole | HubRole, address: str) -> AbstractAsyncContextManager[str]:
        """Answer calls to ``role`` at ``address`` until the context exits; the context gives
        the address clients connect to (a port 0 becomes the port chosen)."""

    @abstractmethod
    def ps_client(self, address: str) -> PsApi:
        """A client of the ps served at ``address``."""

    @abstractmethod
    def hub_client(self, address: str) -> HubApi:
        """A client of the hub served at ``address``."""
