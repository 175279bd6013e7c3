"""Where variables land on ps, and how uneven the load is (``sniper placement``).

The seed logs found one ps at 59% CPU while the others idled at 10%: hashing variables to ps
balances their count, not their signs. :func:`print_placement` shows a workload's placement
before a cluster runs, balanced (what ``sniper train`` starts from) or hashed;
:func:`print_live_placement` shows a running job's ps as they are now, after
auto_shard's moves, and :func:`print_checkpoint_placement` the table a checkpoint recorded.
This module is the command's output; the policy it shows is ``sniper.placement``'s.
"""

from __future__ import annotations

import anyio

from sniper._table import print_table
from sniper.cluster._config import TrainConfig
from sniper.cluster._plan import plan_training
from sniper.data import Workload
from sniper.placement import Placement, hashed_owner, placement_load
from sniper.roles import RPC_ERRORS, describe_error, gather
from sniper.rpc import PsClient, PsStats


def workload_placement(
    workload: Workload, num_ps: int, policy: str, scale: float = 1.0
) -> tuple[Placement, dict[str, int]]:
    """Where a fresh ``sniper train`` job with ``placement = policy`` on the workload's
    synthetic data at ``scale`` puts its variables, and each variable's signs per batch: the
    job's own plan (:meth:`~sniper.cluster.TrainPlan.placement`), so the two cannot differ."""
    config = TrainConfig(scale=scale, batch_size=workload.batch_size, num_ps=num_ps)
    plan = plan_training(config, workload)
    placement = plan.placement(num_ps) if policy == "balanced" else Placement(num_ps)
    return placement, plan.data.signs_per_batch


_POLICIES = {
    "balanced": "balanced: by signs per batch, then rows",
    "hash": "hash: string_to_u64(name) % num_ps",
}


def print_placement(
    workload: Workload, num_ps: int, policy: str = "balanced", scale: float = 1.0
) -> None:
    """Print per-ps variables and signs, and the busiest ps's share against an even split,
    as a fresh job with ``placement = policy`` at ``scale`` would place them."""
    placement, per_variable = workload_placement(workload, num_ps, policy, scale)
    load = placement_load(per_variable, placement)
    total = sum(per_variable.values())
    print(
        f"workload {workload.name} at scale {scale:g}: {len(per_variable)} variables, "
        f"{total:,} signs per batch, {num_ps} ps (placement {_POLICIES[policy]})"
    )
    rows = []
    for ps, (variables, signs) in enumerate(load):
        owned = [name for name in per_variable if placement.owner(name) == ps]
        heaviest = max(owned, key=per_variable.__getitem__, default="-")
        rows.append(
            [str(ps), str(variables), f"{signs:,}", f"{100 * signs / total:.1f}%", heaviest]
        )
    print_table(["ps", "variables", "signs/batch", "share", "heaviest variable"], rows)
    busiest = max(signs for _, signs in load)
    print(f"busiest ps carries {busiest / (total / num_ps):.2f}x an even share")


async def _live_stats(addresses: list[tuple[str, int]]) -> list[PsStats]:
    clients = [PsClient(host, port, timeout=10.0, retries=1) for host, port in addresses]
    try:
        return await gather([client.stats for client in clients])
    except RPC_ERRORS as exc:
        where = ", ".join(f"{host}:{port}" for host, port in addresses)
        raise ConnectionError(
            f"could not read the Stats of ps {where}: {describe_error(exc)}"
        ) from None
    finally:
        for client in clients:
            client.close()


def print_live_placement(addresses: list[tuple[str, int]]) -> None:
    """Print where each variable of a running job is now (auto_shard may have moved some), with
    each ps's share of the store kernel time: asked of the ps themselves."""
    stats = anyio.run(_live_stats, addresses, backend="asyncio")
    num_ps = len(addresses)
    rows = []
    for index, answer in enumerate(stats):
        for v in answer.variables:
            home = hashed_owner(v.name, num_ps)
            moved = "" if home == index else f"hashed to ps {home}"
            rows.append([v.name, str(index), f"{v.kernel_seconds:.3f}", f"{v.rows:,}", moved])
    rows.sort(key=lambda row: row[0])
    print_table(["variable", "ps", "kernel s", "rows", "placement"], rows)
    total = sum(v.kernel_seconds for answer in stats for v in answer.variables) or 1.0
    summary = []
    for index, answer in enumerate(stats):
        kernel = sum(v.kernel_seconds for v in answer.variables)
        host, port = addresses[index]
        summary.append(
            [
                f"{index} ({host}:{port})",
                str(len(answer.variables)),
                f"{kernel:.3f}",
                f"{100 * kernel / total:.1f}%",
                f"{answer.cpu_seconds:.1f}",
            ]
        )
    print()
    print_table(["ps", "variables", "kernel s", "share", "cpu s"], summary)
    away = sum(1 for row in rows if row[4])
    print(f"{away} of {len(rows)} variables away from their hashed ps")


def print_checkpoint_placement(placement: Placement | None, step: int) -> None:
    """Print the placement a job checkpoint recorded."""
    if placement is None or not placement.owners:
        version = placement.version if placement is not None else 0
        print(f"checkpoint of step {step}: every variable on its hashed ps (version {version})")
        return
    print(
        f"checkpoint of step {step}: placement version {placement.version}, "
        f"{placement.num_ps} ps; variables away from their hashed ps:"
    )
    rows = [
        [name, str(hashed_owner(name, placement.num_ps)), str(ps)]
        for name, ps in sorted(placement.owners.items())
    ]
    print_table(["variable", "hashed ps", "ps"], rows)
