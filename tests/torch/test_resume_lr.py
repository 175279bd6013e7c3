"""A torch model's learning rate is recorded in its job checkpoint as the one it trained with
(``[model] lr``, or its optimizer's own default), and a resume that changes it is refused
unless ``--allow-change lr`` names it, as the numpy MLP's is. Before, ``job.json`` said the
numpy MLP's ``lr = 0.002`` for every model, and a torch model's new lr went through unasked."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from sniper.cluster import TrainConfig, plan_training
from sniper.cluster._checkpoint import JobCheckpoint
from sniper.cluster._resume import check_resume, job_config
from sniper.data import load_workload
from tests.torch.test_train import job_toml, sniper

USER = "tests.torch._user_model:build"
TINY: dict[str, Any] = {"scale": 0.002, "num_batches": 12, "batch_size": 64, "progress": False}


def _plan(model: dict[str, Any], **keys: Any) -> tuple[TrainConfig, Any]:
    config = TrainConfig(
        **{**TINY, **keys}, variables={"default": {"dim": 4}}, model={"factory": USER, **model}
    )
    return config, plan_training(config, load_workload(config.workload))


@pytest.mark.parametrize(
    ("model", "lr"),
    [
        ({"lr": 0.01}, 0.01),
        ({}, 0.001),  # torch.optim.Adam's default
        ({"optimizer": "adagrad"}, 0.01),  # torch.optim.Adagrad's
        ({"factory": "mlp"}, 0.002),  # the numpy MLP's
        ({"factory": "mlp", "lr": 0.01}, 0.01),
    ],
)
def test_a_checkpoint_records_the_lr_the_model_trains_with(
    model: dict[str, Any], lr: float
) -> None:
    _, plan = _plan(model)
    assert job_config(TrainConfig(), plan)["lr"] == lr


def test_a_top_level_lr_reaches_a_torch_model_and_is_recorded() -> None:
    config, plan = _plan({}, lr=0.05)
    assert job_config(config, plan)["lr"] == 0.05


def _checkpoint(tmp_path: Path, config: TrainConfig, plan: Any, spec_lr: float) -> JobCheckpoint:
    trainer = {"model_spec": dataclasses.replace(plan.model_config, lr=spec_lr).to_dict()}
    return JobCheckpoint(tmp_path, 4, 1, 1, {}, trainer, [], job_config(config, plan))


def test_a_changed_torch_lr_is_refused_unless_allowed(tmp_path: Path) -> None:
    config, plan = _plan({"lr": 0.01})
    checkpoint = _checkpoint(tmp_path, config, plan, 0.01)
    check_resume(checkpoint, config, plan)
    changed, replanned = _plan({"lr": 0.02})
    with pytest.raises(
        ValueError, match=r"lr 0\.01 -> 0\.02 \(to go on with the new values: --allow-change lr\)"
    ):
        check_resume(checkpoint, changed, replanned)
    check_resume(checkpoint, dataclasses.replace(changed, allow_change=("lr",)), replanned)
    default, planned = _plan({})
    with pytest.raises(ValueError, match=r"lr 0\.01 -> 0\.001 \(to go on"):
        check_resume(checkpoint, default, planned)


def test_an_older_checkpoint_of_a_torch_model_is_read_by_the_lr_it_trained_with(
    tmp_path: Path,
) -> None:
    """An older sniper recorded ``lr = 0.002`` (the numpy MLP's default) for any model; the
    ``[model] lr`` recorded with the model says what it trained with."""
    config, plan = _plan({"lr": 0.01})
    older = _checkpoint(tmp_path, config, plan, 0.01)
    older.config["lr"] = 0.002
    check_resume(older, config, plan)
    with pytest.raises(ValueError, match=r"lr 0\.01 -> 0\.02 \(to go on"):
        check_resume(older, *_plan({"lr": 0.02}))
    default, planned = _plan({})
    at_default = _checkpoint(tmp_path, default, planned, 0.0)
    at_default.config["lr"] = 0.002
    check_resume(at_default, default, planned)  # both at Adam's own default


def test_sniper_train_records_and_checks_a_torch_models_lr(tmp_path: Path) -> None:
    model = {"factory": USER, "params": {"hidden": 8}, "lr": 0.01}
    (tmp_path / "job.toml").write_text(
        job_toml(model, **TINY, checkpoint_dir="ck", checkpoint_every=5)
    )
    done = sniper(tmp_path, "train", "--config", "job.toml")
    assert done.returncode == 0, done.stderr[-3000:]
    job = json.loads(next((tmp_path / "ck").glob("step-*/job.json")).read_text())
    assert job["config"]["lr"] == 0.01

    (tmp_path / "job.toml").write_text(job_toml({**model, "lr": 0.02}, **TINY))
    done = sniper(tmp_path, "train", "--config", "job.toml", "--resume", "ck")
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.rstrip().endswith(
        "lr 0.01 -> 0.02 (to go on with the new values: --allow-change lr)"
    ), done.stderr[-3000:]
