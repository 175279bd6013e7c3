"""``sniper train --launcher ray``: each ps and hub as a Ray actor, the trainer in the driver.

Why Ray and not a launcher of our own: a parameter server exists because the tables outgrow
one machine, and Ray already places processes on a cluster by resources, restarts them and
cleans up after them. Each role runs in its own Ray worker process as an *async actor*: its
gRPC server lives on the actor's asyncio loop, the same server ``sniper serve`` runs
(:meth:`~sniper.transport.GrpcTransport.serve`), on the node's address and a free port. The
actors are placed by one placement group (``SPREAD`` by default, so the ps land on different
nodes where the cluster has them) with the resources ``[resources.ps]`` and
``[resources.hub]`` ask for (``num_cpus``, ``memory`` in bytes, any custom resource such as a
node label). Their addresses come back from the actors; nothing assumes loopback.

Several trainer ranks (``num_trainers`` = N): rank 0 is the driver, as the one trainer is, and
holds the ranks' rendezvous on its node's address; ranks 1 to N - 1 are one actor each
(:class:`RankActor`), placed apart by ``[resources.trainer]`` (``num_gpus`` too: Ray gives the
actor its GPUs, and a ``[model] device`` of ``cuda`` or ``auto`` uses them). Each rank trains
as ``sniper train --rank R`` does (``sniper.cluster._rank``), its collective on the interface
of its Ray node's address; an actor that dies is a restart of every actor, like a server's.

Failure: when training fails because an actor died, supervision (``sniper.cluster._supervise``,
``max_restarts``) removes every actor, places them again and resumes the job from its latest
checkpoint, as it does for local processes. Every actor and the placement group are removed
on every exit path, and a Ray runtime this command started is shut down with them.
"""

from __future__ import annotations

import asyncio  # Ray's async actors run on asyncio: the hub's producer is a task of that loop
import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Mapping
from contextlib import AsyncExitStack
from typing import Any

import anyio

from sniper.cluster._abc import Attempt, Launch, Launcher
from sniper.cluster._config import TrainConfig
from sniper.cluster._rank import rank_config, train_rank
from sniper.cluster._serve import ServeConfig, hub_cluster
from sniper.cluster._servers import hub_configs, server_config, train_over_grpc
from sniper.roles import HubRole, PsRole, RankMaster, TrainReport, interface_of
from sniper.rpc import Placement, Security
from sniper.scheduler import open_scheduler
from sniper.transport import GrpcTransport, split_address

__all__ = ["RankActor", "RayLauncher", "RayPlacement", "RoleActor", "import_ray"]

log = logging.getLogger("sniper.ray")
DEFAULT_CPUS = {"ps": 0.5, "hub": 0.25, "trainer": 0.5}
"""Ray's logical CPUs a ps, hub or trainer rank asks for unless ``[resources.ROLE] num_cpus``
says: small enough that a job of 2 ps and a hub (or 2 ranks on 2 hubs) fits a 2-core
machine's local Ray."""


def import_ray() -> Any:
    """The ``ray`` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ValueError(
            "launcher = 'ray' needs Ray, an optional extra: pip install 'sniper[ray]'"
        ) from None
    return ray


class RoleActor:
    """One ps or hub serving gRPC from a Ray worker process (see the module doc)."""

    def __init__(self) -> None:
        self._stack = AsyncExitStack()
        self._role: PsRole | HubRole | None = None

    async def start(self, values: dict[str, Any]) -> str:
        """Serve the role of ``values`` (a ``ServeConfig`` as a dict); its ``host:port``."""
        import ray

        config = ServeConfig(**values)
        host = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        transport = GrpcTransport(config, security=Security.of(config))
        if config.role == "ps":
            scheduler = await self._stack.enter_async_context(
                open_scheduler(config.scheduler, workers=config.worker_threads())
            )
            self._role = await config.ps_role(scheduler)
        else:
            self._role = await self._hub(config)
        address = await self._stack.enter_async_context(
            transport.serve(self._role, f"{host}:{config.port}")
        )
        return address

    async def _hub(self, config: ServeConfig) -> HubRole:
        cluster = hub_cluster(config)
        self._stack.callback(cluster.close)
        hub = HubRole(config.open(), cluster, config, config)
        self._stack.callback(hub.close)
        # Ray runs each actor call as its own asyncio task, so the producer is a task of the
        # actor's loop that stop() cancels, not a task group entered in one call, left in another.
        task = asyncio.get_running_loop().create_task(hub.run())
        self._stack.push_async_callback(_cancelled, task)
        return hub

    async def node(self) -> str:
        """The Ray node this actor runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    async def stop(self) -> None:
        await self._stack.aclose()


class RankActor:
    """Trainer rank R > 0 in a Ray worker process (see the module doc). A threaded actor:
    :meth:`train` holds one thread for the whole job while :meth:`node` answers the
    launcher's checks that the actor lives."""

    def train(self, values: dict[str, Any], rank: int, master: str) -> int:
        """Train as rank ``rank`` of the job of ``values`` (a ``TrainConfig`` as a dict),
        joining rank 0 at ``master``; the steps it trained."""
        import ray

        interface = interface_of(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
        return train_rank(TrainConfig(**values), rank, master, interface).steps

    def node(self) -> str:
        """The Ray node this actor runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def stop(self) -> None:
        """Nothing to stop: a rank ends with its job (or the actor is killed)."""


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


class RayPlacement:
    """The actors of one attempt of a job, placed together; :meth:`close` removes them."""

    def __init__(self, ray: Any, resources: Mapping[str, Mapping[str, float]], strategy: str):
        self.ray = ray
        self.resources = resources
        self.strategy = strategy
        self.actors: list[Any] = []
        self.nodes: dict[str, str] = {}
        """Node id of each started actor, by ``"ps 0"``, ``"hub 0"``, ``"trainer 1"``..."""
        self._groups: list[Any] = []
        self._ranks: list[Any] = []

    def _request(self, role: str) -> tuple[dict[str, float], dict[str, float]]:
        """(the bundle, the actor's options) of one server of ``role``."""
        asked = dict(self.resources.get(role, {}))
        cpus = float(asked.pop("num_cpus", DEFAULT_CPUS[role]))
        gpus = float(asked.pop("num_gpus", 0.0))
        memory = asked.pop("memory", None)
        bundle = {"CPU": cpus, **({"GPU": gpus} if gpus else {}), **asked}
        if memory:
            bundle["memory"] = float(memory)
        options: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus, "resources": asked}
        if memory:
            options["memory"] = float(memory)
        return bundle, options

    def _place(self, role: str, count: int, actor_class: Any, timeout: float) -> list[Any]:
        """``count`` actors of ``actor_class`` for ``role``, placed together as
        ``[resources.ROLE]`` and the strategy say."""
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle, options = self._request(role)
        self._check_cluster(role, count, bundle)
        group = placement_group([bundle] * count, strategy=self.strategy)
        self._groups.append(group)
        try:
            self.ray.get(group.ready(), timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:
            raise ValueError(
                f"Ray could not place {count} {role} with {bundle} ({self.strategy}) "
                f"within {timeout:.0f} s: the cluster lacks those resources"
            ) from None
        actors = [
            actor_class.options(
                **options,
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, index),
            ).remote()
            for index in range(count)
        ]
        self.actors += actors
        return actors

    def _check_cluster(self, role: str, count: int, bundle: Mapping[str, float]) -> None:
        """Refuse at once, naming the numbers, ``count`` servers of ``role`` that need more of
        a resource than the whole cluster has (``num_ps = 100000``), rather than wait for a
        placement that can never be made: a config error, as the local launcher's bounds
        are (exit 2)."""
        total = self.ray.cluster_resources()
        for resource, amount in bundle.items():
            need, have = amount * count, float(total.get(resource, 0.0))
            if need > have:
                raise ValueError(
                    f"{count} {role} with {bundle} need {need:g} {resource} in all; the Ray "
                    f"cluster has {have:g}: ask for fewer, or less each ([resources.{role}])"
                )

    def _record_nodes(self, names: list[str], actors: list[Any], addresses: list[str]) -> None:
        for name, address, node in zip(
            names, addresses, self.ray.get([a.node.remote() for a in actors]), strict=True
        ):
            self.nodes[name] = node
            log.info("%s runs on %s (Ray node %s)", name, address, node)

    def start(self, role: str, configs: list[ServeConfig], timeout: float = 120.0) -> list[str]:
        """Place and start one actor per config of ``role``; their addresses, in order."""
        actor_class = self.ray.remote(max_restarts=0, max_concurrency=1000)(RoleActor)
        actors = self._place(role, len(configs), actor_class, timeout)
        addresses = self.ray.get(
            [a.start.remote(dataclasses.asdict(c)) for a, c in zip(actors, configs, strict=True)]
        )
        self._record_nodes([f"{role} {i}" for i in range(len(actors))], actors, addresses)
        return list(addresses)

    def start_ranks(self, config: TrainConfig, master: str, timeout: float = 120.0) -> None:
        """Place trainer ranks 1 to ``num_trainers`` - 1, one actor each, and start them
        training (they join rank 0 at ``master``); :meth:`wait_ranks` waits for their end."""
        count = config.num_trainers - 1
        actor_class = self.ray.remote(max_restarts=0, max_concurrency=2)(RankActor)
        actors = self._place("trainer", count, actor_class, timeout)
        values = dataclasses.asdict(rank_config(config))
        self._ranks = [
            actor.train.remote(values, rank, master) for rank, actor in enumerate(actors, 1)
        ]
        names = [f"trainer {rank}" for rank in range(1, count + 1)]
        self._record_nodes(names, actors, [f"rank {rank}" for rank in range(1, count + 1)])

    def wait_ranks(self, timeout: float) -> None:
        """Wait for the ranks' actors to end their training (rank 0 has: so have they, but
        for leaving the process group); one that failed meanwhile is logged."""
        try:
            self.ray.get(self._ranks, timeout=timeout)
        except Exception as exc:  # the job is done; what a rank says of its end is a note
            log.warning("a trainer rank's actor ended with an error: %s", str(exc)[:300])

    def any_died(self) -> str | None:
        """The first actor of this placement that is gone (its worker process died), named
        as in :attr:`nodes` (``"ps 0"``); None while every one answers."""
        for name, actor in zip(self.nodes, self.actors, strict=False):
            try:
                self.ray.get(actor.node.remote(), timeout=10)
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError):
                return name
        return None

    def close(self) -> None:
        """Stop every actor's server, then remove the actors and the placement groups."""
        stops = [actor.stop.remote() for actor in self.actors]
        with contextlib.suppress(Exception):
            self.ray.get(stops, timeout=45)
        for actor in self.actors:
            self.ray.kill(actor)
        from ray.util.placement_group import remove_placement_group

        for group in self._groups:
            remove_placement_group(group)
        self.actors.clear()
        self._groups.clear()


@contextlib.contextmanager
def ray_runtime(address: str) -> Iterator[Any]:
    """Ray, connected to ``address`` ("": a new local runtime); shut down on exit if this
    command started or connected it."""
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


class RayLauncher(Launcher):
    """Every ps and hub a Ray actor, the trainer in this process (see the module doc)."""

    @contextlib.contextmanager
    def start(self, launch: Launch) -> Iterator[Attempt]:
        if launch.ps or launch.hubs:
            raise ValueError(
                "launcher ray starts its own ps and hubs: drop --ps, --hub and --cluster-spec "
                "(or use launcher local)"
            )
        config, resume = launch.config, launch.resume
        with ray_runtime(config.ray_address) as ray:
            placement = RayPlacement(ray, config.resources, config.ray_strategy)
            try:
                ps = [
                    split_address(a)
                    for a in placement.start("ps", [server_config(config, "ps")] * config.num_ps)
                ]
                print(f"started {len(ps)} ps on Ray: {_placed(placement, 'ps', ps)}", flush=True)

                def start_hubs(at_start: Placement) -> list[tuple[str, int]]:
                    configs = hub_configs(config, ps, resume, at_start)
                    hubs = [split_address(a) for a in placement.start("hub", configs)]
                    print(
                        f"started {len(hubs)} hub(s) on Ray: {_placed(placement, 'hub', hubs)}",
                        flush=True,
                    )
                    return hubs

                master = _start_ranks(ray, placement, config)

                async def job() -> TrainReport:
                    report = await train_over_grpc(
                        config, launch.plan, ps, None, start_hubs, resume, launch.preemption, master
                    )
                    if master is not None:
                        await anyio.to_thread.run_sync(
                            placement.wait_ranks, config.collective_timeout
                        )
                    return report

                yield Attempt(job, placement.any_died)
            finally:
                placement.close()


def _start_ranks(ray: Any, placement: RayPlacement, config: TrainConfig) -> RankMaster | None:
    """Ranks 1 to N - 1 as actors, joining this process (rank 0) at a rendezvous on its Ray
    node's address; None for a job of one trainer."""
    if config.num_trainers == 1:
        return None
    host = ray.util.get_node_ip_address()
    master = RankMaster(
        host, config.num_trainers, config.collective_timeout, interface=interface_of(host)
    )
    placement.start_ranks(config, master.address)
    nodes = ", ".join(
        f"{rank} (node {placement.nodes[f'trainer {rank}'][:12]})"
        for rank in range(1, config.num_trainers)
    )
    print(
        f"started trainer ranks on Ray: {nodes}; rank 0 is this process, rendezvous "
        f"{master.address}",
        flush=True,
    )
    return master


def _placed(placement: RayPlacement, role: str, addresses: list[tuple[str, int]]) -> str:
    return ", ".join(
        f"{host}:{port} (node {placement.nodes[f'{role} {i}'][:12]})"
        for i, (host, port) in enumerate(addresses)
    )
