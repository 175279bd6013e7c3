"""A whole training job in one process, on asyncio and on trio (the ``anyio_backend``
fixture), through ``sniper.testing.local_cluster``: the same create-then-train path as
``sniper train``, over the in-process transport; and over gRPC on asyncio for comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

from sniper.cluster import DataShape, ModelSpec, TableSpec, probe_data
from sniper.data import Reader, load_workload
from sniper.roles import TrainerConfig, TrainingError
from sniper.testing import local_cluster
from tests.data._helpers import criteo_line, write_criteo

pytestmark = pytest.mark.anyio

BATCH = 128
LINES = 6_000


def criteo_job(path: Path) -> tuple[Reader, DataShape, dict[str, TableSpec]]:
    shape, reader = probe_data(
        f"criteo:{path}", workload=load_workload("seed_ctr"), scale=1.0, batch_size=BATCH, seed=0
    )
    tables = ModelSpec.parse({"default": {"dim": 8}}, default_dim=8).resolve(shape)
    return reader, shape, tables


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_criteo(tmp_path_factory.mktemp("criteo") / "day.tsv", LINES, seed=5)


async def test_a_job_trains_in_one_process_and_reads_every_batch_once(day: Path) -> None:
    reader, shape, tables = criteo_job(day)
    async with local_cluster(reader, tables, shape.dense_features, num_ps=2, num_hubs=2) as job:
        report = await job.train(TrainerConfig(progress=False, eval_every=5, lr=0.01))
        stats = [await member.stats() for member in job.cluster.members]
    batches = -(-LINES // BATCH)  # each hub reads whole batches of its share
    assert report.steps + report.eval_batches in (batches, batches + 1)
    assert report.examples + report.eval_batches * BATCH >= LINES - BATCH
    assert report.eval_auc is not None and report.eval_auc > 0.6  # the planted signal is learnt
    # Every variable lives on exactly one of the two ps, and every fed batch was freed.
    held = sorted(v.name for s in stats for v in s.variables)
    assert held == sorted(tables)
    assert all(s.pending_batches == 0 for s in stats)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # grpclib runs on asyncio only
async def test_grpc_and_inprocess_train_the_same_batches(day: Path) -> None:
    reports = {}
    for transport in ("inprocess", "grpc"):
        reader, shape, tables = criteo_job(day)
        async with local_cluster(
            reader, tables, shape.dense_features, num_ps=2, transport=transport
        ) as job:
            reports[transport] = await job.train(TrainerConfig(progress=False, prefetch=1))
    one, other = reports["inprocess"], reports["grpc"]
    assert (one.steps, one.eval_batches, one.examples) == (
        other.steps,
        other.eval_batches,
        other.examples,
    )
    # One hub hands out its batches in reading order on both; pushes overlap the next lookup
    # by timing (asynchronous training), so the models agree closely but not bit for bit.
    assert one.eval_auc == pytest.approx(other.eval_auc, abs=0.02)


async def test_a_bad_line_ends_training_with_the_hubs_reason(tmp_path: Path) -> None:
    good = criteo_line("1", ["1"] * 13, ["ab"] * 26)
    # The first file is read before training to learn the data's shape; the second is bad.
    (tmp_path / "a.tsv").write_text(good * 300)
    bad = tmp_path / "b.tsv"
    bad.write_text(good * 2 + criteo_line("1", ["x"] + ["1"] * 12, ["ab"] * 26) + good)
    reader, shape, tables = criteo_job(tmp_path)
    async with local_cluster(reader, tables, shape.dense_features, num_ps=1) as job:
        with pytest.raises(TrainingError) as info:
            await job.train()
        assert not job.hubs[0].healthy
    assert str(info.value) == (
        "hub hub-0 failed on ReadSample: UNAVAILABLE: hub 0 stopped reading its data: "
        f"CriteoFormatError: {bad}:3: I1 must be a 64-bit integer or empty, got 'x'"
    )


async def test_max_steps_stops_the_job_and_the_cluster_shuts_down(day: Path) -> None:
    reader, shape, tables = criteo_job(day)
    async with local_cluster(reader, tables, shape.dense_features, num_ps=2) as job:
        report = await job.train(TrainerConfig(progress=False, max_steps=7, eval_every=0))
    assert report.steps == 7
