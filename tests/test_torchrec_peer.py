"""The TorchRec peer's side in sniper: the batches it is given, and a clear word when its
environment is missing. (TorchRec itself lives in ``.venv-torchrec``, made by ``make bench``;
benchmarks are not tests.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sniper._bench._report import PeerMissing
from sniper._bench._store import build_cases
from sniper._bench._store_torchrec import write_case
from sniper._bench._torchrec_peer import (
    INSTALL_HINT,
    peer_rows,
    run_script,
    table_rows,
    torchrec_python,
    write_batches,
)
from sniper.data import SyntheticCtr, load_workload
from sniper.store import Adagrad
from tests._jagged import jagged_chunks


def test_batches_are_written_in_torchrecs_jagged_layout(tmp_path: Path) -> None:
    workload = load_workload("seed_ctr")
    data = SyntheticCtr(workload, num_batches=3, scale=0.002, seed=1)
    path = tmp_path / "batches.npz"
    write_batches(path, workload, data, hidden=8, eval_every=10, max_rows=4096)
    written = np.load(path)
    names = [v.name for v in workload.variables]
    assert list(written["names"]) == names and int(written["batches"]) == 3
    for index, batch in enumerate(data.batches()):
        for name, rows, signs, chunk in jagged_chunks(written, index, batch, names):
            assert rows == table_rows(data, name, 4096)
            assert chunk.tolist() == (signs % np.uint64(rows)).astype(np.int64).tolist()
        assert np.array_equal(written[f"labels_{index}"], batch.labels)


def test_a_missing_environment_says_how_to_make_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNIPER_TORCHREC_PYTHON", "/nonexistent/python")
    with pytest.raises(PeerMissing, match="no TorchRec environment at SNIPER_TORCHREC_PYTHON="):
        torchrec_python()


def test_store_cases_are_written_in_torchrecs_jagged_layout(tmp_path: Path) -> None:
    cases = build_cases(load_workload("seed_ctr"), batches=2, prefill_rows=1000, seed=0)
    for number, case in enumerate(cases):
        grads = case.grads(16)
        path = tmp_path / f"case{number}.npz"
        write_case(path, case, grads, Adagrad(lr=0.01), repeats=7, warmup=3)
        written = np.load(path)
        names = [v.name for v in case.variables]
        assert list(written["names"]) == names
        assert [int(x) for x in (written["batches"], written["repeats"], written["warmup"])] == [
            2,
            7,
            3,
        ]
        assert (float(written["lr"]), float(written["eps"])) == (0.01, Adagrad().eps)
        for index, (signs, offsets) in enumerate(zip(case.signs, case.offsets, strict=True)):
            values, lengths = written[f"values_{index}"], written[f"lengths_{index}"]
            assert values.dtype == lengths.dtype == np.int64
            assert lengths.tolist() == np.diff(offsets).tolist()
            pooled = written[f"grads_{index}"]
            assert pooled.shape == (case.bags, len(names) * 16)
            for feature, (spec, rows) in enumerate(
                zip(case.variables, written["rows"], strict=True)
            ):
                assert rows == peer_rows(spec.vocabulary)
                bags = slice(feature * case.bags, (feature + 1) * case.bags)
                start, stop = offsets[bags.start], offsets[bags.stop]
                expected = (signs[start:stop] % np.uint64(rows)).astype(np.int64)
                assert np.array_equal(values[start:stop], expected)
                # TorchRec's KeyedTensor: example-major, this feature's dim columns.
                columns = pooled[:, feature * 16 : (feature + 1) * 16]
                assert np.array_equal(columns, grads[index][bags])


def test_a_python_without_torchrec_is_a_missing_peer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """sniper's own Python has no TorchRec (and in CI no torch): the script cannot import it."""
    monkeypatch.setenv("SNIPER_TORCHREC_PYTHON", sys.executable)
    with pytest.raises(
        PeerMissing, match=r"cannot run the TorchRec peer \((ModuleNotFound|Import)Error"
    ):
        run_script("store", tmp_path / "unread.npz", 1)


@pytest.mark.parametrize("bench", ["store", "e2e"])
def test_a_missing_peer_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, bench: str) -> None:
    monkeypatch.setenv("SNIPER_TORCHREC_PYTHON", "/nonexistent/python")
    done = subprocess.run(
        [sys.executable, "-m", "sniper", "bench", bench, "--peer", "torchrec"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "sniper: error: no TorchRec environment at SNIPER_TORCHREC_PYTHON=/nonexistent/python: "
        f"{INSTALL_HINT}\n"
    )
