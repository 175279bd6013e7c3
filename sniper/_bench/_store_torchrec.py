"""TorchRec as the peer of ``sniper bench store --peer torchrec``.

A case's batches go to the TorchRec environment (``_torchrec_script.py store``) in an ``.npz``,
in the layout ``KeyedJaggedTensor.from_lengths_sync`` reads: per batch, ``values`` and
``lengths`` feature by feature (a case's batches are already variable by variable, each with
one bag per example, so ``lengths`` is the difference of sniper's offsets). TorchRec gets one
table per variable of the case, of ``peer_rows(vocabulary)`` rows as in ``sniper bench e2e``,
and each sign becomes row ``sign % rows``: TorchRec does no hashing, so its side starts from
ready row ids (as the EmbeddingBag peer's does), while sniper's lookup finds every sign in its
index. Adagrad has sniper's ``lr`` and ``eps``.

TorchRec runs twice per case, under this environment's OpenMP settings and with
``OMP_WAIT_POLICY=PASSIVE``, and the faster median of each measurement is kept. On this shared
2-core machine, libgomp's spinning threads made FBGEMM's two-thread kernels 5-6x slower in
about half the processes whenever another tenant held a core (the huge variable's lookup
16 ms against 2.7 ms, its update 100 ms against 19), whole runs at a time; sleeping threads
avoid that but cost the whole batch about 10% when spinning is not hurt. sniper's side gets
no such second chance, so the ratios lean towards TorchRec.

Gradients are the ones sniper pushes, laid out as TorchRec's pooled output is:
sniper pools to ``[variables * bags, dim]`` (variable-major), TorchRec to
``[bags, variables * dim]`` (a ``KeyedTensor``'s values).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from sniper._bench._torchrec_peer import peer_rows, run_script
from sniper.store import Adagrad

if TYPE_CHECKING:
    from sniper._bench._store import Case

__all__ = ["WAIT_POLICIES", "torchrec_grads", "torchrec_seconds", "write_case"]

WAIT_POLICIES: tuple[dict[str, str], ...] = ({}, {"OMP_WAIT_POLICY": "PASSIVE"})
"""The environments TorchRec is measured under (the faster kept): as given, sleeping threads."""


def torchrec_grads(grads: NDArray[np.float32], variables: int) -> NDArray[np.float32]:
    """A gradient of sniper's pooled layout ``[variables * bags, dim]`` in TorchRec's."""
    bags, dim = grads.shape[0] // variables, grads.shape[1]
    return np.ascontiguousarray(
        grads.reshape(variables, bags, dim).transpose(1, 0, 2).reshape(bags, variables * dim)
    )


def write_case(
    path: Path,
    case: Case,
    grads: list[NDArray[np.float32]],
    optimizer: Adagrad,
    *,
    repeats: int,
    warmup: int,
) -> None:
    """Every batch of ``case`` in TorchRec's jagged layout, with its gradient and the timing
    protocol (``warmup`` unmeasured calls, then ``repeats`` measured)."""
    rows = np.array([peer_rows(v.vocabulary) for v in case.variables], dtype=np.int64)
    arrays: dict[str, Any] = {
        "names": np.array([v.name for v in case.variables]),
        "rows": rows,
        "dim": grads[0].shape[1],
        "lr": optimizer.lr,
        "eps": optimizer.eps,
        "batches": len(case.signs),
        "warmup": warmup,
        "repeats": repeats,
    }
    for index, (signs, offsets) in enumerate(zip(case.signs, case.offsets, strict=True)):
        per_variable = np.diff(offsets[:: case.bags])
        arrays[f"values_{index}"] = (
            signs % np.repeat(rows, per_variable).astype(np.uint64)
        ).astype(np.int64)
        arrays[f"lengths_{index}"] = np.diff(offsets)
        arrays[f"grads_{index}"] = torchrec_grads(grads[index], len(case.variables))
    np.savez(path, **arrays)


def torchrec_seconds(
    case: Case,
    grads: list[NDArray[np.float32]],
    optimizer: Adagrad,
    threads: int,
    *,
    repeats: int,
    warmup: int,
) -> tuple[float, float]:
    """TorchRec's median seconds for a lookup and for a lookup with its update, the faster
    under each of :data:`WAIT_POLICIES` (``PeerMissing`` without its environment)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.npz"
        write_case(path, case, grads, optimizer, repeats=repeats, warmup=warmup)
        results = [run_script("store", path, threads, env) for env in WAIT_POLICIES]

    def fastest(key: str) -> float:
        return min(float(np.median(result[key])) for result in results)

    return fastest("lookup_seconds"), fastest("train_seconds")
