"""TLS and a bearer token on every sniper connection: who may talk to a ps or a hub.

A ps answers Save, Restore, Push and Pull to whoever reaches its port, and the default bind to
127.0.0.1 was the only guard. :class:`Security` holds one process's settings and applies them
to both ends: a server gets an ``ssl.SSLContext`` (requiring client certificates when a CA is
given: mutual TLS) and checks ``authorization: Bearer <token>`` on every call; a channel gets
the matching client context and sends the token. The health service stays open, so probes
need no secret. A wrong or missing token is UNAUTHENTICATED, and the call never reaches the
role.

A token without TLS crosses the network in clear: whoever reads the traffic can reuse it. That
is fine on loopback and a mistake anywhere else, so a server bound to, or a channel opened to,
any other address logs a warning that says so (once per address).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

from grpclib._typing import IEventsTarget  # the protocol listen() takes
from grpclib.const import Status
from grpclib.events import RecvRequest, SendRequest, listen
from grpclib.exceptions import GRPCError

from sniper._config import RunSettings

__all__ = ["Security", "is_loopback", "load_token"]

_OPEN = "/grpc.health.v1.Health/"
"""Methods answered without a token: health checks."""

log = logging.getLogger("sniper.rpc")
_warned: set[str] = set()


def load_token(path: str) -> str:
    """The token in file ``path`` (surrounding whitespace dropped); errors name the file."""
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise ValueError(f"auth_token_file {path!r} cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"auth_token_file {path!r} is not UTF-8 text") from None
    if not token:
        raise ValueError(f"auth_token_file {path!r} is empty; put the token in it")
    if any(c.isspace() for c in token) or not token.isprintable():
        raise ValueError(f"auth_token_file {path!r} must hold one token without spaces")
    return token


@dataclass(frozen=True)
class Security:
    """One process's TLS files and token ("" each: off). See the module doc."""

    cert: str = ""
    """This process's certificate (PEM): served, and shown to servers that ask for one."""
    key: str = ""
    """The certificate's private key (PEM)."""
    ca: str = ""
    """Certificates of the authority that signs the peers' (PEM): a client verifies servers
    against it, and a server then requires client certificates signed by it."""
    token: str = ""
    """The bearer token every call carries and every server checks."""

    @classmethod
    def of(cls, settings: RunSettings) -> Security:
        """The TLS and token settings of a config, the token read from its file (errors name
        the key)."""
        token = load_token(settings.auth_token_file) if settings.auth_token_file else ""
        return cls(settings.tls_cert, settings.tls_key, settings.tls_ca, token)

    def __post_init__(self) -> None:
        if bool(self.cert) != bool(self.key):
            raise ValueError("tls_cert and tls_key go together: give both or neither")

    @property
    def tls(self) -> bool:
        return bool(self.cert or self.ca)

    def server_context(self) -> ssl.SSLContext | None:
        """The server's TLS context; None without a certificate."""
        if not self.cert:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._load_chain(context)
        if self.ca:
            context.load_verify_locations(self.ca)
            context.verify_mode = ssl.CERT_REQUIRED
        context.set_alpn_protocols(["h2"])
        return context

    def client_context(self) -> ssl.SSLContext | None:
        """The client's TLS context (servers verified against ``ca``); None without TLS."""
        if not self.tls:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca or None)
        if self.cert:
            self._load_chain(context)
        context.set_alpn_protocols(["h2"])
        return context

    def check_cleartext(self, host: str | None, side: str) -> None:
        """Warn (once per host) when the token would cross a network without TLS: ``host``
        is where a server binds or a channel connects (None or "": every interface)."""
        if not self.token or self.tls or is_loopback(host) or (host or "") in _warned:
            return
        _warned.add(host or "")
        where = f"address {host}" if host else "every interface"
        does = "takes bearer tokens" if side == "server" else "sends its bearer token"
        log.warning(
            "the %s on %s %s without TLS: anyone who can read the traffic can reuse the "
            "token. Give every role tls_cert, tls_key and tls_ca, or keep the job on 127.0.0.1",
            side,
            where,
            does,
        )

    def _load_chain(self, context: ssl.SSLContext) -> None:
        try:
            context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"tls_cert {self.cert!r} and tls_key {self.key!r} cannot be loaded: {exc}"
            ) from None

    def guard(self, server: IEventsTarget) -> None:
        """Make ``server`` (a grpclib server) refuse calls without the token."""
        if not self.token:
            return
        expected = f"Bearer {self.token}".encode()

        async def check(event: RecvRequest) -> None:
            if event.method_name.startswith(_OPEN):
                return
            given = event.metadata.get("authorization")
            if given is None:
                raise GRPCError(
                    Status.UNAUTHENTICATED,
                    "this server needs a bearer token: send 'authorization: Bearer <token>' "
                    "(sniper: auth_token_file)",
                )
            if not hmac.compare_digest(str(given).encode(), expected):
                raise GRPCError(Status.UNAUTHENTICATED, "the bearer token is wrong")

        listen(server, RecvRequest, check)

    def authorize(self, channel: IEventsTarget) -> None:
        """Make ``channel`` (a grpclib channel) send the token with every call."""
        if not self.token:
            return
        value = f"Bearer {self.token}"

        async def send(event: SendRequest) -> None:
            event.metadata["authorization"] = value

        listen(channel, SendRequest, send)


def is_loopback(host: str | None) -> bool:
    """``host`` names this machine only: ``localhost`` or a loopback address (a host name is
    not resolved: any other name counts as the network)."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
