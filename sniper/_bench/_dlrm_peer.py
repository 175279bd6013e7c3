"""The same DLRM in sniper and in TorchRec: ``sniper bench e2e --model dlrm --peer torchrec``.

sniper trains its zoo DLRM (``[model] factory = "dlrm"``, :data:`DLRM_PARAMS`, Adam at
:data:`DENSE_LR`) through ``sniper train``, its embeddings on the ps with the default Adagrad
(``lr`` 0.05, rows ``normal(0, 0.01)``). The peer is TorchRec's DLRM as its own example
builds it (``_torchrec_dlrm_script.py``, in TorchRec's environment): an
``EmbeddingBagCollection`` with ``apply_optimizer_in_backward`` (exact Adagrad, the same
``lr``, ``eps`` and initial rows), sharded by ``DistributedModelParallel``, and the same dense
layers, initial weights (the job's seed), optimizer and learning rate, written there in plain
torch.

Same tables: each variable's table has one row per distinct sign of the run's batches, so no
two signs share a row on either side (TorchRec does no hashing: its user maps ids to rows
before a batch reaches it, and here that mapping is made before any clock starts).

The peer trains twice, under this environment's OpenMP settings and with
``OMP_WAIT_POLICY=PASSIVE``, and the faster run is kept, as ``sniper bench store`` does: on a
busy 2-core machine libgomp's spinning threads made FBGEMM's fused Adagrad backward 5-10x
slower (1.2 s a step at scale 0.002 against 0.15 s sleeping). sniper gets no second run. Same
batches and the same held-out ones: every ``eval_every``-th batch is scored, not trained, by
both; the held-out AUC compared is sniper's report's ``eval_auc`` (the second half of the
held-out batches) and the peer's over the same batches, counted by the same
:class:`~sniper.data.StreamingAuc`. Both have then trained the same number of steps.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sniper._bench._report import verdict
from sniper._bench._store_torchrec import WAIT_POLICIES
from sniper._bench._torchrec_peer import jagged_batch, run_script
from sniper._table import print_table
from sniper.data import StreamingAuc, SyntheticCtr, Workload
from sniper.roles import TrainReport
from sniper.store import INITIALIZERS

__all__ = [
    "AUC_TOLERANCE",
    "DENSE_LR",
    "DLRM_PARAMS",
    "PEER",
    "SCRIPT",
    "DlrmPeerRun",
    "dlrm_target",
    "model_table",
    "print_auc_comparison",
    "run_torchrec_dlrm",
    "write_dlrm_batches",
]

SCRIPT = Path(__file__).with_name("_torchrec_dlrm_script.py")
PEER = "TorchRec DLRM (EBC + apply_optimizer_in_backward), one process"
DLRM_PARAMS: Mapping[str, list[int]] = {"bottom": [64], "top": [64]}
"""The zoo DLRM's hidden widths, both sides: bottom MLP dense -> 64 -> dim, top MLP -> 64 -> 1."""
DENSE_LR = 0.001
"""Adam's learning rate for the dense layers, both sides (the zoo's default)."""
SPARSE_LR = 0.05
"""Adagrad's learning rate for the embeddings: sniper's built-in ``[variables]`` default."""
SPARSE_EPS = 1e-10
"""Adagrad's eps: sniper's store's (``sniper.store.Adagrad``), torch's default too."""
AUC_TOLERANCE = 0.003
"""Issue 40's bound on the held-out AUCs' difference at the same step."""
TARGET = 1.5
"""Issue 44's examples/s ratio against TorchRec's DLRM, for the job ``sniper train`` runs by
default on one machine (one process)."""


def model_table(model: str) -> dict[str, object]:
    """The ``[model]`` table of the bench's job for ``model``: for ``dlrm`` every setting the
    peer copies (layers, optimizer, learning rate) is spelled out; another model is named only.
    (The job's ``seed`` seeds the dense weights; the peer is given the same.)"""
    if model != "dlrm":
        return {"factory": model}
    return {"factory": "dlrm", "params": dict(DLRM_PARAMS), "optimizer": "adam", "lr": DENSE_LR}


def dlrm_target(launcher: str) -> float | None:
    """Issue 44's ratio for this row: 1.5x for the one-process job, none over gRPC."""
    return TARGET if launcher == "inprocess" else None


def _row_maps(data: SyntheticCtr, names: list[str]) -> dict[str, NDArray[np.uint64]]:
    """Each variable's distinct signs over every batch of ``data``, sorted: sign ``s`` is row
    ``searchsorted(signs, s)`` of the peer's table, one row per sign."""
    seen: dict[str, list[NDArray[np.uint64]]] = {name: [] for name in names}
    for batch in data.batches():
        for name in names:
            seen[name].append(np.unique(batch.sparse[name][0]))
    return {name: np.unique(np.concatenate(parts)) for name, parts in seen.items()}


def write_dlrm_batches(
    path: Path, workload: Workload, data: SyntheticCtr, *, eval_every: int, seed: int
) -> None:
    """Every batch of ``data`` in the peer's layout, with the model's settings."""
    names = [v.name for v in workload.variables]
    signs = _row_maps(data, names)
    arrays: dict[str, Any] = {
        "names": np.array(names),
        "rows": np.array([max(1, len(signs[n])) for n in names], dtype=np.int64),
        "dim": workload.embedding_dim,
        "dense_features": workload.dense_features,
        "bottom": np.array(DLRM_PARAMS["bottom"], dtype=np.int64),
        "top": np.array(DLRM_PARAMS["top"], dtype=np.int64),
        "eval_every": eval_every,
        "seed": seed,
        "sparse_lr": SPARSE_LR,
        "sparse_eps": SPARSE_EPS,
        "init_std": INITIALIZERS["normal"]["std"],
        "dense_lr": DENSE_LR,
    }
    count = 0
    for index, batch in enumerate(data.batches()):
        arrays |= jagged_batch(
            index,
            batch,
            names,
            lambda n, values: np.searchsorted(signs[n], values).astype(np.int64),
        )
        count += 1
    arrays["batches"] = count
    np.savez(path, **arrays)


@dataclass(frozen=True)
class DlrmPeerRun:
    """What the TorchRec DLRM did on the bench's batches."""

    examples_per_second: float
    batches: int
    """Batches trained (the held-out ones not counted)."""
    eval_auc: float
    """AUC over the second half of the held-out batches, as sniper's report's ``eval_auc``."""


def held_out_auc(data: SyntheticCtr, eval_every: int, predictions: list[list[float]]) -> float:
    """The AUC sniper's report gives as ``eval_auc`` (the second half of the held-out
    batches: the model as training ends), of the peer's ``predictions`` of each held-out
    batch of ``data``."""
    held = [batch for i, batch in enumerate(data.batches()) if i % eval_every == eval_every - 1]
    if len(held) != len(predictions):
        raise RuntimeError(
            f"the TorchRec DLRM peer scored {len(predictions)} held-out batches, not {len(held)}"
        )
    auc = StreamingAuc()
    for batch, probs in list(zip(held, predictions, strict=True))[len(held) // 2 :]:
        auc.update(batch.labels.reshape(-1), np.asarray(probs, dtype=np.float64))
    return auc.value()


def run_torchrec_dlrm(
    workload: Workload, data: SyntheticCtr, threads: int, *, eval_every: int, seed: int
) -> DlrmPeerRun:
    """TorchRec's DLRM trained on ``data``, the faster of a run under each of
    :data:`~sniper._bench._store_torchrec.WAIT_POLICIES` (``PeerMissing`` without its
    environment)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "batches.npz"
        write_dlrm_batches(path, workload, data, eval_every=eval_every, seed=seed)
        runs = [run_script(None, path, threads, env, script=SCRIPT) for env in WAIT_POLICIES]
    result = max(runs, key=lambda run: float(run["examples_per_second"]))
    return DlrmPeerRun(
        examples_per_second=float(result["examples_per_second"]),
        batches=int(result["batches"]),
        eval_auc=held_out_auc(data, eval_every, result["held_out"]),
    )


def print_auc_comparison(reports: Mapping[str, TrainReport], peer: DlrmPeerRun) -> None:
    """Held-out AUC of each sniper run and of the peer after their steps, the difference,
    and whether it is within :data:`AUC_TOLERANCE` (issue 40)."""
    rows = []
    for label, report in reports.items():
        if report.eval_auc is None:  # nothing held out: nothing to compare
            rows.append([label, str(report.steps), "-", "-", "-"])
            continue
        difference = report.eval_auc - peer.eval_auc
        within = verdict(AUC_TOLERANCE - abs(difference), 0.0)
        rows.append(
            [
                label,
                str(report.steps),
                f"{report.eval_auc:.4f}",
                f"{difference:+.4f}",
                f"|diff| <= {AUC_TOLERANCE}: {within}",
            ]
        )
    rows.append([PEER, str(peer.batches), f"{peer.eval_auc:.4f}", "-", "-"])
    print("\nheld-out AUC at the same step (second half of the held-out batches):")
    print_table(["", "steps", "held-out AUC", "- TorchRec", "target"], rows)
