"""``sniper train`` on a user's own files: Criteo TSV, converted Parquet, 2 hubs, bad input.

Real processes on loopback, on Criteo-format files these tests write (with missing values and
a learnable signal, see ``tests.data._helpers.write_criteo``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sniper.data import convert
from tests.data._helpers import criteo_line, write_criteo

TRAIN_LINES, EVAL_LINES, BATCH = 3000, 1000, 100
AUC_MARGIN = 0.1
"""Held-out AUC must beat chance (0.5) by this much; the planted signal allows about 0.75."""


@pytest.fixture(scope="module")
def criteo_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("criteo")
    return (
        write_criteo(folder / "train.tsv", TRAIN_LINES, seed=1),
        write_criteo(folder / "eval.tsv", EVAL_LINES, seed=2),
    )


def train(tmp_path: Path, settings: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "train.toml"
    config.write_text(
        f'output = "{tmp_path / "report.json"}"\n'
        f"batch_size = {BATCH}\nhidden = [16]\nstats_interval = 60\n{settings}"
    )
    return subprocess.run(
        [sys.executable, "-m", "sniper", "train", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def trained(tmp_path: Path, settings: str) -> dict[str, Any]:
    done = train(tmp_path, settings)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads((tmp_path / "report.json").read_text())
    return report


def test_trains_criteo_tsv_with_an_eval_file(
    tmp_path: Path, criteo_files: tuple[Path, Path]
) -> None:
    train_tsv, eval_tsv = criteo_files
    report = trained(
        tmp_path,
        f'data = "criteo:{train_tsv}"\neval_data = "criteo:{eval_tsv}"\n'
        "epochs = 2\neval_every_steps = 25\n"
        "[variables.default]\ncapacity = 4096\n[variables.C1]\ndim = 8\n",
    )
    steps = 2 * TRAIN_LINES // BATCH
    held_out = steps // 10  # eval_every = 10: every 10th batch is scored, not trained
    assert report["steps"] == steps - held_out
    assert report["examples"] == (steps - held_out) * BATCH
    assert report["eval_data_examples"] == EVAL_LINES
    assert [h["step"] for h in report["eval_data_history"]] == [25, 50, 54]
    assert report["eval_data_auc"] > 0.5 + AUC_MARGIN
    assert report["eval_auc"] > 0.5 + AUC_MARGIN  # the in-stream held-out batches
    # Each scoring covers the whole file; logloss is not monotone across them (asynchronous
    # training on 3000 lines overfits at times), so only its range is checked.
    for scoring in report["eval_data_history"]:
        assert scoring["examples"] == EVAL_LINES and 0 < scoring["logloss"] < 1


def test_trains_converted_parquet_and_a_directory_with_two_hubs(
    tmp_path: Path, criteo_files: tuple[Path, Path]
) -> None:
    train_tsv, eval_tsv = criteo_files
    single = tmp_path / "train.parquet"
    convert("criteo", train_tsv, single, batch_size=BATCH)
    report = trained(tmp_path, f'data = "parquet:{single}"\neval_data = "criteo:{eval_tsv}"\n')
    assert report["eval_data_auc"] > 0.5 + AUC_MARGIN

    parts = tmp_path / "parts"
    parts.mkdir()
    for i, seed in enumerate((3, 4, 5)):
        tsv = write_criteo(tmp_path / f"part{i}.tsv", 1000 + 50 * i, seed=seed)
        convert("criteo", tsv, parts / f"part-{i}.parquet", batch_size=BATCH)
    report = trained(
        tmp_path,
        f'data = "parquet:{parts}"\nnum_hubs = 2\neval_every = 0\n'
        f'eval_data = "parquet:{tmp_path / "train.parquet"}"\n',
    )
    # Every example of the three files exactly once: 1000 + 1050 + 1100 examples.
    assert report["examples"] == 3150 and report["steps"] == 10 + 11 + 11
    assert report["eval_data_auc"] > 0.5 + AUC_MARGIN


def test_missing_columns_and_negative_integers_train(tmp_path: Path) -> None:
    lines = [
        criteo_line(str(i % 2), [str(-i), "", *[""] * 11], ["", f"{i % 7:x}", *[""] * 24])
        for i in range(400)
    ]
    path = tmp_path / "sparse.tsv"
    path.write_text("".join(lines))
    report = trained(tmp_path, f'data = "criteo:{path}"\n')
    assert report["steps"] + report["eval_batches"] == 4


def one_line_error(done: subprocess.CompletedProcess[str], status: int) -> str:
    assert done.returncode == status, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last: str = done.stderr.strip().splitlines()[-1]
    assert last.startswith("sniper: error: ")
    return last.removeprefix("sniper: error: ")


def test_a_malformed_line_stops_the_job_with_its_file_and_line(
    tmp_path: Path, criteo_files: tuple[Path, Path]
) -> None:
    lines = criteo_files[0].read_text().splitlines(keepends=True)[:1500]
    lines[1234] = "2" + lines[1234][1:]
    bad = tmp_path / "bad.tsv"
    bad.write_text("".join(lines))
    # Sizing the tables (capacity = 0) reads every line first: found before anything starts.
    done = train(tmp_path, f'data = "criteo:{bad}"\n')
    assert one_line_error(done, 2) == f"{bad}:1235: label must be 0 or 1, got '2'"
    assert "started" not in done.stdout
    # With every table's rows given, the hub that reads the line stops the job.
    sized = f'data = "criteo:{bad}"\n[variables.default]\ncapacity = 100_000\n'
    message = one_line_error(train(tmp_path, sized), 1)
    assert message.endswith(
        f"UNAVAILABLE: hub 0 stopped reading its data: CriteoFormatError: {bad}:1235: "
        "label must be 0 or 1, got '2'"
    ), message
    assert message.startswith("hub hub-0 failed on ReadSample")  # the in-process hub


def test_inputs_without_examples_are_refused_before_starting(tmp_path: Path) -> None:
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    header = tmp_path / "header.tsv"
    header.write_text("label\t" + "\t".join(f"I{j}" for j in range(1, 14)) + "\n")
    done = train(tmp_path, f'data = "criteo:{empty}"\n')
    assert one_line_error(done, 2) == f"data 'criteo:{empty}' holds no examples"
    assert "started" not in done.stdout
    done = train(tmp_path, f'data = "criteo:{header}"\n')
    assert one_line_error(done, 2) == (
        f"{header}:1: expected 40 tab-separated fields (label, I1..I13, C1..C26), got 14 "
        "(Criteo files have no header line: remove it)"
    )
