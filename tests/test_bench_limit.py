"""The kernel-bound limit of ``sniper bench e2e``: measured on the job's own config and batches,
every part positive, and the printed efficiency is the printed limit over the printed time per
batch. No timing is asserted: only that the figures exist and agree with each other."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sniper._bench._e2e import EFFICIENCY_TARGET, job_settings, write_job
from sniper._bench._limit import KernelLimit, measure_limit
from sniper.cli import main
from sniper.cluster import load_train_config
from sniper.data import SyntheticCtr, load_workload

COLUMNS = [
    *("examples/s", "batches", "ms/batch", "limit", "ms", "efficiency"),
    *("cores", "busy", "host", "steal", "ratio", "target"),
]


def test_efficiency_is_the_limit_over_the_actual_time() -> None:
    limit = KernelLimit(0.3, 0.2, 0.4, 0.1, trained=10, threads=2)
    assert limit.store_seconds == pytest.approx(0.9)
    assert limit.seconds_per_batch == pytest.approx(0.1)
    assert limit.efficiency(0.2) == pytest.approx(0.5)
    assert limit.describe() == (
        "100.00 ms per trained batch = store 90.00 (feed 30.00, lookup 20.00, push 40.00) "
        "on 2 threads + dense model 10.00"
    )


@pytest.mark.parametrize("launcher", ["inprocess", "local"])
def test_the_limit_runs_the_job_s_batches_on_its_ps_threads(tmp_path: Path, launcher: str) -> None:
    """Every part is measured, over the batches the trainer trains (every 10th is held out),
    on the threads of the job's ps together."""
    workload = load_workload("seed_ctr")
    data = SyntheticCtr(workload, num_batches=12, scale=0.002, seed=0)
    config, _ = write_job(tmp_path, workload, data, 0, launcher, job_settings(launcher))
    limit = measure_limit(config, workload, data)
    assert limit.trained == 11
    assert limit.threads >= 1
    parts = [limit.feed_seconds, limit.lookup_seconds, limit.push_seconds, limit.dense_seconds]
    assert all(seconds > 0 for seconds in parts)
    assert limit.seconds_per_batch == pytest.approx(sum(parts) / 11)


@pytest.mark.parametrize(("launcher", "num_ps"), [("inprocess", 1), ("local", 2)])
def test_the_limit_runs_on_the_worker_threads_the_bench_gives_each_ps(
    tmp_path: Path, launcher: str, num_ps: int
) -> None:
    """``sniper bench e2e --workers N`` (a scaling run): the job's config says N, and the
    limit runs on N threads for each of the job's ps, as the job's ps run them."""
    workload = load_workload("seed_ctr")
    data = SyntheticCtr(workload, num_batches=3, scale=0.002, seed=0)
    settings = job_settings(launcher, workers=3)
    config, _ = write_job(tmp_path, workload, data, 0, launcher, settings)
    assert load_train_config(config, {}).workers == 3
    assert measure_limit(config, workload, data).threads == 3 * num_ps


@pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")  # the torch peer's
def test_the_e2e_table_prints_each_row_s_limit_and_efficiency(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The real bench on a tiny run: sniper's row has a positive time per batch and limit,
    and its efficiency is their ratio as printed (up to the printed rounding)."""
    args = ["bench", "e2e", "--scale", "0.002", "--batches", "10", "--launcher", "inprocess"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if "examples/s" in line)
    assert lines[header].split() == COLUMNS
    row = lines[header + 2]
    assert row.startswith("sniper, 1 ps in one process")
    cells = row[len("sniper, 1 ps in one process") :].split()
    actual, limit, efficiency = float(cells[2]), float(cells[3]), float(cells[4])
    assert actual > 0 and limit > 0
    assert efficiency == pytest.approx(limit / actual, abs=0.006)
    assert cells[5:7] == ["(>=", f"{EFFICIENCY_TARGET['inprocess']}:"]
    assert cells[7].rstrip(")") in ("meets", "MISSES")
    busy, of, cores = cells[8:11]  # the cores the real job kept busy, out of the machine's
    assert 0 < float(busy) <= int(cores) and (of, int(cores)) == ("of", os.cpu_count())
    assert 0 <= float(cells[11].rstrip("%")) <= 100  # the host's share of the CPU meanwhile
    breakdown = [line for line in lines if line.startswith("  1 ps in one process: ")]
    assert len(breakdown) == 1 and f"{limit:.2f} ms per trained batch = store" in breakdown[0]
