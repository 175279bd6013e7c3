"""The TorchRec peer's training loop, run by the TorchRec environment's Python.

TorchRec pins its own torch (2.14.1 with fbgemm-gpu-cpu), which clashes with the torch of the
plain peer, so it lives in an environment of its own (``make bench`` makes ``.venv-torchrec``)
and this file imports nothing of sniper: ``python _torchrec_script.py BATCHES.npz THREADS``
trains on the batches ``sniper._bench._torchrec_peer.write_batches`` wrote and prints one JSON
line, ``{"examples_per_second": ..., "batches": ...}``.

The model is the other peers': one sum-pooled bag per variable (here one
``FusedEmbeddingBagCollection``: FBGEMM's table-batched embedding bags on the CPU, Adagrad
fused into the backward pass), then the MLP with Adam; every ``eval_every``-th batch is only
scored, and examples/s counts the trained examples over the whole loop.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np
import torch
from torchrec import EmbeddingBagConfig, KeyedJaggedTensor, PoolingType
from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection


def main(path: str, threads: int) -> None:
    torch.set_num_threads(threads)
    data = np.load(path)
    names = [str(n) for n in data["names"]]
    rows = [int(r) for r in data["rows"]]
    dim, hidden, eval_every = (int(data[k]) for k in ("dim", "hidden", "eval_every"))
    batches = int(data["batches"])
    tables = [
        EmbeddingBagConfig(
            name=f"t_{name}",
            embedding_dim=dim,
            num_embeddings=count,
            feature_names=[name],
            pooling=PoolingType.SUM,
        )
        for name, count in zip(names, rows, strict=True)
    ]
    bags = FusedEmbeddingBagCollection(
        tables=tables,
        optimizer_type=torch.optim.Adagrad,
        optimizer_kwargs={"lr": float(data["sparse_lr"])},
        device=torch.device("cpu"),
    )
    width = len(names) * dim + int(data["dense_features"])
    mlp = torch.nn.Sequential(
        torch.nn.Linear(width, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
    )
    dense_opt = torch.optim.Adam(mlp.parameters(), lr=float(data["dense_lr"]))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    prepared = [
        (
            KeyedJaggedTensor.from_lengths_sync(
                keys=names,
                values=torch.from_numpy(data[f"values_{i}"]),
                lengths=torch.from_numpy(data[f"lengths_{i}"]),
            ),
            torch.from_numpy(data[f"dense_{i}"]),
            torch.from_numpy(data[f"labels_{i}"]),
        )
        for i in range(batches)
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
    print(json.dumps({"examples_per_second": trained * batch_size / seconds, "batches": trained}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
