"""TorchRec's DLRM trains for real in TorchRec's environment, on tiny batches.

The environment (``make bench`` makes ``.venv-torchrec``; ``SNIPER_TORCHREC_PYTHON`` names
another) holds TorchRec's own torch and FBGEMM, several GB that ``make test`` does not install,
so without it this test says so and is skipped; the rest of the peer's side, its dense part
above all, is tested with sniper's own torch in ``test_bench_dlrm.py``.
"""

from __future__ import annotations

import pytest

from sniper._bench._dlrm_peer import run_torchrec_dlrm
from sniper._bench._report import PeerMissing
from sniper._bench._torchrec_peer import torchrec_python
from sniper.data import SyntheticCtr, load_workload


def _environment() -> None:
    try:
        torchrec_python()
    except PeerMissing as exc:
        pytest.skip(str(exc))


def test_torchrecs_dlrm_trains_every_batch_and_scores_the_held_out_ones() -> None:
    _environment()
    workload = load_workload("seed_ctr")
    data = SyntheticCtr(workload, num_batches=24, scale=0.002, seed=0)
    run = run_torchrec_dlrm(workload, data, 1, eval_every=4, seed=0)
    assert run.batches == 18  # 24 less every 4th
    assert run.examples_per_second > 0
    assert 0.0 < run.eval_auc < 1.0
