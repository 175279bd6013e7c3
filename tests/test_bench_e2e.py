"""``sniper bench e2e``: the job it writes carries the wire dtype where its roles talk gRPC,
``sniper train`` reads that job, and an unmeasured warm-up job runs before the measured ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sniper._bench import _e2e
from sniper._bench._e2e import WARM_UP_BATCHES, job_settings, write_job
from sniper._bench._limit import KernelLimit
from sniper._bench._report import PeerMissing
from sniper._bench._torch_peer import INSTALL_HINT
from sniper.cli import main
from sniper.cli._bench import WIRE_DTYPES
from sniper.cluster import load_train_config
from sniper.data import SyntheticCtr, load_workload
from sniper.roles import TrainReport
from sniper.rpc._tensor import FLOAT_DTYPES


def test_the_cli_offers_the_wire_dtypes_the_wire_has() -> None:
    assert WIRE_DTYPES == FLOAT_DTYPES


@pytest.mark.parametrize(
    ("peer", "launcher", "workload", "scale", "model", "expected"),
    [
        ("torchrec", "inprocess", "seed_ctr", 1.0, "mlp", 2.0),
        ("torchrec", "inprocess", "seed_ctr", 0.02, "mlp", 1.5),
        ("torchrec", "local", "seed_ctr", 1.0, "mlp", 1.5),
        ("torchrec", "local", "seed_ctr", 0.02, "mlp", None),
        ("torchrec", "inprocess", "seed_ctr", 0.02, "dlrm", 1.5),
        ("torchrec", "local", "seed_ctr", 0.02, "dlrm", None),
        ("torch", "inprocess", "seed_ctr", 1.0, "mlp", 2.5),
        ("torch", "inprocess", "seed_ctr", 0.02, "mlp", 1.5),
        ("torch", "inprocess", "criteo", 1.0, "mlp", 1.5),
        ("torch", "local", "seed_ctr", 1.0, "mlp", None),
    ],
)
def test_each_row_is_judged_by_its_issue_s_target(
    peer: str, launcher: str, workload: str, scale: float, model: str, expected: float | None
) -> None:
    """Issue 44's ratios against TorchRec, issue 15's against torch: what ``Done when`` reads
    off the bench's target column."""
    assert _e2e.target(peer, launcher, load_workload(workload), scale, model) == expected


@pytest.mark.parametrize(
    ("launcher", "wire_dtype", "expected"),
    [
        ("local", "bfloat16", "bfloat16"),
        ("ray", "float16", "float16"),
        ("local", "float32", None),  # the default: the key is left out
        ("inprocess", "bfloat16", None),  # no wire: sniper train would warn and ignore it
    ],
)
def test_the_wire_dtype_goes_to_jobs_that_talk_grpc(
    launcher: str, wire_dtype: str, expected: str | None
) -> None:
    assert job_settings(launcher, wire_dtype).get("wire_dtype") == expected


def test_sniper_train_reads_the_job_the_bench_writes(tmp_path: Path) -> None:
    workload = load_workload("seed_ctr")
    data = SyntheticCtr(workload, num_batches=2, scale=0.002, seed=0)
    config, _ = write_job(tmp_path, workload, data, 0, "local", job_settings("local", "float16"))
    loaded = load_train_config(config, {})
    assert loaded.wire_dtype == "float16" and loaded.launcher == "local"


def test_an_unknown_wire_dtype_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "e2e", "--wire-dtype", "int8"])
    assert exit_info.value.code == 2
    assert "--wire-dtype: invalid choice: 'int8'" in capsys.readouterr().err


def test_a_warm_up_job_runs_before_the_measured_ones(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The warm-up is the first job, on its own few batches of the same shape (the measured
    jobs are stood in for: their reports are what the table needs)."""
    jobs: list[tuple[int, float, str]] = []

    def job(workload: Any, data: SyntheticCtr, seed: int, launcher: str, *_: Any) -> Any:
        jobs.append((data.num_batches, data.scale, launcher))
        report = TrainReport(steps=1, examples_per_second=1.0, eval_auc=0.5)
        return _e2e._Run(report, wall_seconds=1.0)

    monkeypatch.setattr(_e2e, "_sniper", job)
    monkeypatch.setattr(_e2e, "_torch", lambda *_: (1.0, 1))
    _e2e.run(load_workload("seed_ctr"), scale=0.002, batches=20, seed=0, threads=1)
    assert jobs == [
        (WARM_UP_BATCHES, 0.002, "local"),  # the processes job calls every kernel the other does
        (20, 0.002, "inprocess"),
        (20, 0.002, "local"),
    ]
    assert "warm-up: 12 batches, unmeasured" in capsys.readouterr().out


def test_the_warm_up_job_trains(capsys: pytest.CaptureFixture[str]) -> None:
    """The real thing: ``sniper train`` on the warm-up's batches, in one process."""
    run = _e2e._warm_up(load_workload("seed_ctr"), 0.002, 0, "inprocess", "float32")
    assert run.report.steps > 0 and run.wall_seconds > run.report.seconds
    assert "warm-up" in capsys.readouterr().out


def test_without_torch_sniper_s_rows_stand_alone_and_it_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without torch the torch peer is left out with a note; it used to end in exit 2."""

    def job(*_: Any) -> Any:
        return _e2e._Run(TrainReport(steps=9, examples_per_second=1234.0), wall_seconds=1.0)

    def no_torch() -> Any:
        raise PeerMissing(f"torch is not installed, so the torch peer is skipped: {INSTALL_HINT}")

    monkeypatch.setattr(_e2e, "_sniper", job)
    monkeypatch.setattr(_e2e, "import_torch", no_torch)
    assert main(["bench", "e2e", "--scale", "0.002", "--batches", "20"]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = lines[lines.index("") + 1 :]
    assert [line.split()[:2] for line in table[2:4]] == [["sniper,", "1"], ["sniper,", "2"]]
    assert all(line.split()[-2:] == ["-", "-"] for line in table[2:4])
    assert table[4] == (
        f"note: torch is not installed, so the torch peer is skipped: {INSTALL_HINT}; sniper's "
        "rows have no ratio"
    )


def test_rounds_give_each_row_s_ratios_median_and_the_rounds_that_met(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--rounds 3``: a table per round, then each row's ratios across them; a target holds
    only if met in 3 of 3 (80% of the rounds, rounded up), whatever its median says."""
    rates = iter([1.0, 3.0, 9.0, 2.0, 9.0, 2.6, 9.0])  # the warm-up, then inprocess, local

    def job(*_: Any) -> Any:
        report = TrainReport(steps=1, seconds=1.0, examples_per_second=next(rates), eval_auc=0.5)
        return _e2e._Run(report, wall_seconds=1.0, limit=KernelLimit(0.8, 0.0, 0.0, 0.0, 1, 2))

    monkeypatch.setattr(_e2e, "_sniper", job)
    monkeypatch.setattr(_e2e, "_torch", lambda *_: (1.0, 1))
    assert main(["bench", "e2e", "--scale", "1.0", "--batches", "20", "--rounds", "3"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("round ")] == [
        "round 1 of 3",
        "round 2 of 3",
        "round 3 of 3",
    ]
    series = out[out.index("across the 3 rounds (a target holds if met in 3 of them):") :]
    rows = series.splitlines()[3:7]

    def row(label: str) -> str:
        (line,) = [line for line in rows if line.startswith(label)]
        return " ".join(line[len(label) :].split())

    assert row("sniper, 1 ps in one process: ratio") == (
        "3.00, 2.00, 2.60 2.60 >= 2.5 2 of 3: MISSES"
    )
    assert row("sniper, 2 ps processes on loopback gRPC: ratio") == ("9.00, 9.00, 9.00 9.00 - -")
    assert row("sniper, 1 ps in one process: efficiency") == (
        "0.80, 0.80, 0.80 0.80 >= 0.7 3 of 3: meets"
    )
