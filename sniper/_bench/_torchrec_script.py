"""The TorchRec peer's side of a bench, run by the TorchRec environment's Python.

TorchRec pins its own torch (2.14.1 with fbgemm-gpu-cpu), which clashes with the torch of the
plain peer, so it lives in an environment of its own (``make bench`` makes ``.venv-torchrec``)
and this file imports nothing of sniper: ``python _torchrec_script.py MODE BATCHES.npz
THREADS`` reads the batches ``sniper._bench._torchrec_peer`` wrote and prints one JSON line.

Both modes pool with one ``FusedEmbeddingBagCollection`` (FBGEMM's table-batched embedding
bags on the CPU, ``EXACT_ADAGRAD`` fused into the backward pass), one table per variable:

- ``train`` (``sniper bench e2e``): then the MLP with Adam, as the other peers; every
  ``eval_every``-th batch is only scored. Prints ``{"examples_per_second", "batches"}``,
  counting the trained examples over the whole loop.
- ``store`` (``sniper bench store``): the embeddings alone. Times the lookup (forward) and the
  lookup with its update (forward, then backward with the given gradient of the pooled
  output), each ``warmup`` calls unmeasured and then ``repeats`` measured. Prints the measured
  seconds, ``{"lookup_seconds": [...], "train_seconds": [...]}``: the median is taken on
  sniper's side, as for its own calls.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torchrec import EmbeddingBagConfig, KeyedJaggedTensor, PoolingType
from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection


def _collection(data: Any, optimizer: dict[str, float]) -> Any:
    """One sum-pooled table per variable of ``data``, Adagrad (``optimizer``) fused in."""
    names = [str(n) for n in data["names"]]
    tables = [
        EmbeddingBagConfig(
            name=f"t_{name}",
            embedding_dim=int(data["dim"]),
            num_embeddings=int(count),
            feature_names=[name],
            pooling=PoolingType.SUM,
        )
        for name, count in zip(names, data["rows"], strict=True)
    ]
    return FusedEmbeddingBagCollection(
        tables=tables,
        optimizer_type=torch.optim.Adagrad,
        optimizer_kwargs=optimizer,
        device=torch.device("cpu"),
    )


def _features(data: Any, index: int) -> Any:
    """Batch ``index`` as a KeyedJaggedTensor, built before any clock starts."""
    return KeyedJaggedTensor.from_lengths_sync(
        keys=[str(n) for n in data["names"]],
        values=torch.from_numpy(data[f"values_{index}"]),
        lengths=torch.from_numpy(data[f"lengths_{index}"]),
    )


def train(data: Any) -> dict[str, float]:
    names = [str(n) for n in data["names"]]
    hidden, eval_every = int(data["hidden"]), int(data["eval_every"])
    bags = _collection(data, {"lr": float(data["sparse_lr"])})
    width = len(names) * int(data["dim"]) + int(data["dense_features"])
    mlp = torch.nn.Sequential(
        torch.nn.Linear(width, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
    )
    dense_opt = torch.optim.Adam(mlp.parameters(), lr=float(data["dense_lr"]))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    prepared = [
        (
            _features(data, i),
            torch.from_numpy(data[f"dense_{i}"]),
            torch.from_numpy(data[f"labels_{i}"]),
        )
        for i in range(int(data["batches"]))
    ]

    def forward(features: Any, dense: Any) -> Any:
        pooled = bags(features).values()
        return mlp(torch.cat([pooled, dense], dim=1))[:, 0]

    trained = 0
    start = time.perf_counter()
    for index, (features, dense, labels) in enumerate(prepared):
        if eval_every and index % eval_every == eval_every - 1:
            with torch.no_grad():
                forward(features, dense)
            continue
        loss = loss_fn(forward(features, dense), labels)
        dense_opt.zero_grad()
        loss.backward()  # the embeddings' Adagrad runs inside, fused
        dense_opt.step()
        trained += 1
    seconds = time.perf_counter() - start
    batch_size = int(prepared[0][2].shape[0])
    return {"examples_per_second": trained * batch_size / seconds, "batches": trained}


def _measured(call: Callable[[int], object], warmup: int, repeats: int) -> list[float]:
    """Seconds of ``repeats`` calls of ``call(i)`` after ``warmup`` unmeasured ones: sniper's
    ``median_seconds`` less the median, which this file, importing nothing of sniper, leaves
    to sniper's side."""
    for i in range(warmup):
        call(i)
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - start)
    return times


def store(data: Any) -> dict[str, list[float]]:
    bags = _collection(data, {"lr": float(data["lr"]), "eps": float(data["eps"])})
    count = int(data["batches"])
    features = [_features(data, i) for i in range(count)]
    grads = [torch.from_numpy(data[f"grads_{i}"]) for i in range(count)]
    warmup, repeats = int(data["warmup"]), int(data["repeats"])

    def lookup(i: int) -> object:
        with torch.no_grad():
            return bags(features[i % count]).values()

    def lookup_and_update(i: int) -> None:
        bags(features[i % count]).values().backward(grads[i % count])  # Adagrad fused in

    return {
        "lookup_seconds": _measured(lookup, warmup, repeats),
        "train_seconds": _measured(lookup_and_update, warmup, repeats),
    }


MODES: dict[str, Callable[[Any], dict[str, Any]]] = {"train": train, "store": store}


def main(mode: str, path: str, threads: int) -> None:
    torch.set_num_threads(threads)
    print(json.dumps(MODES[mode](np.load(path))))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
