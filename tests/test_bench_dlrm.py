"""``sniper bench e2e --model dlrm --peer torchrec``: the peer's dense part is sniper's zoo DLRM
layer for layer, its tables give every sign a row of its own, the job the bench writes names
the same model, and the bench prints both rates and both held-out AUCs at the same step."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

from sniper._bench import _e2e
from sniper._bench._dlrm_peer import (
    AUC_TOLERANCE,
    DENSE_LR,
    DLRM_PARAMS,
    PEER,
    SCRIPT,
    DlrmPeerRun,
    held_out_auc,
    write_dlrm_batches,
)
from sniper._bench._e2e import EVAL_EVERY, job_settings, write_job
from sniper.cli import main
from sniper.cluster import load_train_config
from sniper.data import StreamingAuc, SyntheticCtr, load_workload
from sniper.models import ModelConfig, ModelInputs
from sniper.roles import TrainReport
from sniper.torch.models import DlrmNet
from tests._jagged import jagged_chunks


def _script() -> ModuleType:
    """The peer's script as a module: it imports TorchRec only where it builds the tables, so
    its dense part loads with sniper's own torch."""
    spec = importlib.util.spec_from_file_location("torchrec_dlrm_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dense_features", [13, 0])
def test_the_peers_dense_part_is_sniper_s_dlrm_layer_for_layer(dense_features: int) -> None:
    """Built after the same seed, the two have the same parameters, names and values, and
    give the same logits for the same pooled embeddings."""
    names = [f"v{i}" for i in range(5)]
    inputs = ModelInputs(dict.fromkeys(names, 8), dense_features=dense_features)
    torch.manual_seed(3)
    sniper_net = DlrmNet(inputs, bottom=[12, 10], top=[20, 6])
    torch.manual_seed(3)
    peer_net = _script().DlrmDense(len(names), 8, dense_features, [12, 10], [20, 6])
    ours, theirs = sniper_net.state_dict(), peer_net.state_dict()
    assert list(ours) == list(theirs)
    assert all(torch.equal(ours[key], theirs[key]) for key in ours)
    generator = torch.Generator().manual_seed(1)
    pooled = {name: torch.randn(32, 8, generator=generator) for name in names}
    dense = torch.randn(32, dense_features, generator=generator)
    with torch.no_grad():
        expected = sniper_net(pooled, dense)
        got = peer_net(torch.cat(list(pooled.values()), dim=1), dense)
    assert got.shape == expected.shape == (32, 1)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_each_sign_has_a_row_of_its_own_in_every_batch(tmp_path: Path) -> None:
    workload = load_workload("seed_ctr")
    data = SyntheticCtr(workload, num_batches=3, scale=0.002, seed=2)
    path = tmp_path / "batches.npz"
    write_dlrm_batches(path, workload, data, eval_every=10, seed=7)
    written = np.load(path)
    names = [v.name for v in workload.variables]
    assert list(written["names"]) == names and int(written["batches"]) == 3
    settings = {
        key: float(written[key])
        for key in ("dim", "dense_features", "eval_every", "seed", "sparse_lr", "dense_lr")
    }
    assert settings == {
        "dim": workload.embedding_dim,
        "dense_features": workload.dense_features,
        "eval_every": 10,
        "seed": 7,
        "sparse_lr": 0.05,  # sniper's built-in [variables] default
        "dense_lr": DENSE_LR,
    }
    assert (float(written["sparse_eps"]), float(written["init_std"])) == (1e-10, 0.01)
    assert written["bottom"].tolist() == DLRM_PARAMS["bottom"]
    assert written["top"].tolist() == DLRM_PARAMS["top"]
    row_of: dict[tuple[str, int], int] = {}
    for index, batch in enumerate(data.batches()):
        for name, rows, signs, ids in jagged_chunks(written, index, batch, names):
            assert ids.min() >= 0 and ids.max() < rows
            for sign, row in zip(signs.tolist(), ids.tolist(), strict=True):
                assert row_of.setdefault((name, sign), row) == row  # the same row every time
        assert np.array_equal(written[f"dense_{index}"], batch.dense)
        assert np.array_equal(written[f"labels_{index}"], batch.labels)
    for name, rows in zip(names, written["rows"], strict=True):
        used = [row for (n, _), row in row_of.items() if n == name]
        assert len(set(used)) == len(used) == rows  # no two signs share a row, none is idle


def test_the_job_trains_the_same_dlrm(tmp_path: Path) -> None:
    workload = load_workload("seed_ctr")
    data = SyntheticCtr(workload, num_batches=2, scale=0.002, seed=0)
    settings = job_settings("inprocess", model="dlrm")
    config, _ = write_job(tmp_path, workload, data, 5, "inprocess", settings)
    loaded = load_train_config(config, {})
    model = ModelConfig.from_table(loaded.model)
    assert model.factory == "dlrm" and model.params == dict(DLRM_PARAMS)
    assert (model.optimizer, model.lr, loaded.seed) == ("adam", DENSE_LR, 5)
    assert job_settings("inprocess", model="deepfm")["model"] == {"factory": "deepfm"}


def test_the_peers_held_out_auc_is_counted_as_sniper_s_report_counts_it() -> None:
    """The second half of the held-out batches (the 2nd, 4th... of 40 batches: 4 held out,
    the last 2 counted), through the same binned AUC."""
    workload = load_workload("seed_ctr")
    data = SyntheticCtr(workload, num_batches=40, scale=0.002, seed=0)
    held = [b for i, b in enumerate(data.batches()) if i % EVAL_EVERY == EVAL_EVERY - 1]
    rng = np.random.default_rng(0)
    predictions = [rng.random(len(b.labels)).tolist() for b in held]
    expected = StreamingAuc()
    for batch, probs in zip(held[2:], predictions[2:], strict=True):
        expected.update(batch.labels, np.asarray(probs))
    assert held_out_auc(data, EVAL_EVERY, predictions) == expected.value()
    assert held_out_auc(data, EVAL_EVERY, [b.labels.tolist() for b in held]) == 1.0
    with pytest.raises(RuntimeError, match="scored 3 held-out batches, not 4"):
        held_out_auc(data, EVAL_EVERY, predictions[:3])


def test_the_bench_prints_both_rates_and_both_aucs_at_the_same_step(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The two sides stood in for by their results: the table has the peer's row and the
    ratio against the issue's target, the AUC table each side's AUC and the difference."""
    models: list[str] = []

    def job(
        workload: Any,
        data: Any,
        seed: int,
        launcher: str,
        wire: str,
        model: str,
        limit: bool = False,
        workers: int | None = None,
    ) -> Any:
        models.append(model)
        auc = 0.7512 if launcher == "inprocess" else 0.7402
        return _e2e._Run(TrainReport(steps=18, examples_per_second=3000.0, eval_auc=auc), 1.0)

    peer_calls: list[tuple[int, int]] = []

    def peer(workload: Any, data: Any, threads: int, *, eval_every: int, seed: int) -> Any:
        peer_calls.append((eval_every, seed))
        return DlrmPeerRun(examples_per_second=1500.0, batches=18, eval_auc=0.7500)

    monkeypatch.setattr(_e2e, "_sniper", job)
    monkeypatch.setattr(_e2e, "torchrec_python", lambda: "python")
    monkeypatch.setattr(_e2e, "run_torchrec_dlrm", peer)
    argv = ["bench", "e2e", "--model", "dlrm", "--peer", "torchrec", "--scale", "0.002"]
    assert main([*argv, "--batches", "20", "--seed", "4"]) == 0
    assert models == ["dlrm"] * 3 and peer_calls == [(EVAL_EVERY, 4)]
    out = capsys.readouterr().out
    assert f"peer = {PEER} with 2 threads" in out
    lines = out.splitlines()

    def row(table: list[str], label: str) -> list[str]:
        (found,) = [line for line in table if line.startswith(label + "  ")]
        return found[len(label) :].split()

    one, processes = "sniper, 1 ps in one process", "sniper, 2 ps processes on loopback gRPC"
    rates = lines[
        : lines.index("held-out AUC at the same step (second half of the held-out batches):")
    ]
    # (no ms per batch, limit, efficiency, cores busy or steal: the stand-ins report none)
    assert row(rates, one) == ["3,000", "18", *"-----", "2.00x", ">=", "1.5x:", "meets"]
    assert row(rates, processes) == ["3,000", "18", *"-----", "2.00x", "-"]
    peer_row = row(rates, PEER)
    assert peer_row[:2] == ["1,500", "18"] and peer_row[-6:-3] == ["-", "-", "-"]
    # the host's steal while the peer ran: "-" when no clock tick passed, else a share
    assert peer_row[-2:] == ["1.00x", "-"] and re.fullmatch(r"-|\d+\.\d%", peer_row[-3])
    aucs = lines[len(rates) :]
    limit = f"{AUC_TOLERANCE}:"
    assert row(aucs, one) == ["18", "0.7512", "+0.0012", "|diff|", "<=", limit, "meets"]
    assert row(aucs, processes) == ["18", "0.7402", "-0.0098", "|diff|", "<=", limit, "MISSES"]
    assert row(aucs, PEER) == ["18", "0.7500", "-", "-"]
