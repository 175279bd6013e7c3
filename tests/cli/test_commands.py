"""The ``sniper`` command as a user runs it: a real subprocess, its output and exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


def sniper(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sniper", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_hash_prints_the_wrapped_hash_and_ps() -> None:
    done = sniper("hash", "embedding_11", "--num-ps", "4")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "embedding_11\t2658275717906911240\tps 0\n"


@pytest.mark.parametrize(
    "args",
    [("hash", "embedding_11", "--num-ps", "4"), ("data", "inspect", "DIR"), ("--help",)],
    ids=["hash", "inspect", "help"],
)
def test_a_closed_stdout_ends_a_command_quietly(tmp_path: Path, args: tuple[str, ...]) -> None:
    """``sniper data inspect X | head``: once the reader of standard output is gone, a command
    ends with no word on stderr and the status a unix tool that SIGPIPE ends leaves (141), as
    ``seq 100000 | head`` leaves ``seq``; it printed ``sniper: error: [Errno 32] Broken
    pipe``. A pipe whose reader is closed before the command starts makes it certain."""
    pq.write_table(pa.table({"click": [0, 1], "user_id": [1, 2]}), tmp_path / "part-0.parquet")
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sniper", *(str(tmp_path) if a == "DIR" else a for a in args)],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0 if args == ("--help",) else 141, "")


def test_inspect_reads_a_directory_as_train_does(tmp_path: Path) -> None:
    pq.write_table(pa.table({"click": [0, 1], "user_id": [1, 2]}), tmp_path / "part-0.parquet")
    pq.write_table(pa.table({"click": [1], "user_id": [3]}), tmp_path / "part-1.parquet")
    for data in (str(tmp_path), f"parquet:{tmp_path}/*.parquet"):
        done = sniper("data", "inspect", data)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(
            f"files: 2, first {tmp_path}/part-0.parquet\nformat: parquet, 3 rows in 2 row groups\n"
        )


def test_placement_reports_every_ps() -> None:
    done = sniper("placement", "--num-ps", "3")
    assert done.returncode == 0, done.stderr
    assert "76 variables, 719,168 signs per batch, 3 ps" in done.stdout
    assert "busiest ps carries" in done.stdout


def test_placement_shows_the_balanced_start_and_what_hashing_would_give() -> None:
    balanced = sniper("placement", "--num-ps", "2")
    hashed = sniper("placement", "--num-ps", "2", "--policy", "hash")
    assert "(placement balanced: by signs per batch, then rows)" in balanced.stdout
    assert "busiest ps carries 1.00x an even share" in balanced.stdout
    assert "(placement hash: string_to_u64(name) % num_ps)" in hashed.stdout
    assert "busiest ps carries 1.48x an even share" in hashed.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("placement", "--workload", "/nonexistent.json"),
            "sniper: error: workload '/nonexistent.json' is neither a built-in (seed_ctr, "
            "criteo, criteo_two_labels) nor a readable JSON file\n",
        ),
        (
            ("bench", "ps", "--scheduler", "fifo"),
            "sniper: error: unknown scheduler 'fifo'; valid names: adaptive, inline, per_variable, "
            "thread_pool, work_stealing\n",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    done = sniper(*args)
    assert (done.returncode, done.stderr, done.stdout) == (2, message, "")


def test_bad_flag_value_exits_2() -> None:
    done = sniper("placement", "--num-ps", "0")
    assert done.returncode == 2
    assert "argument --num-ps: expected a positive integer, got 0" in done.stderr


def test_demo_runs_real_ps_processes_and_stops_them() -> None:
    done = sniper("bench", "ps", "--steps", "2", "--scheduler", "per_variable")
    assert done.returncode == 0, done.stderr
    assert "started 2 ps on 127.0.0.1 ports" in done.stdout
    assert "EmbeddingLookup  2" in done.stdout
    assert "stopped 2 ps: SIGTERM, drained, exit status 0" in done.stdout


def test_demo_in_process() -> None:
    done = sniper("bench", "ps", "--steps", "2", "--transport", "inprocess", "--workers", "2")
    assert done.returncode == 0, done.stderr
    assert "on this process (no gRPC)" in done.stdout
    assert "scheduler adaptive:" in done.stdout


HEAVY = ("numba", "grpclib")


@pytest.mark.parametrize(
    "args",
    [("--help",), ("hash", "--help"), ("bench", "e2e", "--help"), ("data", "convert", "--help")],
)
def test_help_imports_neither_numba_nor_grpclib(args: tuple[str, ...]) -> None:
    """``sniper --help`` stays fast: the commands whose flags come from a heavy config class
    (train, serve) add those flags only when they themselves are parsed."""
    code = (
        "import sys\n"
        "from sniper.cli import main\n"
        "try:\n"
        f"    main({list(args)!r})\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        f"print('heavy:', [m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "heavy: []\n"
    assert done.stdout.startswith("usage: sniper")
