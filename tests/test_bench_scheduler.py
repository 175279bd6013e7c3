"""`sniper bench scheduler`: every backend runs the whole feed+lookup+push step, and the
verdicts read each speedup against the parallel capacity (no timings are asserted)."""

from __future__ import annotations

import numpy as np

from sniper._bench._scheduler import BackendResult, measure, rows
from sniper.data._workload import VariableSpec, Workload
from sniper.scheduler import SCHEDULER_NAMES

TINY = Workload(
    name="tiny",
    batch_size=8,
    embedding_dim=4,
    dense_features=1,
    positive_rate=0.5,
    zipf_exponent=1.1,
    variables=(
        VariableSpec("big", 0, 70_000, 100_000),
        VariableSpec("small", 1, 40, 100),
    ),
)


def test_every_backend_the_global_lock_and_the_threads_reference_run_in_rounds() -> None:
    calls: list[int] = []

    def capacity(workers: int) -> float:
        calls.append(workers)
        return 2.0

    results, capacities = measure(
        TINY, workers=2, steps=5, batches=2, seed=0, rounds=2, capacity=capacity
    )
    expected = [
        ("inline", "shard"),
        *[(name, "shard") for name in SCHEDULER_NAMES if name != "inline"],
        ("work_stealing", "global"),
        ("2 inline threads", "shard"),
    ]
    assert [(r.backend, r.lock) for r in results] == expected
    assert [len(r.latencies) for r in results] == [5] * (len(expected) - 1) + [2 * 5]
    assert calls == [2, 2]
    assert capacities == [2.0, 2.0]


def _result(backend: str, p50_ms: float, lock: str = "shard") -> BackendResult:
    return BackendResult(backend, lock, np.array([p50_ms / 1e3]), 0.5, 0.01)


def test_work_stealing_is_judged_against_the_capacity_the_others_against_inline() -> None:
    lines = rows(
        [
            _result("inline", 30.0),
            _result("per_variable", 40.0),
            _result("thread_pool", 20.0),
            _result("work_stealing", 20.0),
            _result("work_stealing", 30.0, lock="global"),
            _result("2 inline threads", 18.0),
        ],
        capacity=1.6,
        workers=2,
    )
    assert [(line.target, line.verdict) for line in lines] == [
        ("baseline", ""),
        (">= 0.9x", "MISSES"),
        (">= 0.9x", "meets"),
        (">= 90% of capacity", "meets"),
        ("-", ""),
        ("-", ""),
    ]
    assert lines[3].speedup == 1.5
    assert round(lines[3].capacity_share, 4) == round(1.5 / 1.6, 4)
    pair = [_result("inline", 30.0), _result("work_stealing", 20.0)]
    assert rows(pair, capacity=2.0, workers=2)[1].verdict == "MISSES"
    assert rows(pair, capacity=1.2, workers=2)[1].verdict == "machine busy"
