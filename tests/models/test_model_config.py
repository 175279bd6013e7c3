"""The ``[model]`` table: a model by name or import path with its params, the dense training
settings handed to the factories that take them, and the numpy MLP's top-level ``hidden``
and ``lr`` kept working beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sniper.cluster import TrainConfig
from sniper.models import MlpModel, ModelConfig, ModelInputs, open_model
from tests.cluster._sniper import sniper
from tests.models._linear import Linear

INPUTS = ModelInputs({"a": 4, "b": 2}, dense_features=3)


def config(**values: Any) -> TrainConfig:
    return TrainConfig(progress=False, **values)


def test_without_a_model_table_the_job_trains_the_numpy_mlp_of_hidden_and_lr() -> None:
    model = config().model_config()
    assert model == ModelConfig(factory="mlp", params={"hidden": [64]})
    legacy = config(hidden=(16, 8), lr=0.01).model_config()
    assert legacy.params == {"hidden": [16, 8]} and legacy.lr == 0.01
    opened = legacy.open(INPUTS, seed=3)
    assert isinstance(opened, MlpModel) and opened.network._adam.lr == 0.01
    assert [w.shape for w in opened.network.weights] == [(9, 16), (16, 8), (8, 1)]


def test_the_model_table_names_the_factory_its_params_and_the_dense_settings() -> None:
    model = config(model={"factory": "mlp", "params": {"hidden": [8]}, "lr": 0.05}).model_config()
    assert model.params == {"hidden": [8]} and model.lr == 0.05
    assert model.to_dict() == {
        "factory": "mlp",
        "params": {"hidden": [8]},
        "optimizer": "",
        "lr": 0.05,
        "device": "",
    }
    assert ModelConfig.from_table(model.to_dict()) == model
    # The same value given both ways is no contradiction.
    assert config(lr=0.05, model={"lr": 0.05}).model_config().lr == 0.05


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"lr": 0.01, "model": {"lr": 0.001}},
            r"lr = 0.01 and \[model\] lr = 0.001 disagree; keep one",
        ),
        (
            {"hidden": (32,), "model": {"params": {"hidden": [8]}}},
            r"hidden = \[32\] and \[model\] params.hidden = \[8\] disagree; keep one",
        ),
        (
            {"hidden": (32,), "model": {"factory": "dlrm"}},
            r"hidden = \[32\] is the numpy mlp's layers; with \[model\] factory = 'dlrm' give "
            r"the layers in \[model\] params",
        ),
        ({"model": {"layers": 2}}, r"\[model\]: unknown key 'layers'; known keys: device, "),
        ({"model": {"lr": "fast"}}, r"model.lr must be a finite number, got 'fast'"),
        ({"model": {"device": "tpu"}}, r"model.device must be cpu, cuda, cuda:N or auto"),
        ({"model": {"factory": ""}}, r"model.factory must name a model"),
        ({"model": {"lr": -1.0}}, r"model.lr must be positive"),
    ],
)
def test_a_model_table_that_contradicts_itself_or_the_top_level_is_refused(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        config(**values)


def test_settings_go_to_the_factories_that_declare_them_and_no_further() -> None:
    mlp = open_model("mlp", INPUTS, {"hidden": [4]}, lr=0.5, seed=1, threads=1)
    assert isinstance(mlp, MlpModel) and mlp.network._adam.lr == 0.5
    # tests.models._linear:build takes **params only: the optimizer is the model's own.
    linear = open_model("tests.models._linear:build", INPUTS, {"lr": 0.5}, seed=1, threads=2)
    assert isinstance(linear, Linear) and linear.lr == 0.5
    with pytest.raises(ValueError, match=r"model 'mlp' takes no optimizer \(it builds a "):
        open_model("mlp", INPUTS, {}, optimizer="sgd")
    with pytest.raises(ValueError, match="model 'mlp' takes no device"):
        open_model("mlp", INPUTS, {}, device="cuda")
    with pytest.raises(ValueError, match="lr is given twice, in params and as the lr setting"):
        open_model("mlp", INPUTS, {"lr": 0.1}, lr=0.2)


def test_a_model_that_does_not_open_is_one_line_before_any_process_starts(
    tmp_path: Path,
) -> None:
    (tmp_path / "job.toml").write_text(
        'launcher = "local"\nnum_batches = 3\nscale = 0.005\n[model]\nfactory = "nope"\n'
    )
    done = sniper(tmp_path, "train", "--config", "job.toml", timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].startswith(
        "sniper: error: no model named 'nope'; valid names are: mlp"
    )
    assert "started" not in done.stdout + done.stderr
