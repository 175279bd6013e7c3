"""sniper.torch.TorchModel: any nn.Module as the trainer's dense model. Zero-copy inputs, the
numpy MLP's loss and gradients, checkpoints that round-trip exactly, and clear refusals."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from numpy.typing import NDArray

from sniper.models import MlpModel, ModelError, ModelInputs, open_model
from sniper.torch import TorchModel, open_optimizer
from sniper.torch.models import MlpNet, MMoE, TorchMlp
from tests.torch._user_model import TwoTower

INPUTS = ModelInputs({"a": 4, "b": 2}, dense_features=3)
F32 = NDArray[np.float32]


def batch(size: int = 16, seed: int = 0, inputs: ModelInputs = INPUTS) -> tuple[F32, F32]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(size, inputs.width)).astype(np.float32)
    y = (x[:, 0] + x[:, -1] > 0).astype(np.float32)
    return x, y


class Spy(torch.nn.Module):
    """Records where its inputs live."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(INPUTS.width, 1)
        self.seen: list[tuple[str, int, bool]] = []

    def forward(self, embeddings: dict[str, torch.Tensor], dense: torch.Tensor) -> torch.Tensor:
        for name, tensor in [*embeddings.items(), ("dense", dense)]:
            self.seen.append((name, tensor.data_ptr(), tensor.requires_grad))
        return self.linear(torch.cat([*embeddings.values(), dense], dim=1))  # type: ignore[no-any-return]


def test_the_module_sees_views_of_the_input_matrix_as_leaves_that_require_grad() -> None:
    spy = Spy()
    model = TorchModel(spy, torch.optim.SGD(spy.parameters(), lr=0.1), INPUTS)
    x, y = batch()
    spy.seen.clear()
    step = model.train_step(x, y)
    base, row = x.ctypes.data, x.strides[1]
    assert spy.seen == [
        ("a", base, True),
        ("b", base + 4 * row, True),
        ("dense", base + 6 * row, False),
    ]
    assert list(step.input_grads) == ["a", "b"]
    for name, grad in step.input_grads.items():
        assert grad.dtype == np.float32 and grad.flags.c_contiguous
        assert grad.shape == (16, INPUTS.dims[name])


MIXED = ModelInputs({"a": 4, "b": 2}, 3, labels=("click", "stars"), regression=("stars",))
"""A binary label and a regression one."""


def mixed_batch(seed: int) -> tuple[F32, F32]:
    x, click = batch(seed=seed, inputs=MIXED)
    stars = 3.0 + x[:, 1] - 0.5 * x[:, -2]
    return x, np.stack([click, stars], axis=1).astype(np.float32)


@pytest.mark.parametrize(("inputs", "make"), [(INPUTS, batch), (MIXED, mixed_batch)])
def test_the_torch_mlp_takes_the_numpy_mlps_steps(inputs: ModelInputs, make: Any) -> None:
    """Same seed, same initial weights, same loss, input gradients (in the same memory order)
    and Adam: equal to float rounding over several steps; with a regression label too
    (squared error, its value as the prediction)."""
    numpy_model = open_model("mlp", inputs, {"hidden": [8, 4]}, lr=0.01, seed=5)
    torch_model = TorchMlp(inputs, hidden=[8, 4], lr=0.01, seed=5)
    assert isinstance(numpy_model, MlpModel)
    for seed in range(5):
        x, y = make(seed=seed)
        a, b = numpy_model.train_step(x, y), torch_model.train_step(x, y)
        assert abs(a.loss - b.loss) < 1e-5
        np.testing.assert_allclose(a.predictions, b.predictions, atol=1e-5)
        for name in inputs.dims:
            np.testing.assert_allclose(a.input_grads[name], b.input_grads[name], atol=1e-5)
            # Laid out alike: each variable's gradient one contiguous run, as a push reads it.
            assert b.input_grads[name].flags.f_contiguous
            assert b.input_grads[name].strides == a.input_grads[name].strides
        a.update()
        b.update()
    x, _ = make(seed=9)
    np.testing.assert_allclose(numpy_model.predict(x), torch_model.predict(x), atol=1e-5)


@pytest.mark.parametrize(
    ("optimizer", "lr"), [("adam", 0.01), ("SGD", 0.1), ("adagrad", None), ("AdamW", 0.01)]
)
def test_a_checkpoint_of_module_and_optimizer_round_trips_exactly(
    optimizer: str, lr: float | None
) -> None:
    def fresh() -> TorchModel:
        torch.manual_seed(0)
        module = TwoTower(INPUTS, 8)
        return TorchModel(module, open_optimizer(optimizer, module.parameters(), lr), INPUTS)

    model = fresh()
    for seed in range(3):
        model.train_step(*batch(seed=seed)).update()
    saved = model.state()
    assert all(isinstance(array, np.ndarray) for array in saved.values())
    other = fresh()
    other.load_state(saved)
    again = other.state()
    assert sorted(again) == sorted(saved)
    for name, array in saved.items():
        assert again[name].dtype == array.dtype and np.array_equal(again[name], array), name
    assert (
        other.optimizer.state_dict()["param_groups"] == model.optimizer.state_dict()["param_groups"]
    )
    # ... and training goes on identically from there.
    x, y = batch(seed=7)
    first, second = model.train_step(x, y), other.train_step(x, y)
    assert first.loss == second.loss
    first.update()
    second.update()
    np.testing.assert_array_equal(model.predict(x), other.predict(x))


def test_a_checkpoint_of_another_model_is_refused_naming_the_array() -> None:
    saved = TorchMlp(INPUTS, hidden=[8]).state()
    with pytest.raises(ValueError, match=r"module.layers.0.weight does not fit this model"):
        TorchMlp(INPUTS, hidden=[4]).load_state(saved)
    with pytest.raises(
        ValueError, match=r"lacks module.embedded.0.bias; was it saved by another model"
    ):
        open_model("tests.torch._user_model:build", INPUTS, {}).load_state(saved)


def test_a_factory_returning_a_module_gets_the_configs_optimizer_lr_and_device() -> None:
    model = open_model(
        "tests.torch._user_model:build", INPUTS, {"hidden": 4}, optimizer="adagrad", lr=0.05
    )
    assert isinstance(model, TorchModel) and isinstance(model.module, TwoTower)
    assert isinstance(model.optimizer, torch.optim.Adagrad)
    assert model.optimizer.param_groups[0]["lr"] == 0.05
    assert model.device == torch.device("cpu")
    default = open_model("tests.torch._user_model:build", INPUTS, {}, device="auto")
    assert isinstance(default, TorchModel) and isinstance(default.optimizer, torch.optim.Adam)


def test_the_seed_gives_a_factorys_module_its_initial_weights() -> None:
    def weights(seed: int) -> F32:
        model = open_model("tests.torch._user_model:build", INPUTS, {}, seed=seed)
        assert isinstance(model, TorchModel)
        return model.state()["module.out.weight"]  # type: ignore[return-value]

    assert np.array_equal(weights(1), weights(1)) and not np.array_equal(weights(1), weights(2))


@pytest.mark.parametrize(
    ("factory", "settings", "error", "message"),
    [
        (
            "tests.torch._user_model:wrong_labels",
            {},
            ValueError,
            r"the model TwoTower returns \(2, 2\) logits for a batch of 2; the data has 1 "
            r"label\(s\) \(label\), so it must return \(2, 1\)",
        ),
        (
            "tests.torch._user_model:build",
            {"optimizer": "adamm"},
            LookupError,
            "no torch optimizer named 'adamm'; valid names are: adadelta, adafactor, adagrad",
        ),
        (
            "tests.torch._user_model:build",
            {"device": "cuda"},
            ValueError,
            "device 'cuda': torch sees no GPU here",
        ),
        (
            "tests.torch._user_model:build",
            {"params": {"depth": 2}},
            ValueError,
            "does not take these params",
        ),
    ],
)
def test_a_module_that_does_not_fit_is_refused_when_opened(
    factory: str, settings: dict[str, object], error: type[Exception], message: str
) -> None:
    if settings.get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    params = settings.pop("params", {})
    with pytest.raises(error, match=message):
        open_model(factory, INPUTS, params, **settings)  # type: ignore[arg-type]


def test_threads_size_torchs_pool_on_the_thread_that_runs_the_model() -> None:
    model = TorchMlp(INPUTS, hidden=[4], threads=2)  # the fixture set 1
    model.train_step(*batch()).update()
    assert torch.get_num_threads() == 2


def test_a_multi_task_model_predicts_a_column_per_label_and_learns_both() -> None:
    two = ModelInputs(INPUTS.dims, INPUTS.dense_features, labels=("click", "buy"))
    model = MMoE(two, experts=2, expert_hidden=[8], tower_hidden=[4], lr=0.02)
    x, _ = batch(256, seed=1, inputs=two)
    labels = np.stack([x[:, 0] > 0, x[:, 1] + x[:, 7] > 0], axis=1).astype(np.float32)
    losses = []
    for _ in range(60):
        step = model.train_step(x, labels)
        losses.append(step.loss)
        step.update()
    assert step.predictions.shape == (256, 2)
    assert losses[-1] < 0.6 * losses[0]


class DictMlp(MlpNet):
    """The torch MLP's network fed the dict of embeddings (each variable a leaf)."""

    takes_matrix = False

    def forward(  # type: ignore[override]
        self, embeddings: dict[str, torch.Tensor], dense: torch.Tensor
    ) -> torch.Tensor:
        return self.layers(torch.cat([*embeddings.values(), dense], dim=1))  # type: ignore[no-any-return]


def test_a_module_that_takes_the_matrix_gets_one_leaf_and_the_same_steps() -> None:
    """``takes_matrix``: the same network fed the one matrix takes the same steps as fed the
    dict, and each variable's gradient is a view of the one gradient."""
    by_dict, by_matrix = DictMlp(INPUTS, [8], seed=3), MlpNet(INPUTS, [8], seed=3)
    a = TorchModel(by_dict, torch.optim.Adam(by_dict.parameters(), lr=0.01), INPUTS)
    b = TorchModel(by_matrix, torch.optim.Adam(by_matrix.parameters(), lr=0.01), INPUTS)
    assert (a.takes_matrix, b.takes_matrix) == (False, True)
    for seed in range(3):
        x, y = batch(seed=seed)
        one, other = a.train_step(x, y), b.train_step(x, y)
        assert abs(one.loss - other.loss) < 1e-6
        for name in INPUTS.dims:
            np.testing.assert_allclose(one.input_grads[name], other.input_grads[name], atol=1e-6)
        assert other.input_grads["b"].base is other.input_grads["a"].base
        one.update()
        other.update()
    x, _ = batch(seed=7)
    np.testing.assert_allclose(a.predict(x), b.predict(x), atol=1e-6)


def test_warm_up_calls_each_submodules_own() -> None:
    """The trainer warms the model up before its clock starts; a module with kernels to load
    (the zoo's DLRM) says so with a ``warm_up`` of its own."""

    class Warms(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def warm_up(self) -> None:
            self.calls += 1

    module = Spy()
    module.inner = Warms()
    model = TorchModel(module, torch.optim.SGD(module.parameters(), lr=0.1), INPUTS)
    model.warm_up()
    assert module.inner.calls == 1
    open_model("dlrm", ModelInputs({"a": 4, "b": 4}, dense_features=3), {}).warm_up()


def test_a_resumed_optimizer_keeps_the_lr_it_was_built_with() -> None:
    """The job's lr may change on resume (``--allow-change lr``, or ``[model] lr``): the
    checkpoint's optimizer state comes back, its saved lr does not undo the change."""

    def fresh(lr: float) -> TorchModel:
        torch.manual_seed(0)
        module = TwoTower(INPUTS, 8)
        return TorchModel(module, open_optimizer("adam", module.parameters(), lr), INPUTS)

    model = fresh(0.01)
    model.train_step(*batch()).update()
    other = fresh(0.5)
    other.load_state(model.state())
    assert other.optimizer.param_groups[0]["lr"] == 0.5
    saved, loaded = model.optimizer.state_dict()["state"], other.optimizer.state_dict()["state"]
    for index, values in saved.items():
        assert torch.equal(values["exp_avg"], loaded[index]["exp_avg"])


class Returns(TwoTower):
    """TwoTower whose forward hands back ``shape(logits)`` instead of its logits."""

    def __init__(self, shape: Any) -> None:
        super().__init__(INPUTS, 8)
        self.shape = shape

    def forward(self, embeddings: dict[str, torch.Tensor], dense: torch.Tensor) -> Any:
        return self.shape(super().forward(embeddings, dense))


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        (lambda t: {"logits": t}, "the model Returns returns a dict from forward; it must return"),
        (lambda t: (t,), "the model Returns returns a tuple from forward"),
        (lambda t: t.detach().numpy(), "the model Returns returns a ndarray from forward"),
        (lambda t: t.long(), "the model Returns returns torch.int64 logits; they must be floating"),
    ],
    ids=["dict", "tuple", "numpy", "long"],
)
def test_a_forward_that_returns_no_float_tensor_is_refused_naming_the_model(
    shape: Any, message: str
) -> None:
    module = Returns(shape)
    with pytest.raises(ValueError, match=message):
        TorchModel(module, open_optimizer("adam", module.parameters(), 0.01), INPUTS)


def test_nan_or_inf_logits_stop_the_step_naming_the_model_and_bfloat16_ones_train() -> None:
    """A diverged forward pass is named as the model's, before its gradients reach a push (it
    was an AUC's complaint, or 76 variables' non-finite gradients); logits in bfloat16, as
    under CPU autocast, give float32 predictions."""
    broken = {"scale": 1.0}
    module = Returns(lambda t: t * broken["scale"])
    model = TorchModel(module, open_optimizer("adam", module.parameters(), 0.01), INPUTS)
    x, y = batch()
    for bad in (float("nan"), float("inf")):
        broken["scale"] = bad
        with pytest.raises(
            ModelError, match=r"^the model Returns returned NaN or Inf logits for 16 of 16 "
        ):
            model.train_step(x, y)
    module = Returns(lambda t: t.to(torch.bfloat16))
    model = TorchModel(module, open_optimizer("adam", module.parameters(), 0.01), INPUTS)
    step = model.train_step(x, y)
    step.update()
    assert step.predictions.dtype == np.float32 and model.predict(x).dtype == np.float32


def test_a_forward_or_an_optimizer_that_raises_is_named_as_the_models() -> None:
    """An error in the user's forward pass or optimizer is the model's, not sniper's: it
    comes as a ModelError naming the model and what of it failed, from the original."""
    failing = {"on": False}

    def forward(t: torch.Tensor) -> torch.Tensor:
        if failing["on"]:
            raise RuntimeError("my forward has a bug")
        return t

    module = Returns(forward)
    model = TorchModel(module, open_optimizer("adam", module.parameters(), 0.01), INPUTS)
    failing["on"] = True
    with pytest.raises(
        ModelError, match=r"^the model Returns's forward raised RuntimeError: my forward has a bug$"
    ) as raised:
        model.train_step(*batch())
    assert isinstance(raised.value.__cause__, RuntimeError)
    module = Returns(lambda t: t)
    lbfgs = torch.optim.LBFGS(module.parameters())
    model = TorchModel(module, lbfgs, INPUTS)
    step = model.train_step(*batch())
    with pytest.raises(ModelError, match=r"^the optimizer LBFGS's step raised TypeError: "):
        step.update()


def test_a_forward_that_fails_on_one_example_is_told_of_drop_last() -> None:
    """BatchNorm's training forward fails on a batch of one example, in torch's words only
    (``Expected more than 1 value per channel``); such a batch is a data's last."""
    norm = torch.nn.BatchNorm1d(1)
    module = Returns(norm)
    model = TorchModel(module, open_optimizer("adam", module.parameters(), 0.01), INPUTS)
    model.train_step(*batch(2)).update()
    with pytest.raises(
        ModelError,
        match=r"^the model Returns's forward on a batch of one example \(the data's last, .*"
        r"drop_last = true drops it\) raised ValueError: Expected more than 1 value per channel",
    ):
        model.train_step(*batch(1))


def test_an_optimizer_that_needs_a_closure_is_not_offered() -> None:
    """LBFGS's step computes the loss again through a closure, which a training step does not
    give: it is refused by name when the job opens it, not mid-run by its step."""
    with pytest.raises(LookupError, match=r"^torch optimizer 'LBFGS' needs a closure"):
        open_optimizer("LBFGS", TwoTower(INPUTS, 8).parameters(), 0.1)
