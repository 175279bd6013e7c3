"""Several trainer ranks (``num_trainers``) with ``--launcher local``, as real processes.

Two ranks of 128 examples a batch train the batches one rank of 256 does (the same global
batch, so the same number of steps over the same data), each on its own hub, their dense
gradients averaged every step: the same examples, and the held-out AUC within 0.01, for the
numpy MLP and for a torch model. A ``kill -9`` of rank 1 mid-run is a restart of every process
from the latest checkpoint, and the job then ends by itself with what the uninterrupted run
trained, and a resume from a later checkpoint trains each example once. A job that leaves
``num_hubs`` out gets one hub per rank, and resumes so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sniper._bench._chaos import RunningJob
from tests.cluster._sniper import sniper
from tests.data._helpers import write_criteo

MODELS = {
    "mlp": "hidden = [16]\n",
    "torch_mlp": '[model]\nfactory = "torch_mlp"\nlr = 0.003\n[model.params]\nhidden = [16]\n',
}


def _job(root: Path, model: str) -> None:
    write_criteo(root / "day.tsv", 6_000, seed=3)
    write_criteo(root / "eval.tsv", 2_000, seed=4)
    (root / "job.toml").write_text(
        f'data = "criteo:{root / "day.tsv"}"\neval_data = "criteo:{root / "eval.tsv"}"\n'
        "num_ps = 2\nnum_hubs = 2\nepochs = 2\nprefetch = 1\nprogress = false\nworkers = 1\n"
        'launcher = "local"\n' + MODELS[model] + "[variables.default]\ndim = 8\n"
    )


def _train(root: Path, name: str, *args: str) -> tuple[RunningJob, dict[str, Any]]:
    job = RunningJob(root, "--config", "job.toml", "--output", f"{name}.json", *args)
    try:
        assert job.finish() == 0, job.tail()
    finally:
        job.stop()
    assert not job.survivors()
    return job, json.loads((root / f"{name}.json").read_text())


@pytest.mark.parametrize("model", list(MODELS))
def test_two_ranks_train_what_one_does(tmp_path: Path, model: str) -> None:
    _job(tmp_path, model)
    _, one = _train(tmp_path, "one", "--batch-size", "256")
    job, two = _train(tmp_path, "two", "--batch-size", "128", "--num-trainers", "2")
    assert "started trainer ranks 1-1 of 2" in "".join(job.lines)
    assert two["examples"] == one["examples"]
    assert two["steps"] == one["steps"]
    assert [r["rank"] for r in two["ranks"]] == [0, 1]
    assert sum(r["examples"] for r in two["ranks"]) == two["examples"]
    assert two["examples_per_second"] == pytest.approx(
        sum(r["examples_per_second"] for r in two["ranks"])
    )
    assert two["allreduce_bytes"] > 0 and two["ops"]["AllReduce"]["count"] >= two["steps"]
    # Each rank says how busy its machine was (None only for a window under 0.1 s).
    assert all("cores_busy" in r for r in two["ranks"])
    assert one["eval_data_auc"] > 0.6
    assert abs(two["eval_data_auc"] - one["eval_data_auc"]) < 0.01


def test_local_sgd_trains_every_example_and_averages_every_k_steps(tmp_path: Path) -> None:
    _job(tmp_path, "mlp")
    _, one = _train(tmp_path, "one", "--batch-size", "256")
    _, local = _train(
        tmp_path,
        "local",
        *("--batch-size", "128", "--num-trainers", "2", "--sync", "local_sgd"),
        *("--sync-every", "4"),
    )
    assert local["examples"] == one["examples"]
    assert sum(r["examples"] for r in local["ranks"]) == local["examples"]
    # The ranks count the steps after the last batch up to the next average, which ends the
    # job: one average every 4 steps, the last one included, and one more (the end's) at most.
    assert one["steps"] <= local["steps"] < one["steps"] + 4
    assert local["ops"]["AllReduce"]["count"] == (local["steps"] + 1) // 4
    assert local["allreduce_bytes"] > 0
    assert abs(local["eval_data_auc"] - one["eval_data_auc"]) < 0.02


def test_kill_9_of_rank_1_restarts_the_ranks(tmp_path: Path) -> None:
    _job(tmp_path, "mlp")
    args = ("--batch-size", "128", "--num-trainers", "2", "--checkpoint-every", "10")
    _, expected = _train(tmp_path, "reference", *args, "--checkpoint-dir", "ck-reference")
    job = RunningJob(
        tmp_path,
        *("--config", "job.toml", "--output", "killed.json", *args),
        *("--checkpoint-dir", "ck-killed"),
    )
    try:
        job.wait_until((tmp_path / "ck-killed" / "latest").is_file, "a checkpoint")
        job.kill("trainer 1")
        assert job.finish() == 0, job.tail()
    finally:
        job.stop()
    assert not job.survivors()
    report = json.loads((tmp_path / "killed.json").read_text())
    err = "".join(job.stderr)
    assert report["restarts"] >= 1, err[-3000:]
    assert "trainer 1 died" in err
    for key in ("steps", "examples", "eval_data_examples"):
        assert report[key] == expected[key], key
    assert abs(report["eval_data_auc"] - expected["eval_data_auc"]) < 0.01


def test_a_rank_that_fails_on_its_data_ends_the_job_without_a_restart(tmp_path: Path) -> None:
    """Rank 1's hub reads a label of 2 (a user's table, one file a hub): rank 1 says so in one
    line of its own, and rank 0 ends the job naming it, at once. Before, the rank's exit
    counted as a death: the job restarted three times to the same row and ended saying that
    trainer 1 had died."""
    data = tmp_path / "events"
    data.mkdir()
    rng = np.random.default_rng(0)
    for index, labels in enumerate((rng.integers(0, 2, 2_000), np.full(2_000, 2))):
        table = pa.table(
            {
                "user": pa.array([f"u{i}" for i in rng.integers(0, 300, 2_000)]),
                "price": pa.array(rng.exponential(20, 2_000)),
                "clicked": pa.array(labels),
            }
        )
        pq.write_table(table, data / f"part-{index}.parquet")
    (tmp_path / "job.toml").write_text(
        f'data = "parquet:{data}"\nbatch_size = 128\nnum_ps = 1\nnum_hubs = 2\n'
        'progress = false\nworkers = 1\nlauncher = "local"\nhidden = [8]\n'
        '[features]\nlabel = "clicked"\nsparse = ["user"]\ndense = ["price"]\n'
        "[variables.default]\ndim = 4\n"
    )
    job = RunningJob(
        tmp_path,
        *("--config", "job.toml", "--num-trainers", "2", "--checkpoint-dir", "ck"),
    )
    try:
        assert job.finish() == 1, job.tail()
    finally:
        job.stop()
    assert not job.survivors()
    errors = [line for line in job.stderr if line.startswith("sniper: error:")]
    assert len(errors) == 2, job.tail()
    assert errors[0].startswith("sniper: error: trainer rank 1: hub ")
    assert "part-1.parquet: row 0: label column 'clicked' is 2" in errors[0]
    assert errors[1].startswith("sniper: error: trainer 1 failed on the error printed above")
    assert "restarting" not in "".join(job.stderr)


def test_hubs_one_per_rank_and_a_resume_from_a_later_checkpoint(tmp_path: Path) -> None:
    """A job of two ranks that leaves ``num_hubs`` out gets a hub per rank, which its
    checkpoints record and its resume, leaving it out again, keeps. Resumed from its second
    checkpoint, it trains what is left: the checkpoint holds each hub's position as the rank
    that reads it had it, not a copy that another rank gathered at the first checkpoint (with
    which the hub read the batches between the two checkpoints again)."""
    write_criteo(tmp_path / "day.tsv", 2_000, seed=3)
    (tmp_path / "job.toml").write_text(
        f'data = "criteo:{tmp_path / "day.tsv"}"\nbatch_size = 128\nnum_ps = 1\nprefetch = 1\n'
        "progress = false\nworkers = 1\nhidden = [8]\n[variables.default]\ndim = 4\n"
    )
    ranks = ("--num-trainers", "2")
    checkpoints = ("--checkpoint-dir", "ck", "--checkpoint-every", "2", "--max-steps", "4")
    job, first = _train(tmp_path, "first", *ranks, *checkpoints)
    assert "started 2 hub(s)" in "".join(job.lines)
    assert first["config"]["num_hubs"] == 2
    assert first["steps"] == 4
    more = ("--num-hubs", "3", "--resume", "ck")
    refused = sniper(tmp_path, "train", "--config", "job.toml", *ranks, *more)
    assert refused.returncode == 2
    assert "num_hubs 2 -> 3 (the checkpoint fixed these" in refused.stderr
    _, resumed = _train(tmp_path, "resumed", *ranks, "--resume", "ck")
    assert resumed["resumed_from_step"] == 4
    assert resumed["steps"] == 8  # 16 batches (15 of 128 and one of 80), two a step
    assert resumed["examples"] == 2_000  # the checkpoint's and the rest, each once
