"""TorchRec as a benchmark peer: the library a user would pick instead of sniper on one machine.

TorchRec 1.9.2 needs torch 2.14.1 with FBGEMM's CPU build, while the plain torch peer uses the
torch in sniper's own environment; the two cannot share one. So the TorchRec peer runs in an
environment of its own (``make bench`` creates ``.venv-torchrec``; ``SNIPER_TORCHREC_PYTHON``
names another), as a subprocess given the same batches in an ``.npz`` file
(``_torchrec_script.py``, which imports nothing of sniper). Signs map to rows as for the torch
peer (``sign % rows``, rows = the variable's vocabulary, at most :data:`MAX_ROWS`), and the
holdout and model are the same. TorchRec does no hashing: a user maps signs to rows before
the batch reaches it, so its side of every comparison starts from ready row ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from sniper._bench._report import PeerMissing
from sniper.data import Batch, SyntheticCtr, Workload

__all__ = [
    "INSTALL_HINT",
    "MAX_ROWS",
    "jagged_batch",
    "peer_rows",
    "run_script",
    "run_torchrec",
    "torchrec_python",
    "write_batches",
]

SCRIPT = Path(__file__).with_name("_torchrec_script.py")
ENVIRONMENT = "SNIPER_TORCHREC_PYTHON"
DEFAULT_PYTHON = Path(".venv-torchrec/bin/python")
INSTALL_HINT = (
    "make bench (it creates .venv-torchrec: torch==2.14.1 fbgemm-gpu-cpu==1.9.0, then "
    "torchrec==1.9.2 --no-deps), or set SNIPER_TORCHREC_PYTHON to a Python that has them"
)


def torchrec_python() -> str:
    """The TorchRec environment's Python, or :class:`PeerMissing` saying how to make one."""
    named = os.environ.get(ENVIRONMENT)
    python = Path(named) if named else DEFAULT_PYTHON
    if not python.is_file():
        where = f"{ENVIRONMENT}={named}" if named else str(DEFAULT_PYTHON)
        raise PeerMissing(f"no TorchRec environment at {where}: {INSTALL_HINT}")
    return str(python)


MAX_ROWS = 2**20
"""Most rows of one peer table: past it, signs share rows (the hashing trick), so the peers'
76 tables of seed_ctr hold 42M rows (5.4 GB with Adagrad's state) instead of 71M."""


def peer_rows(vocabulary: int, max_rows: int = MAX_ROWS) -> int:
    """Rows of a peer's table for a variable of ``vocabulary`` signs, within [1024, max_rows]."""
    return min(max_rows, max(1024, vocabulary))


def table_rows(data: SyntheticCtr, name: str, max_rows: int) -> int:
    """Rows of a peer's table for variable ``name`` of ``data`` (see :func:`peer_rows`)."""
    return peer_rows(data.vocabulary[name], max_rows)


def write_batches(
    path: Path,
    workload: Workload,
    data: SyntheticCtr,
    *,
    hidden: int,
    eval_every: int,
    max_rows: int,
) -> None:
    """Every batch as TorchRec's jagged layout (values and lengths, feature by feature)."""
    names = [v.name for v in workload.variables]
    rows = {name: table_rows(data, name, max_rows) for name in names}
    arrays: dict[str, Any] = {
        "names": np.array(names),
        "rows": np.array([rows[n] for n in names], dtype=np.int64),
        "dim": workload.embedding_dim,
        "hidden": hidden,
        "eval_every": eval_every,
        "dense_features": workload.dense_features,
        "sparse_lr": 0.05,
        "dense_lr": 0.002,
    }
    count = 0
    for index, batch in enumerate(data.batches()):
        arrays |= jagged_batch(
            index, batch, names, lambda n, signs: (signs % np.uint64(rows[n])).astype(np.int64)
        )
        count += 1
    arrays["batches"] = count
    np.savez(path, **arrays)


def jagged_batch(
    index: int,
    batch: Batch,
    names: Sequence[str],
    row_ids: Callable[[str, NDArray[np.uint64]], NDArray[np.int64]],
) -> dict[str, NDArray[Any]]:
    """Batch ``index`` as the peer scripts read it: ``values_INDEX`` (each variable's row ids,
    ``row_ids(name, signs)``, variable by variable), ``lengths_INDEX`` (each example's count,
    the same order: what ``KeyedJaggedTensor.from_lengths_sync`` reads), ``dense_INDEX`` and
    ``labels_INDEX``."""
    parts = [batch.sparse[name] for name in names]
    return {
        f"values_{index}": np.concatenate(
            [row_ids(n, signs) for n, (signs, _) in zip(names, parts, strict=True)]
        ),
        f"lengths_{index}": np.concatenate(
            [np.diff(offsets).astype(np.int64) for _, offsets in parts]
        ),
        f"dense_{index}": batch.dense,
        f"labels_{index}": batch.labels,
    }


def run_script(
    mode: str | None,
    path: Path,
    threads: int,
    env: Mapping[str, str] | None = None,
    script: Path = SCRIPT,
) -> dict[str, Any]:
    """Run ``_torchrec_script.py MODE PATH THREADS`` in the TorchRec environment (with ``env``
    over this process's environment); its JSON line. Another ``script`` takes no ``mode``
    (None): ``SCRIPT PATH THREADS``.

    A Python that cannot import torch or TorchRec is :class:`PeerMissing` (the user's
    environment, with the way to make one); any other failure of the script is a bug of the
    peer's side, raised with the script's last line.
    """
    python = torchrec_python()
    done = subprocess.run(
        [python, str(script), *([mode] if mode else []), str(path), str(threads)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        if last.startswith(("ModuleNotFoundError", "ImportError")):
            raise PeerMissing(f"{python} cannot run the TorchRec peer ({last}): {INSTALL_HINT}")
        raise RuntimeError(f"the TorchRec peer failed ({python}): {last}")
    print(f"  TorchRec peer: {python}", file=sys.stderr)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_torchrec(
    workload: Workload, data: SyntheticCtr, threads: int, *, hidden: int, eval_every: int
) -> tuple[float, int]:
    """TorchRec's examples/s and trained batches on ``data`` (``PeerMissing`` without it)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "batches.npz"
        write_batches(path, workload, data, hidden=hidden, eval_every=eval_every, max_rows=MAX_ROWS)
        result = run_script("train", path, threads)
    return float(result["examples_per_second"]), int(result["batches"])
