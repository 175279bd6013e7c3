"""``launcher = "local"``: each ps and hub a ``sniper serve`` process on this machine, over gRPC.

Each role is isolated in a process of its own: a crash of one is seen (its process exits), and
supervision restarts every process from the latest checkpoint (``max_restarts``). Servers named
by ``--ps``/``--hub`` (or ``--cluster-spec``) run elsewhere and are used as they are: this
launcher then starts only what is not named (the hubs, when only ``--ps`` is given), and a
named server's death is the job's error, not a restart.

With ``num_trainers`` = N > 1, this process is trainer rank 0 and N - 1 more ranks are
``sniper train --rank R`` processes (``sniper.cluster._rank``) that join it at a rendezvous it
holds; they are roles like the servers: one that dies is a restart of every process, and one
that fails on its job's own error (its ``sniper: error:`` line, status 1) ends the job. Ranks
named by a cluster spec (``[[trainer]]``) run elsewhere, as named servers do: this process
holds their rendezvous where the spec says and starts none.

Each server gets its config as a TOML file written from the job's (``sniper serve --config``),
listens on a free loopback port it reports on its first line, and ends with this process: its
standard input is a pipe this process holds, and on exit it is sent SIGTERM, then killed
(``sniper.cluster._process``).
"""

from __future__ import annotations

import dataclasses
import subprocess
import tempfile
from collections.abc import Awaitable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

import anyio
import tomli_w
from grpclib.const import Status

from sniper.cluster._abc import Attempt, Launch, Launcher
from sniper.cluster._config import TrainConfig
from sniper.cluster._process import (
    ServerProcess,
    rank_process,
    serve_config_command,
    server_process,
    sniper_command,
)
from sniper.cluster._rank import named_rank_master, rank_config
from sniper.cluster._serve import parse_addresses
from sniper.cluster._servers import hub_configs, server_config, train_over_grpc
from sniper.cluster._supervise import EXIT_GRACE
from sniper.roles import RankMaster, TrainingError, TrainReport
from sniper.rpc import Placement, peer_error

__all__ = ["LocalLauncher"]


class LocalLauncher(Launcher):
    """Processes on this machine, or servers named by address (see the module doc)."""

    @contextmanager
    def start(self, launch: Launch) -> Iterator[Attempt]:
        config, resume = launch.config, launch.resume
        with ExitStack() as stack:
            configs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sniper-train-")))
            started: dict[str, subprocess.Popen[str]] = {}
            served: dict[str, str] = {}  # each started server's HOST:PORT, its role
            metrics = config.metrics_port >= 0
            if launch.ps:
                ps_addresses = parse_addresses(launch.ps, "--ps")
            else:
                command = serve_config_command(server_config(config, "ps"), configs / "ps.toml")
                servers = [
                    stack.enter_context(server_process(command, metrics=metrics, role=f"ps {i}"))
                    for i in range(config.num_ps)
                ]
                started |= {f"ps {i}": server.process for i, server in enumerate(servers)}
                served |= {f"127.0.0.1:{s.port}": f"ps {i}" for i, s in enumerate(servers)}
                ps_addresses = [("127.0.0.1", s.port) for s in servers]
                print(
                    f"started {len(servers)} ps on 127.0.0.1 ports "
                    f"{', '.join(str(s.port) for s in servers)}",
                    flush=True,
                )
                _print_metrics("ps", servers)

            def start_hubs(placement: Placement) -> list[tuple[str, int]]:
                hub_servers = []
                for index, hub in enumerate(hub_configs(config, ps_addresses, resume, placement)):
                    command = serve_config_command(hub, configs / f"hub-{index}.toml")
                    role = f"hub {index}"
                    hub_servers.append(
                        stack.enter_context(server_process(command, metrics=metrics, role=role))
                    )
                    started[role] = hub_servers[-1].process
                    served[f"127.0.0.1:{hub_servers[-1].port}"] = role
                print(
                    f"started {len(hub_servers)} hub(s) on 127.0.0.1 ports "
                    f"{', '.join(str(s.port) for s in hub_servers)}",
                    flush=True,
                )
                _print_metrics("hub", hub_servers)
                # Stopped before these hubs: a rank that lost its hub first would print that
                # as its error while the job restarts or ends.
                stack.callback(ranks.close)
                return [("127.0.0.1", s.port) for s in hub_servers]

            ranks = stack.enter_context(ExitStack())
            rank_roles: list[str] = []
            master = None
            if launch.trainers and config.num_trainers > 1:
                master = named_rank_master(config, launch.trainers[0])
            elif config.num_trainers > 1:
                master = RankMaster("127.0.0.1", config.num_trainers, config.collective_timeout)
                for rank in range(1, config.num_trainers):
                    command = rank_command(config, rank, master, configs)
                    rank_roles.append(f"trainer {rank}")
                    started[rank_roles[-1]] = ranks.enter_context(rank_process(command))
                print(
                    f"started trainer ranks 1-{config.num_trainers - 1} of "
                    f"{config.num_trainers} (rank 0 is this process, rendezvous {master.address})",
                    flush=True,
                )
            hub_addresses = parse_addresses(launch.hubs, "--hub") if launch.hubs else None
            training = partial(
                train_over_grpc,
                config,
                launch.plan,
                ps_addresses,
                hub_addresses,
                start_hubs,
                resume,
                launch.preemption,
                master,
            )
            yield Attempt(
                lambda: _naming_failed_ranks(training(), started, rank_roles),
                lambda: _exited(started, rank_roles),
                lambda address: _kill(started, served.get(address)),
            )


def rank_command(config: TrainConfig, rank: int, master: RankMaster, directory: Path) -> list[str]:
    """``sniper train --rank R --master HOST:PORT --config FILE``, the job's config as a rank
    takes it (:func:`~sniper.cluster._rank.rank_config`) written to ``directory``."""
    path = directory / f"trainer-{rank}.toml"
    path.write_text(tomli_w.dumps(dataclasses.asdict(rank_config(config))))
    return sniper_command(
        "train",
        *("--rank", str(rank), "--master", master.address, "--exit-on-stdin-eof"),
        *("--config", str(path)),
    )


RANK_FAILED = 1
"""The status of a trainer rank whose job failed (one ``sniper: error:`` line), as ``sniper
train`` exits when its job fails: bad data, the user's model, a call that failed."""


def _exited(started: dict[str, subprocess.Popen[str]], ranks: Collection[str]) -> str | None:
    """The first of ``started`` that has exited and is worth a restart (``ranks``: the names
    of those that are trainer ranks).

    A server is, whatever its status. A trainer rank is when it was killed or crashed, not
    when it failed as rank 0 fails on its job's own error (status :data:`RANK_FAILED`): a
    row its hub cannot read or its model's error comes back at the same step on every
    restart, and a rank that failed because a server died is seen with that server. Restarted,
    a job whose second rank read a bad row ran three more attempts to the same row and ended
    saying that rank had died.
    """
    for role, process in started.items():
        status = process.poll()
        if status is not None and not (role in ranks and status == RANK_FAILED):
            return role
    return None


def _kill(started: dict[str, subprocess.Popen[str]], role: str | None) -> str | None:
    """SIGKILL ``role`` of ``started`` if it still runs (a server that stopped answering:
    see :attr:`~sniper.cluster._abc.Attempt.stop_stuck`); its name, or None."""
    process = started.get(role) if role is not None else None
    if process is None or process.poll() is not None:
        return None
    process.kill()
    return role


async def _naming_failed_ranks(
    training: Awaitable[TrainReport],
    started: dict[str, subprocess.Popen[str]],
    ranks: Collection[str],
) -> TrainReport:
    """``training``'s report; a failure of it, when a rank had failed on its own error (see
    :func:`_exited`), says so first: rank 0 then only heard that the rank left its collective
    ("a rank died"), and the rank's own line, printed above, is the cause."""
    try:
        return await training
    except TrainingError as exc:
        # A rank closes its collective before it exits: wait a moment for its status.
        with anyio.move_on_after(EXIT_GRACE if ranks else 0):
            while all(started[role].poll() is None for role in ranks):
                await anyio.sleep(0.01)
        failed = [role for role in ranks if started[role].poll() == RANK_FAILED]
        # A server gone, or one that stopped answering, is the cause, and the supervisor's
        # restart names it.
        gone = any(p.poll() is not None for role, p in started.items() if role not in ranks)
        call = peer_error(exc)
        if not failed or gone or (call is not None and call.status is Status.DEADLINE_EXCEEDED):
            raise
        named = TrainingError(f"{', '.join(failed)} failed on the error printed above; then {exc}")
        named.steps = exc.steps
        raise named from exc


def _print_metrics(role: str, servers: list[ServerProcess]) -> None:
    for index, server in enumerate(servers):
        if server.metrics_url:
            print(f"metrics of {role} {index} on {server.metrics_url}", flush=True)
