"""TorchRec's DLRM, the peer of ``sniper bench e2e --model dlrm --peer torchrec``, run by the
TorchRec environment's Python.

``python _torchrec_dlrm_script.py BATCHES.npz THREADS`` reads the batches
``sniper._bench._dlrm_peer`` wrote and prints one JSON line. It imports nothing of sniper (it
runs in TorchRec's environment, whose torch is not sniper's), so the DLRM's dense part is
written here in plain torch, layer for layer the same as sniper's zoo DLRM
(``sniper.torch.models.DlrmNet``), with the same names for its parameters:

============================  =================================================================
sniper's ``DlrmNet``          here (:class:`DlrmDense`)
============================  =================================================================
``bottom``                    ``bottom``: ``Linear`` through ``[dense, *bottom, dim]``, a ReLU
                              after every layer, the last one too
fields                        the bottom MLP's output first, then each variable's pooled
                              embedding in input order: ``[batch, 1 + variables, dim]``
``rows``, ``cols``            ``torch.tril_indices(fields, fields, offset=-1)``: each pair
                              below the diagonal once, in that order
``top``                       ``top``: ``Linear`` through ``[dim + pairs, *top, 1]``, a ReLU
                              between layers, none after the last (the logit)
initial weights               ``torch.manual_seed(seed)``, then the layers built in that order
============================  =================================================================

A test loads sniper's module's ``state_dict`` into this one and compares their logits.

The embeddings are TorchRec's as its DLRM example builds them: one ``EmbeddingBagCollection``
(a sum-pooled table per variable, built on the meta device), its optimizer attached with
``apply_optimizer_in_backward`` (``torch.optim.Adagrad``: FBGEMM's ``EXACT_ADAGRAD``, the
per-coordinate Adagrad sniper's store runs, with the same ``lr`` and ``eps``), and the model
sharded by ``DistributedModelParallel`` in a one-process gloo group, which fuses the Adagrad
into FBGEMM's table-batched embedding kernels on the CPU. Its tables start as sniper's rows do:
``normal(0, std)``. The dense layers train with Adam. One process has nothing to synchronise
with, so the dense part is not wrapped in ``DistributedDataParallel`` (its all-reduce over one
rank would be pure overhead on the peer's side).

The loop is sniper's trainer's: every ``eval_every``-th batch is held out (forward only, scored
by the model as it is then) and examples/s counts the trained examples over the whole loop.
Prints ``{"examples_per_second", "batches", "held_out"}``: ``held_out`` is each held-out
batch's predicted probabilities, which sniper's side scores with its own AUC.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from typing import Any

import numpy as np
import torch
from torch import nn


def _mlp(sizes: list[int], *, last_relu: bool) -> nn.Sequential:
    """``Linear`` layers through ``sizes``, a ReLU between each two (and after the last)."""
    modules: list[nn.Module] = []
    for index, (a, b) in enumerate(itertools.pairwise(sizes)):
        modules.append(nn.Linear(a, b))
        if last_relu or index < len(sizes) - 2:
            modules.append(nn.ReLU())
    return nn.Sequential(*modules)


class DlrmDense(nn.Module):
    """DLRM's dense part over ``variables`` pooled embeddings of width ``dim`` (see the module
    doc for its correspondence with sniper's ``DlrmNet``)."""

    rows: torch.Tensor
    cols: torch.Tensor

    def __init__(
        self, variables: int, dim: int, dense_features: int, bottom: list[int], top: list[int]
    ) -> None:
        super().__init__()
        self.variables, self.dim = variables, dim
        self.bottom = (
            _mlp([dense_features, *bottom, dim], last_relu=True) if dense_features else None
        )
        fields = variables + (1 if dense_features else 0)
        rows, cols = torch.tril_indices(fields, fields, offset=-1)
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", cols, persistent=False)
        width = (dim if dense_features else 0) + len(rows)
        self.top = _mlp([width, *top, 1], last_relu=False)

    def forward(self, pooled: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        """``pooled``: ``[batch, variables * dim]``, each variable's columns in input order
        (TorchRec's ``KeyedTensor.values()``); ``dense``: ``[batch, dense_features]``. Returns
        ``[batch, 1]`` logits."""
        fields = pooled.reshape(-1, self.variables, self.dim)
        parts = []
        if self.bottom is not None:
            bottom = self.bottom(dense)
            fields = torch.cat([bottom.unsqueeze(1), fields], dim=1)
            parts.append(bottom)
        dots = torch.bmm(fields, fields.transpose(1, 2))
        parts.append(dots[:, self.rows, self.cols])
        return self.top(torch.cat(parts, dim=1))  # type: ignore[no-any-return]


class Dlrm(nn.Module):
    """TorchRec's embeddings, then :class:`DlrmDense`."""

    def __init__(self, sparse: nn.Module, dense: DlrmDense) -> None:
        super().__init__()
        self.sparse = sparse
        self.dense = dense

    def forward(self, features: Any, dense: torch.Tensor) -> torch.Tensor:
        return self.dense(self.sparse(features).values(), dense)  # type: ignore[no-any-return]


def _one_process_group() -> None:
    """A gloo group of one rank over an in-memory store: what ``DistributedModelParallel``
    shards within, with no port to pick."""
    import torch.distributed as dist

    if not dist.is_initialized():
        store = dist.HashStore()  # type: ignore[attr-defined]
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)


def _model(data: Any) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The sharded DLRM and the Adam over its dense parameters (the embeddings' Adagrad runs
    inside the backward pass)."""
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
    from torchrec.distributed.model_parallel import DataParallelWrapper, DistributedModelParallel
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    class _Unwrapped(DataParallelWrapper):  # type: ignore[misc]
        def wrap(self, dmp: Any, env: Any, device: Any) -> None:
            """One rank: the dense part stays as it is (no DistributedDataParallel)."""

    names = [str(n) for n in data["names"]]
    dim = int(data["dim"])
    torch.manual_seed(int(data["seed"]))
    dense = DlrmDense(
        len(names),
        dim,
        int(data["dense_features"]),
        [int(x) for x in data["bottom"]],
        [int(x) for x in data["top"]],
    )
    sparse = EmbeddingBagCollection(
        tables=[
            EmbeddingBagConfig(
                name=f"t_{name}",
                embedding_dim=dim,
                num_embeddings=int(count),
                feature_names=[name],
                pooling=PoolingType.SUM,
            )
            for name, count in zip(names, data["rows"], strict=True)
        ],
        device=torch.device("meta"),
    )
    apply_optimizer_in_backward(
        torch.optim.Adagrad,
        sparse.parameters(),
        {"lr": float(data["sparse_lr"]), "eps": float(data["sparse_eps"])},
    )
    _one_process_group()
    model = DistributedModelParallel(
        Dlrm(sparse, dense), device=torch.device("cpu"), data_parallel_wrapper=_Unwrapped()
    )
    _initialise_tables(model, float(data["init_std"]))
    dense_params = dict(in_backward_optimizer_filter(model.named_parameters()))
    return model, torch.optim.Adam(dense_params.values(), lr=float(data["dense_lr"]))


def _initialise_tables(model: nn.Module, std: float) -> None:
    """Every embedding row ``normal(0, std)``, as sniper's store fills a new row."""
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if ".embedding_bags." in name:
                for shard in tensor.local_shards():
                    nn.init.normal_(shard.tensor, std=std)


def _features(data: Any, index: int) -> Any:
    """Batch ``index`` as a KeyedJaggedTensor, built before the clock starts."""
    from torchrec import KeyedJaggedTensor

    return KeyedJaggedTensor.from_lengths_sync(
        keys=[str(n) for n in data["names"]],
        values=torch.from_numpy(data[f"values_{index}"]),
        lengths=torch.from_numpy(data[f"lengths_{index}"]),
    )


def train(data: Any) -> dict[str, Any]:
    model, dense_opt = _model(data)
    eval_every = int(data["eval_every"])
    loss_fn = nn.BCEWithLogitsLoss()
    prepared = [
        (
            _features(data, i),
            torch.from_numpy(data[f"dense_{i}"]),
            torch.from_numpy(data[f"labels_{i}"]).reshape(-1, 1),
        )
        for i in range(int(data["batches"]))
    ]
    held_out: list[torch.Tensor] = []
    trained = 0
    start = time.perf_counter()
    for index, (features, dense, labels) in enumerate(prepared):
        if eval_every and index % eval_every == eval_every - 1:
            with torch.no_grad():
                held_out.append(torch.sigmoid(model(features, dense))[:, 0])
            continue
        loss = loss_fn(model(features, dense), labels)
        dense_opt.zero_grad()
        loss.backward()  # the embeddings' Adagrad runs inside, fused
        dense_opt.step()
        trained += 1
    seconds = time.perf_counter() - start
    batch_size = int(prepared[0][2].shape[0])
    return {
        "examples_per_second": trained * batch_size / seconds,
        "batches": trained,
        "held_out": [probs.tolist() for probs in held_out],
    }


def main(path: str, threads: int) -> None:
    torch.set_num_threads(threads)
    print(json.dumps(train(np.load(path))))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
