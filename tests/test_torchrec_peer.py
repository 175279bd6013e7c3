"""The TorchRec peer's side in sniper: the batches it is given, and a clear word when its
environment is missing. (TorchRec itself lives in ``.venv-torchrec``, made by ``make bench``;
benchmarks are not tests.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sniper._bench._report import PeerMissing
from sniper._bench._torchrec_peer import table_rows, torchrec_python, write_batches
from sniper.data import SyntheticCtr, load_workload


def test_batches_are_written_in_torchrecs_jagged_layout(tmp_path: Path) -> None:
    workload = load_workload("seed_ctr")
    data = SyntheticCtr(workload, num_batches=3, scale=0.002, seed=1)
    path = tmp_path / "batches.npz"
    write_batches(path, workload, data, hidden=8, eval_every=10, max_rows=4096)
    written = np.load(path)
    names = [v.name for v in workload.variables]
    assert list(written["names"]) == names and int(written["batches"]) == 3
    for index, batch in enumerate(data.batches()):
        values, lengths = written[f"values_{index}"], written[f"lengths_{index}"]
        # Feature by feature, each feature's examples in order: what from_lengths_sync reads.
        assert lengths.tolist() == [int(x) for n in names for x in np.diff(batch.sparse[n][1])]
        start = 0
        for name, rows in zip(names, written["rows"], strict=True):
            signs = batch.sparse[name][0]
            assert rows == table_rows(data, name, 4096)
            chunk = values[start : start + len(signs)]
            assert chunk.tolist() == (signs % np.uint64(rows)).astype(np.int64).tolist()
            start += len(signs)
        assert start == len(values) == int(lengths.sum())
        assert np.array_equal(written[f"labels_{index}"], batch.labels)


def test_a_missing_environment_says_how_to_make_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNIPER_TORCHREC_PYTHON", "/nonexistent/python")
    with pytest.raises(PeerMissing, match="no TorchRec environment at SNIPER_TORCHREC_PYTHON="):
        torchrec_python()
