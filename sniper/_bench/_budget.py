"""A role's time budget per batch, from its profile and its CPU time, as tables.

The figures ``sniper bench profile`` prints and writes (``budget.md``, ``budget.json``):

* wall ms/batch: the profiled window over the batches the trainer read (trained and held
  out), the same for every role;
* CPU ms/batch: the process's user + system time over the window, every thread, per batch;
* CPU/wall: below 100% the role waited (for a request, a reply, a core), above 100% its
  threads ran at once;
* the CPU split by category (``sniper._bench._stacks.cpu_by_category``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sniper._bench._stacks import Stack, cpu_by_category
from sniper.roles import TrainReport

__all__ = ["SMALL_SHARE", "RoleBudget", "Table", "budget_of", "budget_tables", "ops_table"]

SMALL_SHARE = 0.01
"""Categories under 1% of a role's CPU are summed into one row."""

Table = tuple[list[str], list[list[str]]]
"""Headers and rows."""


@dataclass(frozen=True)
class RoleBudget:
    """One role's time over the profiled window, per batch."""

    role: str
    wall_ms: float
    """The window's wall time per batch (the same for every role)."""
    cpu_ms: float
    """The process's CPU time per batch, all threads."""
    category_ms: dict[str, float]
    """:attr:`cpu_ms` split by category."""
    samples: int
    """py-spy's samples of runnable threads."""

    def categories(self) -> list[tuple[str, float, float]]:
        """(category, CPU ms per batch, share of the CPU), largest first; those under
        :data:`SMALL_SHARE` summed in one row."""
        total = sum(self.category_ms.values()) or 1.0
        rows, rest, small = [], 0.0, 0
        for category, ms in sorted(self.category_ms.items(), key=lambda item: -item[1]):
            if ms / total < SMALL_SHARE:
                rest, small = rest + ms, small + 1
            else:
                rows.append((category, ms, ms / total))
        if small:
            rows.append((f"categories under {SMALL_SHARE:.0%} ({small})", rest, rest / total))
        return rows


def budget_of(
    role: str,
    stacks: Sequence[Stack],
    thread_cpu: Mapping[int, float],
    cpu_seconds: float,
    wall_seconds: float,
    batches: int,
) -> RoleBudget:
    """The budget of a role whose process ran ``cpu_seconds`` (its threads ``thread_cpu``) in
    a window of ``wall_seconds`` that read ``batches`` batches, sampled as ``stacks``."""
    split = cpu_by_category(stacks, thread_cpu, cpu_seconds)
    return RoleBudget(
        role,
        wall_seconds * 1e3 / batches,
        cpu_seconds * 1e3 / batches,
        {category: seconds * 1e3 / batches for category, seconds in split.items()},
        sum(stack.samples for stack in stacks),
    )


def budget_tables(budgets: Sequence[RoleBudget]) -> list[Table]:
    """One row per role (wall, CPU, CPU/wall, samples), then each role's categories."""
    summary = [[b.role, *_figures(b)] for b in budgets]
    split = [
        [b.role if i == 0 else "", category, f"{ms:.1f}", f"{share:.0%}"]
        for b in budgets
        for i, (category, ms, share) in enumerate(b.categories())
    ]
    return [
        (["role", "wall ms/batch", "CPU ms/batch", "CPU/wall", "py-spy samples"], summary),
        (["role", "category", "CPU ms/batch", "share of its CPU"], split),
    ]


def _figures(b: RoleBudget) -> list[str]:
    return [f"{b.wall_ms:.1f}", f"{b.cpu_ms:.1f}", f"{b.cpu_ms / b.wall_ms:.0%}", f"{b.samples:,}"]


def ops_table(report: TrainReport) -> Table:
    """The trainer's own per-op latencies (``sniper train``'s report): what it waited on,
    which py-spy cannot see (an awaiting coroutine has no stack)."""
    return ["trainer op", "count", "p50 ms", "p99 ms"], [
        [op, str(s.count), f"{s.p50_us / 1e3:.1f}", f"{s.p99_us / 1e3:.1f}"]
        for op, s in report.ops.items()
    ]
