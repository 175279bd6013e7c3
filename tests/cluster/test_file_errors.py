"""Every file sniper reads names itself when it cannot be read: a job checkpoint's ``latest``
and ``trainer.npz``, a ps checkpoint's files, a config, a cluster spec, a token, a report.
Real files, damaged the ways a disk or a hand can damage them; each one's message checked."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sniper._config import load_config
from sniper.cluster import TrainConfig, load_cluster_spec, read_report
from sniper.cluster._checkpoint import JOB, LATEST, TRAINER, _checksum, _write_step, load_job
from sniper.cluster._supervise import _latest
from sniper.roles import CorruptCheckpointError
from sniper.roles._checkpoint import MANIFEST, load_checkpoint, variable_file
from sniper.rpc import load_token

NOT_UTF8 = b"step-\xff\xfe\n"


def write_step(root: Path, step: int) -> Path:
    """A job checkpoint of ``step`` without ps parts, written as ``save_job`` writes one."""
    directory = root / f"step-{step:08d}"
    job: dict[str, Any] = {
        "format": 2,
        "step": step,
        "num_ps": 0,
        "num_hubs": 1,
        "positions": {"0": [0, step - 1]},
        "counters": {"steps": step},
        "sha256": {},
        "config": {},
    }
    _write_step(root, directory, job, {"model/w": np.full(3, step, np.float32)}, keep=5)
    return directory


def test_a_latest_that_is_not_utf8_is_named_and_the_newest_step_is_taken(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_step(tmp_path, 1)
    write_step(tmp_path, 2)
    (tmp_path / LATEST).write_bytes(NOT_UTF8)
    with caplog.at_level(logging.WARNING, "sniper.train"):
        job = load_job(tmp_path)
    assert job.step == 2
    (record,) = caplog.records
    assert record.getMessage().startswith(
        f"ignored {tmp_path / LATEST}: unreadable ('utf-8' codec can't decode byte 0xff"
    )
    assert _latest(tmp_path) == NOT_UTF8.strip()  # supervision only compares it


def test_a_latest_that_names_no_step_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_step(tmp_path, 3)
    (tmp_path / LATEST).write_text("yesterday\n")
    with caplog.at_level(logging.WARNING, "sniper.train"):
        assert load_job(tmp_path).step == 3
    assert [r.getMessage() for r in caplog.records] == [
        f"ignored {tmp_path / LATEST}: it names no step-N ('yesterday'); trying every step"
    ]


def test_a_trainer_npz_that_passes_its_checksum_but_does_not_load_is_named(
    tmp_path: Path,
) -> None:
    directory = write_step(tmp_path, 1)
    (directory / TRAINER).write_bytes(b"PK\x03\x04 not a zip")
    job = json.loads((directory / JOB).read_text())
    job["sha256"][TRAINER] = hashlib.sha256((directory / TRAINER).read_bytes()).hexdigest()
    job["checksum"] = _checksum(job)
    (directory / JOB).write_text(json.dumps(job))
    message = f"job checkpoint {directory}: {TRAINER} is unreadable (BadZipFile: "
    with pytest.raises(CorruptCheckpointError, match=re.escape(message)):
        load_job(directory)


def test_a_job_json_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    directory = write_step(tmp_path, 1)
    (directory / JOB).write_bytes(b"\xff\xfe{}")
    message = f"job checkpoint {directory}: {JOB} is not JSON, truncated or damaged"
    with pytest.raises(CorruptCheckpointError, match=re.escape(message)):
        load_job(directory)


def test_a_ps_checkpoint_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    directory = tmp_path / "ck"
    directory.mkdir()
    entry = {"name": "v", "file": variable_file("v"), "sha256": "0" * 64, "config": {}}
    (directory / MANIFEST).write_text(json.dumps({"format": 2, "variables": [entry]}))
    with pytest.raises(CorruptCheckpointError, match=re.escape(f"checkpoint {directory}: ")):
        load_checkpoint(directory)  # its config is malformed: named with the checkpoint
    (directory / MANIFEST).write_bytes(b"\xff{}")
    with pytest.raises(
        CorruptCheckpointError, match=re.escape(f"checkpoint {directory}: {MANIFEST} is not JSON")
    ):
        load_checkpoint(directory)
    (directory / MANIFEST).unlink()
    (directory / MANIFEST).mkdir()  # a directory where the manifest should be
    with pytest.raises(FileNotFoundError, match=re.escape(f"{directory} has no {MANIFEST}")):
        load_checkpoint(directory)


def test_a_ps_checkpoint_file_that_is_a_directory_is_named(tmp_path: Path) -> None:
    from sniper.roles._checkpoint import _read_file

    (tmp_path / "var.npz").mkdir()
    with pytest.raises(IsADirectoryError, match=re.escape(str(tmp_path / "var.npz"))):
        _read_file(tmp_path / "var.npz")


def test_a_config_spec_token_or_report_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "binary"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match=re.escape(f"config {path}: 'utf-8' codec")):
        load_config(TrainConfig, path, {})
    with pytest.raises(ValueError, match=re.escape(f"cluster spec {path}: 'utf-8' codec")):
        load_cluster_spec(path)
    with pytest.raises(ValueError, match=re.escape(f"auth_token_file {str(path)!r} is not UTF-8")):
        load_token(str(path))
    with pytest.raises(ValueError, match=re.escape(f"{path} is not a sniper train report: ")):
        read_report(path)
