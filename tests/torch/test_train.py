"""The zoo and a user's own module trained end to end on synthetic criteo data: each beats
AUC 0.5 by MARGIN; through ``sniper train --config`` (real processes) for DLRM, DCN-v2 (on
Criteo files) and a user's module named by import path, in this process for the rest. The
torch MLP reaches the numpy MLP's AUC, and ``sniper eval --checkpoint`` rebuilds a torch model
from its checkpoint alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tests
from sniper.cluster import TrainConfig, plan_training
from sniper.data import load_workload
from sniper.roles import TrainReport
from sniper.testing import local_cluster
from sniper.torch import TorchModel
from tests.data._helpers import write_criteo

MARGIN = 0.15
"""Every model's held-out AUC is at least 0.5 + MARGIN (they reach 0.72-0.78 here; the
data's planted model, 0.79)."""
JOB: dict[str, Any] = {
    "workload": "criteo",
    "scale": 0.01,
    "num_batches": 70,
    "batch_size": 256,
    "progress": False,
    "blas_threads": 1,
}
ROOT = Path(tests.__file__).parent.parent


@pytest.fixture
def anyio_backend() -> str:
    """asyncio only: the model runs on a thread of its own whatever the loop, and the job on
    trio is tested elsewhere (tests/cluster); twice here would double these tests' minutes."""
    return "asyncio"


def job_toml(model: dict[str, Any], **extra: Any) -> str:
    lines = [f"{key} = {json.dumps(value)}" for key, value in {**JOB, **extra}.items()]
    lines += ["[variables.default]", "dim = 8", "[model]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in model.items() if key != "params"]
    params = model.get("params", {})
    lines += ["[model.params]", *(f"{k} = {json.dumps(v)}" for k, v in params.items())]
    return "\n".join(lines) + "\n"  # JSON's numbers, strings, lists and bools are TOML's


def sniper(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m sniper ARGS`` with this checkout importable (the user's test package)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "sniper", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        env=os.environ | {"PYTHONPATH": path},
        check=False,
    )


def train_command(tmp_path: Path, model: dict[str, Any], **extra: Any) -> dict[str, Any]:
    (tmp_path / "job.toml").write_text(job_toml(model, **extra))
    done = sniper(tmp_path, "train", "--config", "job.toml", "--output", "report.json")
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads((tmp_path / "report.json").read_text())
    return report


async def train_here(model: dict[str, Any]) -> tuple[TrainReport, TrainConfig]:
    """The job ``sniper train`` would run, in this process: its plan (which opens the
    model) and the trainer on an in-process cluster."""
    config = TrainConfig(**JOB, variables={"default": {"dim": 8}}, model=model)
    plan = plan_training(config, load_workload(config.workload))
    opened = plan.model()
    assert isinstance(opened, TorchModel) or model["factory"] == "mlp"
    async with local_cluster(
        config.open(), plan.tables, plan.data.dense_features, num_ps=1, seed=config.seed
    ) as cluster:
        return await cluster.train(config.trainer(), model=opened), config


@pytest.mark.parametrize(
    ("factory", "params"),
    [
        ("dlrm", {"bottom": [32], "top": [32]}),
        ("tests.torch._user_model:build", {"hidden": 16}),
    ],
)
def test_sniper_train_trains_a_torch_model_named_in_the_config(
    tmp_path: Path, factory: str, params: dict[str, Any]
) -> None:
    report = train_command(tmp_path, {"factory": factory, "params": params, "lr": 0.003})
    assert report["steps"] == 63 and report["config"]["model"]["factory"] == factory
    assert report["eval_auc"] > 0.5 + MARGIN, report["eval_auc"]


FM_ALONE = """\
import torch

class Interactions(torch.nn.Module):
    \"\"\"A factorization machine's pairwise term alone: every weight is an embedding.\"\"\"

    def forward(self, embeddings, dense):
        rows = torch.stack(list(embeddings.values()), dim=1)
        pairs = rows.sum(dim=1).pow(2) - rows.pow(2).sum(dim=1)
        return 0.5 * pairs.sum(dim=1, keepdim=True)

def build(inputs):
    return Interactions()
"""


def test_the_sniper_script_imports_a_model_beside_the_config_that_has_no_dense_weights(
    tmp_path: Path,
) -> None:
    """The ``sniper`` script, unlike ``python -m sniper``, had not the current directory on
    its path (its message said it imported from there), and a module whose weights are all
    embeddings (an FM's interactions, matrix factorization) failed with torch's "optimizer
    got an empty parameter list"."""
    (tmp_path / "mymodels").mkdir()
    (tmp_path / "mymodels" / "fm.py").write_text(FM_ALONE)
    (tmp_path / "job.toml").write_text(job_toml({"factory": "mymodels.fm:build"}, num_batches=30))
    script = Path(sys.executable).parent / "sniper"
    done = subprocess.run(
        [str(script), "train", "--config", "job.toml", "--output", "report.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["steps"] == 27 and report["eval_auc"] > 0.55, report["eval_auc"]


@pytest.mark.anyio
@pytest.mark.parametrize("factory", ["dcn_v2", "deepfm", "wide_deep", "mmoe"])
async def test_each_zoo_model_trains(factory: str) -> None:
    report, _ = await train_here({"factory": factory, "optimizer": "adam", "lr": 0.003})
    assert report.steps == 63
    assert report.eval_auc is not None and report.eval_auc > 0.5 + MARGIN, report.eval_auc


@pytest.mark.anyio
async def test_the_torch_mlp_reaches_the_numpy_mlps_auc() -> None:
    """Same layers, initial weights and Adam: the same AUC to within 0.005 (they agree to
    about 1e-5 here; float rounding may differ elsewhere)."""
    numpy_report, _ = await train_here({"factory": "mlp", "params": {"hidden": [32]}})
    torch_report, _ = await train_here({"factory": "torch_mlp", "params": {"hidden": [32]}})
    numpy_auc, torch_auc = numpy_report.eval_auc, torch_report.eval_auc
    numpy_loss, torch_loss = numpy_report.train_logloss, torch_report.train_logloss
    assert numpy_auc is not None and torch_auc is not None
    assert numpy_loss is not None and torch_loss is not None
    assert numpy_auc > 0.5 + MARGIN
    assert abs(torch_auc - numpy_auc) < 0.005
    assert abs(torch_loss - numpy_loss) < 0.005


def test_sniper_eval_rebuilds_a_torch_model_from_its_checkpoint_alone(tmp_path: Path) -> None:
    write_criteo(tmp_path / "day.tsv", 6_000, seed=3)
    write_criteo(tmp_path / "eval.tsv", 2_000, seed=4)
    report = train_command(
        tmp_path,
        {"factory": "dcn_v2", "params": {"hidden": [16]}, "optimizer": "adagrad", "lr": 0.05},
        data=f"criteo:{tmp_path / 'day.tsv'}",
        eval_data=f"criteo:{tmp_path / 'eval.tsv'}",
        checkpoint_dir="ck",
        checkpoint_every=10,
    )
    assert report["eval_data_auc"] > 0.5 + MARGIN, report["eval_data_auc"]
    job = json.loads(next((tmp_path / "ck").glob("step-*/job.json")).read_text())
    assert job["counters"]["model_spec"] == {
        "factory": "dcn_v2",
        "params": {"hidden": [16]},
        "optimizer": "adagrad",
        "lr": 0.05,
        "device": "",
    }
    done = sniper(
        tmp_path, "eval", "--checkpoint", "ck", "--data", f"criteo:{tmp_path / 'eval.tsv'}"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    row = done.stdout.strip().splitlines()[-1].split()
    assert row[0] == f"{report['eval_data_examples']:,}"
    assert row[1] == f"{report['eval_data_auc']:.4f}"


@pytest.mark.anyio
@pytest.mark.parametrize("factory", ["mmoe", "mlp"])
async def test_a_two_label_model_trains_on_two_label_data_and_reports_each_label(
    factory: str,
) -> None:
    """criteo_two_labels: click (25.6%) and buy (3%). MMoE gives each label its tower, the
    numpy MLP one logit column each; the report scores both labels, and its headline figures
    are the first label's."""
    config = TrainConfig(
        **(JOB | {"workload": "criteo_two_labels", "num_batches": 90}),
        variables={"default": {"dim": 8}},
        model={"factory": factory, "lr": 0.003},
    )
    plan = plan_training(config, load_workload(config.workload))
    assert plan.model_inputs.labels == ("click", "buy")
    async with local_cluster(
        config.open(), plan.tables, plan.data.dense_features, num_ps=1, seed=config.seed
    ) as cluster:
        report = await cluster.train(config.trainer(), model=plan.model())
    assert set(report.per_label) == {"click", "buy"}
    click, buy = report.per_label["click"], report.per_label["buy"]
    assert report.eval_auc == click["eval_auc"] > 0.5 + MARGIN, click
    assert buy["eval_auc"] > 0.6, buy  # 3% positives: fewer to learn from in 81 batches
    assert click["eval_logloss"] != buy["eval_logloss"]


def test_a_bug_in_the_users_forward_is_one_line_naming_the_model_not_sniper(
    tmp_path: Path,
) -> None:
    (tmp_path / "job.toml").write_text(job_toml({"factory": "tests.torch._user_model:fails_later"}))
    done = sniper(tmp_path, "train", "--config", "job.toml")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "sniper: error: the model FailsLater's forward raised RuntimeError: my forward has a "
        "bug; run again with --debug for the traceback"
    )
    assert "Traceback" not in done.stderr
