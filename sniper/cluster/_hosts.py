"""The cluster spec: which host and port each ps, hub and trainer rank of a job has, for any
launcher.

``sniper train`` starts every role on this machine by itself; on several machines something
else starts them (Slurm's ``srun``, a Kubernetes StatefulSet, ``mpirun``, a shell loop), each
process knowing only its role and its index. One TOML file tells them all the same layout::

    [[ps]]
    host = "ps-0.sniper"   # where the others reach it
    port = 7000
    bind = "0.0.0.0"       # the interface it listens on (default: host)
    [[ps]]
    host = "ps-1.sniper"
    port = 7000
    [[hub]]
    host = "hub-0.sniper"
    port = 7100

``sniper serve --cluster-spec FILE --role ps --index I`` listens on ps I's ``bind:port``; a hub
also learns every ps address and its share of the data (``hub_index`` I of ``num_hubs``).
``sniper train --cluster-spec FILE`` trains against them from wherever it runs. Nothing
assumes loopback or a shared working directory: give ``checkpoint_dir`` (and every ps's
``checkpoint_root``) as a path that every host mounts at the same place.

Several trainer ranks (``num_trainers``) are ``[[trainer]]`` entries, rank 0 first::

    [[trainer]]
    host = "trainer-0.sniper"   # rank 0, the coordinator
    port = 7300                 # the ranks' rendezvous, on rank 0
    [[trainer]]
    host = "trainer-1.sniper"   # rank 1

``sniper train --cluster-spec FILE --rank R`` is rank R (``--rank 0``, or no ``--rank``, is
rank 0): ``num_trainers`` is the number of entries, every rank joins rank 0's rendezvous at
the first entry's ``host:port``, and each rank's collective binds to the interface holding
its own ``host`` (so a machine with several networks uses the one the spec names), or to the
network interface its entry names (``interface = "eth0"``: then the other ranks need no
``host``, as in a Kubernetes pod, whose own DNS name may not resolve yet when it starts).
Only rank 0's port is fixed: the collective's own connections take free ports. Something else starts
the ranks, so a rank that dies fails the job (one ``sniper: error:`` line on rank 0), which
that something restarts with ``resume``.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sniper._config import Validated, from_mapping
from sniper.roles import interface_of

__all__ = ["ClusterSpec", "Endpoint", "RankHost", "load_cluster_spec"]

E = TypeVar("E", bound=Validated)


@dataclass(frozen=True)
class Endpoint(Validated):
    """One server of the spec."""

    host: str = ""
    """The name or address the other roles reach it at (its advertised address)."""
    port: int = 0
    bind: str = ""
    """The interface it listens on ("": ``host``; ``0.0.0.0`` for every interface)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.host:
            raise ValueError("host must name the machine the others reach this server at")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port must be in [1, 65535], got {self.port}")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def listen_host(self) -> str:
        return self.bind or self.host


@dataclass(frozen=True)
class RankHost(Validated):
    """One trainer rank of the spec (a ``[[trainer]]`` entry)."""

    host: str = ""
    """This rank's machine as the other ranks reach it: its collective binds to the
    interface holding its address (unless ``interface`` says)."""
    port: int = 0
    """Rank 0's alone: the port of the ranks' rendezvous, on ``host``."""
    interface: str = ""
    """The network interface of this rank's collective (``eth0``; "": ``host``'s)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.host and not self.interface:
            raise ValueError(
                "give host (the machine the other ranks reach this rank at) or interface (the "
                "network interface its collective uses)"
            )
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [1, 65535] (rank 0's), got {self.port}")

    def collective_interface(self) -> str:
        """The network interface this rank's collective binds to, on its own machine
        (``ValueError`` where ``host`` is not one of its addresses)."""
        return self.interface or interface_of(self.host)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterSpec:
    """Every ps, hub and trainer rank of a job, in cluster order (see the module doc)."""

    ps: tuple[Endpoint, ...]
    hubs: tuple[Endpoint, ...]
    trainers: tuple[RankHost, ...] = ()
    """The trainer ranks, rank 0 first (none: one trainer, wherever ``sniper train`` runs)."""

    def __post_init__(self) -> None:
        if not self.ps or not self.hubs:
            raise ValueError("a cluster spec needs at least one [[ps]] and one [[hub]]")
        addresses = [e.address for e in (*self.ps, *self.hubs)]
        repeated = sorted({a for a in addresses if addresses.count(a) > 1})
        if repeated:
            raise ValueError(f"{repeated[0]} is given to two servers; each needs its own")
        if self.trainers and not (self.trainers[0].host and self.trainers[0].port):
            raise ValueError(
                "[[trainer]] 0 (rank 0) needs a host and a port: the other ranks join it there"
            )
        for rank, trainer in enumerate(self.trainers[1:], 1):
            if trainer.port:
                raise ValueError(
                    f"[[trainer]] {rank}: port is rank 0's alone (the ranks' rendezvous); "
                    "a rank's collective takes free ports"
                )

    @property
    def ps_addresses(self) -> str:
        """``host:port,...`` of every ps, in cluster order (what ``--ps`` takes)."""
        return ",".join(e.address for e in self.ps)

    @property
    def hub_addresses(self) -> str:
        return ",".join(e.address for e in self.hubs)

    def server(self, role: str, index: int) -> dict[str, Any]:
        """The ``sniper serve`` keys of the ``index``-th server of ``role``: where it listens,
        and for a hub the ps it feeds and its share of the data."""
        servers = self.ps if role == "ps" else self.hubs
        if not 0 <= index < len(servers):
            raise ValueError(
                f"--index {index} is not a {role} of the cluster spec: it lists "
                f"{len(servers)} ({role} 0 to {len(servers) - 1})"
            )
        own = servers[index]
        keys: dict[str, Any] = {"role": role, "host": own.listen_host, "port": own.port}
        if role == "hub":
            keys |= {"ps": self.ps_addresses, "hub_index": index, "num_hubs": len(self.hubs)}
        return keys

    def rank(self, rank: int) -> RankHost:
        """Trainer rank ``rank``'s entry (``--rank``), or ``ValueError`` naming the ranks."""
        count = len(self.trainers)
        if not count:
            raise ValueError(
                "--rank names a [[trainer]] of the cluster spec, and it lists none (one "
                "trainer: sniper train without --rank)"
            )
        if not 0 <= rank < count:
            raise ValueError(
                f"--rank {rank} is not a trainer of the cluster spec: it lists {count} "
                f"(rank 0 to {count - 1})"
            )
        return self.trainers[rank]


def load_cluster_spec(path: Path) -> ClusterSpec:
    """Read and check a cluster spec; errors name the file and the entry."""
    where = f"cluster spec {path}"
    try:
        values = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    unknown = sorted(set(values) - {"ps", "hub", "trainer"})
    if unknown:
        raise ValueError(
            f"{where}: unknown table {unknown[0]!r}; a spec has [[ps]], [[hub]] and [[trainer]]"
        )
    ps, hubs = _endpoints(values, "ps", where, Endpoint), _endpoints(values, "hub", where, Endpoint)
    trainers = _endpoints(values, "trainer", where, RankHost)
    try:
        return ClusterSpec(tuple(ps), tuple(hubs), tuple(trainers))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _endpoints(values: dict[str, Any], role: str, where: str, kind: type[E]) -> list[E]:
    entries = values.get(role, [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"{where}: {role} must be an array of tables ([[{role}]])")
    endpoints = []
    for index, entry in enumerate(entries):
        try:
            endpoints.append(from_mapping(kind, entry, f"{where} [[{role}]] {index}"))
        except ValueError as exc:
            message = str(exc)
            if not message.startswith(where):
                message = f"{where} [[{role}]] {index}: {message}"
            raise ValueError(message) from None
    return endpoints
