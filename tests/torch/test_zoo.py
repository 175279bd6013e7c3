"""The zoo by name (sniper's own ``sniper.models`` entry points), each model's shape, the
widths DLRM and DeepFM need, and a user's model registered by an entry point of its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sniper.cluster import load_train_config
from sniper.models import ModelInputs, model_names, open_model
from sniper.torch import TorchModel
from sniper.torch.models import DLRM, DCNv2, DeepFM, MMoE, TorchMlp, WideDeep
from tests.torch._user_model import UserModel

INPUTS = ModelInputs({"a": 4, "b": 4, "c": 4}, dense_features=3)
ZOO = {
    "torch_mlp": TorchMlp,
    "dlrm": DLRM,
    "deepfm": DeepFM,
    "dcn_v2": DCNv2,
    "wide_deep": WideDeep,
    "mmoe": MMoE,
}


@pytest.mark.parametrize(("name", "cls"), ZOO.items())
def test_each_zoo_model_opens_by_name_and_takes_a_step(name: str, cls: type[TorchModel]) -> None:
    model = open_model(name, INPUTS, {}, optimizer="sgd", lr=0.1, seed=0, threads=1)
    assert type(model) is cls
    x = np.random.default_rng(0).normal(size=(8, INPUTS.width)).astype(np.float32)
    step = model.train_step(x, (x[:, 0] > 0).astype(np.float32))
    assert step.predictions.shape == (8,) and np.isfinite(step.loss)
    assert {k: v.shape for k, v in step.input_grads.items()} == dict.fromkeys("abc", (8, 4))
    step.update()


SEQUENCE = ModelInputs({"a": 4, "b": 4}, dense_features=3, sequences={"s": 4})
AS_POOLED = ModelInputs({"a": 4, "b": 4, "s": 4}, dense_features=3)
"""The same fields with ``s`` pooled: the zoo takes a sequence as its mean, so the two build
the same layers (same seed, same widths, same order) and score alike."""


def _jagged(batch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A sequence block with lengths 0 to 4 (example 0 empty)."""
    lengths = rng.integers(0, 5, size=batch)
    lengths[0] = 0
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return rng.normal(size=(int(offsets[-1]), 4)).astype(np.float32), offsets


@pytest.mark.parametrize("name", ZOO)
def test_each_zoo_model_takes_a_sequence_as_its_mean(name: str) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(8, SEQUENCE.width)).astype(np.float32)
    values, offsets = _jagged(8, rng)
    model = open_model(name, SEQUENCE, {}, optimizer="sgd", lr=0.1, seed=0, threads=1)
    pooled = open_model(name, AS_POOLED, {}, optimizer="sgd", lr=0.1, seed=0, threads=1)

    means = np.zeros((8, 4), np.float32)
    for b in range(8):
        if offsets[b + 1] > offsets[b]:
            means[b] = values[offsets[b] : offsets[b + 1]].mean(0)
    with_means = np.concatenate([x[:, :8], means, x[:, 8:]], axis=1)
    np.testing.assert_allclose(
        model.predict(x, sequences={"s": (values, offsets)}),
        pooled.predict(with_means),
        rtol=1e-5,
        atol=1e-6,
    )

    step = model.train_step(x, (x[:, 0] > 0).astype(np.float32), sequences={"s": (values, offsets)})
    assert np.isfinite(step.loss)
    grads = step.input_grads
    assert {k: v.shape for k, v in grads.items()} == {
        "a": (8, 4),
        "b": (8, 4),
        "s": (len(values), 4),
    }
    reference = pooled.train_step(with_means, (x[:, 0] > 0).astype(np.float32)).input_grads["s"]
    for b in range(8):  # each value gets its example's mean's gradient over the length
        rows = grads["s"][offsets[b] : offsets[b + 1]]
        np.testing.assert_allclose(
            rows,
            np.broadcast_to(reference[b] / max(len(rows), 1), rows.shape),
            rtol=1e-4,
            atol=1e-7,
        )
    assert np.abs(grads["s"]).sum() > 0
    step.update()


@pytest.mark.parametrize("name", ["dlrm", "deepfm"])
def test_the_dot_interactions_need_one_embedding_width(name: str) -> None:
    uneven = ModelInputs({"a": 8, "b": 8, "c": 4}, dense_features=2)
    with pytest.raises(ValueError, match=rf"{name} needs every variable of one embedding width"):
        open_model(name, uneven, {})
    with pytest.raises(ValueError, match=r"most are 8 but c: 4: set one dim in \[variables\]"):
        open_model(name, uneven, {})
    sequence = ModelInputs({"a": 8, "b": 8}, dense_features=2, sequences={"s": 6})
    with pytest.raises(ValueError, match=r"most are 8 but s: 6: set one dim in \[variables\]"):
        open_model(name, sequence, {})


def test_dlrm_without_dense_features_interacts_the_embeddings_alone() -> None:
    model = open_model("dlrm", ModelInputs({"a": 4, "b": 4}, 0), {"top": [8]})
    assert isinstance(model, DLRM)
    assert model.predict(np.ones((3, 8), dtype=np.float32)).shape == (3,)


def test_a_users_model_registered_by_an_entry_point_opens_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "theirmodels-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: theirmodels\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[sniper.models]\ntheirs = tests.torch._user_model:UserModel\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "theirs" in model_names()
    model = open_model("theirs", INPUTS, {"hidden": 8}, optimizer="adagrad", lr=0.05)
    assert isinstance(model, UserModel)
    assert model.optimizer.param_groups[0]["lr"] == 0.05


CONFIGS = sorted((Path(__file__).resolve().parents[2] / "experiments" / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_each_shipped_config_opens_its_model_on_criteos_columns(path: Path) -> None:
    """The widths its [variables] give Criteo's C1..C26 fit its model (DLRM's and DeepFM's
    one width included), with 13 dense features."""
    config = load_train_config(path, {})
    spec = config.model_spec()
    dims = {f"C{i}": spec.overrides.get(f"C{i}", spec.default).dim for i in range(1, 27)}
    model = config.model_config().open(ModelInputs(dims, 13), threads=1)
    assert model.predict(np.zeros((2, model.inputs.width), np.float32)).shape == (2,)
