"""Where a workload's variables land on ps, and how uneven the load is.

The seed logs found one ps at 59% CPU while the others idled at 10%: hashing variables to ps
balances their count, not their signs. This report makes that visible before a cluster runs.
"""

from __future__ import annotations

from sniper._table import print_table
from sniper.data._workload import Workload
from sniper.hashing import ps_for_variable


def placement_load(workload: Workload, num_ps: int) -> list[tuple[int, int]]:
    """Per ps: (variables owned, signs per batch owned)."""
    load = [(0, 0)] * num_ps
    for spec in workload.variables:
        ps = ps_for_variable(spec.name, num_ps)
        variables, signs = load[ps]
        load[ps] = (variables + 1, signs + spec.signs_per_batch)
    return load


def print_placement(workload: Workload, num_ps: int) -> None:
    """Print per-ps variables and signs, and the busiest ps's share against an even split."""
    load = placement_load(workload, num_ps)
    total = workload.signs_per_batch
    print(
        f"workload {workload.name}: {len(workload.variables)} variables, "
        f"{total:,} signs per batch, {num_ps} ps (placement: string_to_u64(name) % num_ps)"
    )
    rows = []
    for ps, (variables, signs) in enumerate(load):
        owned = [v.name for v in workload.variables if ps_for_variable(v.name, num_ps) == ps]
        heaviest = max(owned, key=lambda n: workload.variable(n).signs_per_batch, default="-")
        rows.append(
            [str(ps), str(variables), f"{signs:,}", f"{100 * signs / total:.1f}%", heaviest]
        )
    print_table(["ps", "variables", "signs/batch", "share", "heaviest variable"], rows)
    busiest = max(signs for _, signs in load)
    print(f"busiest ps carries {busiest / (total / num_ps):.2f}x an even share")
