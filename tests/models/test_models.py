"""The dense-model seam: models open by name or import path, and the trainer trains any
DenseModel it is given (here one written against the interface alone)."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from sniper.data import SyntheticCtr, load_workload
from sniper.models import MODEL_NAMES, MlpModel, ModelError, ModelInputs, model_names, open_model
from sniper.roles import HubConfig, HubRole, PsCluster, PsEngine, PsRole, Trainer, TrainerConfig
from sniper.scheduler import open_scheduler
from tests.models._linear import Linear
from tests.roles._roles import created

INPUTS = ModelInputs({"a": 4, "b": 2}, dense_features=3)


def test_the_input_layout_gives_each_variable_its_columns_then_the_dense_features() -> None:
    assert INPUTS.columns == {"a": (0, 4), "b": (4, 6)}
    assert (INPUTS.embedding_width, INPUTS.width) == (6, 9)
    with pytest.raises(ValueError, match=r"embedding widths must be at least 1, got \{'b': 0\}"):
        ModelInputs({"a": 4, "b": 0}, 3)


def test_the_numpy_mlp_is_the_built_in_default() -> None:
    assert MODEL_NAMES == ("mlp",) and model_names()[0] == "mlp"
    model = open_model("mlp", INPUTS, {"hidden": [8], "lr": 0.01, "seed": 1})
    assert isinstance(model, MlpModel) and model.network.weights[0].shape == (9, 8)
    inputs = np.random.default_rng(0).normal(size=(5, 9)).astype(np.float32)
    labels = np.array([0, 1, 1, 0, 1], dtype=np.float32)
    step = model.train_step(inputs, labels)
    assert set(step.input_grads) == {"a", "b"}
    assert step.input_grads["a"].shape == (5, 4) and step.input_grads["b"].shape == (5, 2)
    assert step.predictions.shape == (5,) and step.loss > 0
    before = model.predict(inputs)
    step.update()
    assert not np.array_equal(before, model.predict(inputs))


def test_a_model_opens_from_an_import_path_with_its_params() -> None:
    model = open_model("tests.models._linear:build", INPUTS, {"lr": 0.5})
    assert isinstance(model, Linear) and model.lr == 0.5


@pytest.mark.parametrize(
    ("factory", "params", "error", "message"),
    [
        ("nope", {}, LookupError, "no model named 'nope'; valid names are: mlp"),
        (
            "tests.models._linear.build",
            {},
            LookupError,
            r"valid names are: mlp.*; a factory of your own is named module:attribute "
            r"\(tests.models._linear:build\)$",
        ),
        ("mymodel.py", {}, LookupError, r"no model named 'mymodel.py'; valid names are: mlp[^;]*$"),
        ("no_such_module:build", {}, LookupError, "cannot import no_such_module"),
        ("tests.models._linear:missing", {}, LookupError, "has no callable 'missing'"),
        ("mlp", {"depth": 3}, ValueError, "model 'mlp' does not take these params"),
        ("tests.models._linear:not_a_model", {}, ValueError, "returned object, not a"),
        (":build", {}, LookupError, "model factory ':build' must be module:attribute"),
        (
            "tests.models._linear:raises",
            {},
            ModelError,
            "^model 'tests.models._linear:raises' raised KeyError: 'missing'$",
        ),
        ("tests.models._linear:refuses", {}, ValueError, "^refuses: width 3 is too small$"),
        (
            "tests.models._broken_module:build",
            {},
            ModelError,
            "importing tests.models._broken_module raised ZeroDivisionError: division by zero",
        ),
    ],
)
def test_a_model_that_does_not_open_says_why(
    factory: str, params: dict[str, int], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        open_model(factory, INPUTS, params)


def test_the_mlp_predicts_each_label_with_the_gradient_of_the_mean_loss() -> None:
    """Two labels: one logit column each over shared layers; the loss is the mean over the
    examples and the labels, and the input gradient is that loss's (finite differences)."""
    two = ModelInputs({"a": 4, "b": 2}, 3, labels=("click", "buy"))
    model = open_model("mlp", two, {"hidden": [8], "seed": 2})
    rng = np.random.default_rng(1)
    inputs = rng.normal(size=(6, 9)).astype(np.float32)
    labels = rng.integers(0, 2, size=(6, 2)).astype(np.float32)

    def loss(x: np.ndarray) -> float:
        probs = model.predict(x.astype(np.float32)).astype(np.float64)
        return float(-np.mean(labels * np.log(probs) + (1 - labels) * np.log1p(-probs)))

    step = model.train_step(inputs, labels)
    assert step.predictions.shape == (6, 2)
    assert step.loss == pytest.approx(loss(inputs), rel=1e-4)
    eps = 1e-2
    for row, column in [(0, 0), (3, 2), (5, 5)]:
        up, down = inputs.copy(), inputs.copy()
        up[row, column] += eps
        down[row, column] -= eps
        numeric = (loss(up) - loss(down)) / (2 * eps)
        name = "a" if column < 4 else "b"
        analytic = step.input_grads[name][row, column - two.columns[name][0]]
        assert analytic == pytest.approx(numeric, rel=2e-2, abs=1e-5), (row, column)


@pytest.mark.anyio
async def test_the_trainer_trains_a_model_written_against_the_interface() -> None:
    """Every training step's gradients reach the ps and the model's update runs once per
    step; held-out batches are scored by the model's predict."""
    reader = SyntheticCtr(
        load_workload("seed_ctr"), num_batches=30, scale=0.005, seed=3, batch_size=32
    )
    dims = dict.fromkeys(reader.variables, 4)
    model = open_model(
        "tests.models._linear:build", ModelInputs(dims, reader.dense_features), {"lr": 0.5}
    )
    assert isinstance(model, Linear)
    async with open_scheduler("inline", workers=1) as scheduler:
        ps = PsRole(PsEngine(scheduler))
        await created(ps, reader)
        cluster = PsCluster([ps])
        hub = HubRole(reader, cluster, HubConfig())
        config = TrainerConfig(eval_every=5, progress=False)
        trainer = Trainer([("hub", hub)], cluster, dims, reader.dense_features, config, model=model)
        async with anyio.create_task_group() as group:
            group.start_soon(hub.run)
            report = await trainer.run()
            group.cancel_scope.cancel()
    assert report.steps == model.updates == 24 and report.eval_batches == 6
    assert np.any(model.weights != 0)
    assert report.train_logloss is not None and report.eval_auc_whole_run is not None
    assert report.train_logloss > 0 and 0 < report.eval_auc_whole_run < 1


def test_a_model_built_for_other_inputs_is_refused() -> None:
    model = Linear(ModelInputs({"a": 4}, 2))
    with pytest.raises(ValueError, match="the model was built for"):
        Trainer([("hub", None)], None, {"a": 8}, 2, TrainerConfig(), model=model)  # type: ignore[list-item,arg-type]
