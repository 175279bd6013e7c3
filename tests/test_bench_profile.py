"""`sniper bench profile`: py-spy's collapsed stacks into a per-role time budget (on a
hand-written sample), and one real profiled job (the /proc readings it divides are
``tests/test_proc.py``'s)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from sniper._bench import _stacks
from sniper._bench._budget import RoleBudget
from sniper._bench._flamegraph import write_flamegraph
from sniper._bench._profile import ProfilerMissing, Sampling, find_py_spy
from sniper._bench._stacks import Frame, Stack, category_of, cpu_by_category, parse_collapsed
from sniper._table import markdown_table, print_table
from sniper.cli import main

ROOT = 'process 7:"python -m sniper serve";thread (11): MainThread;main (sniper/cli/_main.py:70)'
LOOP = "BaseEventLoop._run_once (asyncio/base_events.py:1922);Handle._run (asyncio/events.py:80)"
WORKER = "thread (12): sniper-work_stealing-0;Worker.run (sniper/scheduler/_work_stealing/_w.py:9)"
SAMPLE = f"""\
{ROOT};{LOOP};PsRole.push_grad (sniper/roles/_ps.py:260);SniperCodec.decode (sniper/rpc/_codec.py:41);frombuffer (numpy/core/numeric.py:5) 6
{ROOT};{LOOP};Stream.send_data (grpclib/protocol.py:300) 3
{ROOT};{LOOP};_PollLikeSelector.select (selectors.py:468) 5
{WORKER};_lookup_parts (sniper/roles/_engine.py:448);EmbeddingTable.lookup_shard (sniper/store/_table.py:297) 3
{WORKER};_lookup_parts (sniper/roles/_engine.py:448);EmbeddingTable.lookup_shard (sniper/store/_table.py:294);EmbeddingTable._map (sniper/store/_table.py:250) 1
{WORKER};Parker.park (sniper/scheduler/_work_stealing/_park.py:30);Condition.wait (threading.py:327) 4
thread (13): Thread-2;Thread.run (threading.py:982);Condition.wait (threading.py:327) 2
thread (14);PyEval_EvalFrame (libpython3.11.so);Trainer._auc (sniper/data/_metrics.py:9);pool_rows (kernels.so) 2
thread (15) 1
"""  # noqa: E501


def _stacks_of(text: str) -> list[Stack]:
    return list(parse_collapsed(text.splitlines()))


def test_a_line_is_its_thread_its_python_frames_and_its_count() -> None:
    stacks = _stacks_of(SAMPLE)
    assert [s.thread for s in stacks] == [11, 11, 11, 12, 12, 12, 13, 14, 15]
    assert [s.samples for s in stacks] == [6, 3, 5, 3, 1, 4, 2, 2, 1]
    assert stacks[0].frames[0] == Frame("main", "sniper/cli/_main.py")
    assert stacks[0].frames[-1] == Frame("frombuffer", "numpy/core/numeric.py")
    assert stacks[8].frames == ()


def test_a_line_without_a_count_is_refused_by_number() -> None:
    with pytest.raises(
        ValueError,
        match=r"^line 2 of the collapsed stacks does not end in a sample count: 'main \(a.py:1\)'"
        "; give py-spy's --format raw output$",
    ):
        list(parse_collapsed(["main (a.py:1) 3", "main (a.py:1)"]))


def test_the_innermost_frame_a_rule_matches_names_the_category() -> None:
    categories = [category_of(s.frames) for s in _stacks_of(SAMPLE)]
    assert categories == [
        _stacks.CODECS,  # numpy has no rule: the codec that called it is charged
        _stacks.GRPC,
        _stacks.EVENT_LOOP,
        _stacks.POOLING,  # a numba kernel has no Python frame: its caller is charged
        _stacks.HASH_INDEX,
        _stacks.THREADS,
        _stacks.THREADS,
        _stacks.TRAINER,  # AUC in sniper/data/_metrics.py is the trainer's, not the hub's
        _stacks.NO_PYTHON_FRAME,
    ]
    assert category_of([Frame("f", "somewhere/else.py")]) == _stacks.OTHER
    # A grouped call's kernels show up as the grouped function: each is charged to its own.
    grouped = {"pin_shards": _stacks.HASH_INDEX, "pool_shards": _stacks.POOLING}
    for function, category in {**grouped, "push_shards": _stacks.OPTIMIZER}.items():
        assert category_of([Frame(function, "sniper/store/_grouped.py")]) == category


def test_samples_caught_in_a_wait_are_nobodys_cpu() -> None:
    stacks = _stacks_of(SAMPLE)
    assert [_stacks.in_a_wait(s.frames) for s in stacks] == [
        *(False, False, True, False, False, True, True, False, False)
    ]
    # An executor's idle thread waits inside SimpleQueue.get, a C call under its _worker loop.
    idle = [Frame("Thread.run", "threading.py"), Frame("_worker", "concurrent/futures/thread.py")]
    assert _stacks.in_a_wait(idle)
    assert not _stacks.in_a_wait([*idle, Frame("_WorkItem.run", "concurrent/futures/thread.py")])
    assert _stacks.categorise(stacks) == {
        _stacks.CODECS: 6,
        _stacks.GRPC: 3,
        _stacks.POOLING: 3,
        _stacks.HASH_INDEX: 1,
        _stacks.TRAINER: 2,
        _stacks.NO_PYTHON_FRAME: 1,
    }


def test_each_threads_cpu_is_split_over_its_own_samples() -> None:
    stacks = _stacks_of(SAMPLE)
    # Thread 11: 9 samples out of a wait, 0.9 s; 12: 4 samples, 0.4 s; 13 only waited, 0.1 s.
    # 14 and 15 have no CPU figure (they exited): the 0.6 s left goes to their 3 samples.
    split = cpu_by_category(stacks, {11: 0.9, 12: 0.4, 13: 0.1}, 2.0)
    assert split == pytest.approx(
        {
            _stacks.CODECS: 0.6,
            _stacks.GRPC: 0.3,
            _stacks.POOLING: 0.3,
            _stacks.HASH_INDEX: 0.1,
            _stacks.WAKE_UPS: 0.1,
            _stacks.TRAINER: 0.4,
            _stacks.NO_PYTHON_FRAME: 0.2,
        }
    )
    known = [s for s in stacks if s.thread in (11, 12)]
    # Thread 16 never showed a Python frame (Arrow's pool, say): its 0.3 s is native; the
    # 0.1 s of a thread that exited without a sample is too.
    native = cpu_by_category(known, {11: 0.9, 12: 0.4, 16: 0.3}, 1.7)
    assert native[_stacks.NO_PYTHON_FRAME] == pytest.approx(0.4)
    assert sum(native.values()) == pytest.approx(1.7)
    # Each thread's ticks rounded apart can sum past the process's: the process's total stands.
    rounded = cpu_by_category(known, {11: 0.9, 12: 0.4}, 1.2)
    assert sum(rounded.values()) == pytest.approx(1.2)


def test_small_categories_are_summed_in_one_row() -> None:
    budget = RoleBudget("ps 0", 100.0, 50.0, {"a": 40.0, "b": 9.5, "c": 0.25, "d": 0.25}, 10)
    rows = [(name, round(ms, 9), round(share, 9)) for name, ms, share in budget.categories()]
    assert rows == [("a", 40.0, 0.8), ("b", 9.5, 0.19), ("categories under 1% (2)", 0.5, 0.01)]


def test_markdown_table_is_the_docs_style() -> None:
    table = markdown_table(["role", "CPU"], [["ps 0", "1.0"], ["hub 0", "2.0"]])
    assert table == "| role | CPU |\n|---|---|\n| ps 0 | 1.0 |\n| hub 0 | 2.0 |\n"


def test_a_table_without_rows_is_its_header(capsys: pytest.CaptureFixture[str]) -> None:
    print_table(["op", "count"], [])  # a job that timed no op
    assert capsys.readouterr().out == "op  count\n--  -----\n"


def test_the_icicle_graph_is_svg_with_a_box_per_frame(tmp_path: Path) -> None:
    path = tmp_path / "ps-0.svg"
    write_flamegraph(_stacks_of(SAMPLE), path, "ps 0")
    root = ET.parse(path).getroot()
    titles = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert "main (sniper/cli/_main.py): 14 samples, other" in titles
    mapped = "EmbeddingTable._map (sniper/store/_table.py): 1 sample"
    assert any(title.startswith(mapped) for title in titles)


def test_sampling_refuses_a_rate_py_spy_cannot_keep() -> None:
    with pytest.raises(ValueError, match=r"^--rate is py-spy's samples per second: 1 to 1000, "):
        Sampling(Path("out"), rate=5000)
    command = Sampling(Path("out"), 50, nonblocking=True).command("py-spy", 7, Path("raw"))
    assert command[-1] == "--nonblocking"
    assert "--native" not in command


def test_a_missing_py_spy_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ProfilerMissing):
        find_py_spy()
    assert main(["bench", "profile", "--batches", "20", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "sniper: error: sniper bench profile needs py-spy: pip install 'sniper[profile]' "
        "(or pip install py-spy)\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--scale", "0"), "--scale must be positive, got 0.0"),
        (("--batches", "10", "--warmup", "10"), "--warmup must be 0 or more and below --batches"),
        (("--rate", "2000"), "--rate is py-spy's samples per second: 1 to 1000, got 2000"),
        (("--native", "--nonblocking"), "--native and --nonblocking do not go together: "),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "profile", *args]) == 2
    assert capsys.readouterr().err.startswith(f"sniper: error: {message}")


def test_a_py_spy_that_cannot_attach_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As root, py-spy is never refused ptrace; a py-spy that stops as a refused one does
    # stands in for it. The job it watches is real.
    refused = tmp_path / "py-spy"
    refused.write_text("#!/bin/sh\necho 'Error: Permission Denied' >&2\nexit 1\n")
    refused.chmod(0o755)
    monkeypatch.setattr("sniper._bench._profile.find_py_spy", lambda: str(refused))
    flags = ["--scale", "0.01", "--batches", "12", "--warmup", "2", "--launcher", "inprocess"]
    assert main(["bench", "profile", *flags, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sniper: error: py-spy on all roles (one process) (pid ")
    assert "stopped early: Error: Permission Denied; py-spy needs ptrace" in err
    assert "a bug in sniper" not in err and err.count("\n") == 1


def _py_spy_or_skip() -> None:
    try:
        find_py_spy()
    except ProfilerMissing:
        pytest.skip("py-spy is not installed (pip install 'sniper[profile]')")


@pytest.mark.parametrize("launcher", ["local", "inprocess"])
def test_a_real_job_is_profiled_in_every_role(launcher: str, tmp_path: Path) -> None:
    _py_spy_or_skip()
    flags = ["--scale", "0.01", "--batches", "30", "--warmup", "3", "--markdown"]
    flags += ["--launcher", launcher, "--out", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "sniper", "bench", "profile", *flags],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    roles = ["trainer", "ps 0", "ps 1", "hub 0"] if launcher == "local" else ["all roles"]
    figures = json.loads((tmp_path / "budget.json").read_text())
    assert [role.split(" (")[0] for role in figures["roles"]] == roles
    for role, budget in figures["roles"].items():
        assert budget["cpu_ms"] > 0
        assert sum(budget["category_ms"].values()) == pytest.approx(budget["cpu_ms"])
        stem = "all-roles-one-process" if launcher == "inprocess" else role.replace(" ", "-")
        assert (tmp_path / f"{stem}.txt").stat().st_size > 0
        assert (tmp_path / f"{stem}.svg").is_file()
        assert f"| {role} |" in done.stdout
    assert "| trainer op | count | p50 ms | p99 ms |" in done.stdout
    lines = (tmp_path / "budget.md").read_text().splitlines()
    assert sum(line.startswith("|---") for line in lines) == 3  # three tables
