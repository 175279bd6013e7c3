"""The report file has one form: what ``sniper train`` writes, every reader reads back as the
same typed report (the benches, the experiment runner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sniper._metrics import LatencySummary
from sniper.cluster import TrainConfig, read_report
from sniper.cluster._report import print_report, write_report
from sniper.roles import EvalResult, TrainReport


def test_a_written_report_reads_back_as_itself(tmp_path: Path) -> None:
    report = TrainReport(
        steps=12,
        examples=3072,
        eval_auc=0.71,
        ops={"PushGrad": LatencySummary(12, 900.0, 1500.0, 1700.0, 2000.0)},
        ps_ops=[{"EmbeddingLookup.kernel": LatencySummary(40, 80.0, 120.0, 150.0, 170.0)}],
        eval_data_history=[EvalResult(step=12, auc=0.7, logloss=0.5, examples=512, seconds=0.1)],
        moves=[{"step": 5, "variable": "a", "from": 0, "to": 1, "cost": 0.1, "seconds": 0.2}],
        cores_busy=1.5,
        machine_cores=2,
    )
    config = TrainConfig(output=str(tmp_path / "report.json"))
    write_report(report, 0.75, config)
    read = read_report(tmp_path / "report.json")
    assert read.report == report and read.oracle_auc == 0.75
    assert read.config["output"] == config.output


def test_a_file_that_is_no_report_is_named(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"steps": 3}))
    with pytest.raises(ValueError, match=r"report.json is not a sniper train report: 'config'"):
        read_report(path)


@pytest.mark.parametrize("busy", [1.5, None])
def test_the_printed_report_says_how_busy_the_trainer_s_machine_was_where_it_is_known(
    busy: float | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Out of the trainer's machine's cores, from the report: not the printing machine's."""
    cores = None if busy is None else 48
    report = TrainReport(steps=3, examples=30, seconds=1.0, cores_busy=busy, machine_cores=cores)
    print_report(report, None)
    lines = capsys.readouterr().out.splitlines()
    line = "the trainer's machine's cores busy while it trained: 1.50 of 48"
    assert (line in lines) == (busy is not None)
    assert not any("cores busy" in text for text in lines if text != line)


def test_a_resumed_runs_rate_is_its_own_beside_the_jobs_counts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The counts are the whole job's, the time this run's: printed as one line they read as a
    rate they do not divide to (36,864 examples in 18.9 s at 1,412 examples/s)."""
    report = TrainReport(steps=288, examples=36864, seconds=18.9, examples_per_second=1412.0)
    report.resumed_from_step = 80
    print_report(report, None)
    assert (
        "trained 288 batches (36,864 examples) in all; from step 80 on, 18.9 s: 1,412 examples/s"
        in capsys.readouterr().out.splitlines()
    )
