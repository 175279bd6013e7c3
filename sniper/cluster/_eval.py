"""``sniper eval`` and ``sniper predict``: a data file scored by a job checkpoint's model.

The ps are started and restored from the checkpoint (their variables and widths come from
it), the dense model is built as the checkpoint records (its ``[model]``, saved under
``model_spec``; a checkpoint from before that record: the training config's) and loaded from
its ``trainer.npz``, and every batch of the data is fed,
looked up with release (no gradient) and scored. ``sniper eval`` reports AUC, logloss and
examples/s; ``sniper predict`` (:mod:`sniper.cluster._predict`) writes the scores; both take
this one path (:func:`score_checkpoint`). The first step toward serving a trained model.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TypeVar

import anyio

from sniper._figures import shown
from sniper._table import print_table
from sniper.cluster._checkpoint import JobCheckpoint, load_job
from sniper.cluster._config import TrainConfig
from sniper.cluster._data import probe_data
from sniper.cluster._process import serve_config_command, server_process
from sniper.cluster._report import print_labels
from sniper.cluster._servers import server_config as _server_config
from sniper.cluster._spec import DataShape, model_inputs
from sniper.data import FeatureSpec, Reader, check_data_value, load_workload
from sniper.models import ModelConfig
from sniper.roles import MANIFEST, DataEvaluator, EvalResult, Predictor, PsCluster
from sniper.rpc import PsClient, Security, VariableConfig
from sniper.runtime import log_to_stderr

__all__ = ["run_eval", "score_checkpoint"]

log = logging.getLogger("sniper.eval")

T = TypeVar("T")
Consume = Callable[[DataEvaluator, Predictor, int], Awaitable[T]]
"""What is done with the scoring: ``(evaluator, predict, the checkpoint's step)``."""


def _labels_agree(
    shape: DataShape, labels: tuple[str, ...], regression: tuple[str, ...], *, some: bool
) -> bool:
    """Whether the labels data is read with are the model's: all of them, or (``some``: data
    read with the labels it has) some of them, each a regression target where the model's
    is."""
    if not some:
        return (shape.labels, shape.regression) == (labels, regression)
    read = set(shape.labels)
    return read <= set(labels) and set(shape.regression) == read & set(regression)


def _variables(job: JobCheckpoint) -> dict[str, VariableConfig]:
    """Every variable's configuration, from the ps manifests of the checkpoint."""
    configs = {}
    for index in range(job.num_ps):
        manifest = json.loads((job.ps_directory(index) / MANIFEST).read_text())
        for entry in manifest["variables"]:
            configs[entry["name"]] = VariableConfig.from_dict(entry["config"])
    return configs


def _model_config(job: JobCheckpoint, config: TrainConfig) -> ModelConfig:
    """The ``[model]`` the checkpoint records, else (an older checkpoint) ``config``'s."""
    spec = job.trainer.get("model_spec")
    if spec is None:
        return config.model_config()
    return ModelConfig.from_table(spec, f"job checkpoint {job.directory}: model_spec")


def score_checkpoint(
    checkpoint: str,
    data: str,
    config: TrainConfig,
    consume: Consume[T],
    *,
    optional_labels: bool = False,
) -> tuple[JobCheckpoint, T]:
    """The checkpoint's model over ``data``: ``consume(evaluator, predict, step)`` runs with
    the checkpoint's ps started and restored and its model loaded, and its result is returned
    with the checkpoint. ``sniper eval`` and ``sniper predict`` both score through here.

    ``config``: the ps settings (its defaults do: the ps only serve lookups here), the batch
    size data is read in, and the model of a checkpoint that does not record its own.
    ``optional_labels``: a user's table without the label columns is scored (its batches then
    have no labels: ``sniper predict`` of new events), and so is every row of a null label (a
    NaN label); otherwise the one is refused naming the column, the other by its row or dropped
    (``skip_null_labels``): ``sniper eval`` scores against the labels."""
    # Synthetic data is the training's own stream (the held-out batches score it as it
    # trains); at the defaults' scale its ids would not fit a checkpoint's tables.
    check_data_value("--data", data, synthetic=False)
    log_to_stderr()
    job = load_job(Path(checkpoint).resolve())
    # The checkpoint's feature spec (with its training statistics), unless the config gives one.
    table = config.features or job.config.get("features") or {}
    shape, reader = probe_data(
        data,
        workload=load_workload("seed_ctr"),
        scale=1.0,
        batch_size=config.batch_size,
        seed=0,
        features=FeatureSpec.from_table(table) if table else None,
        nonfinite_dense=config.nonfinite_dense,
        optional_labels=optional_labels,
    )
    variables = _variables(job)
    missing = [name for name in shape.variables if name not in variables]
    if missing:
        raise ValueError(
            f"data {data!r} has variables the checkpoint lacks: {', '.join(missing[:5])}"
        )
    labels = tuple(job.config.get("labels", ["label"]))
    regression = tuple(job.config.get("regression", []))
    # Data read with some of its labels or none (optional_labels) is scored for every label
    # the model predicts.
    if shape.labels and not _labels_agree(shape, labels, regression, some=optional_labels):
        raise ValueError(
            f"data {data!r} has labels {', '.join(shape.labels)} (regression: "
            f"{', '.join(shape.regression) or 'none'}); the checkpoint's model predicts "
            f"{', '.join(labels)} (regression: {', '.join(regression) or 'none'})"
        )
    inputs = model_inputs(
        {name: variables[name] for name in shape.variables},
        shape.dense_features,
        labels,
        regression,
    )
    model = _model_config(job, config).open(inputs, seed=config.seed, threads=config.blas_threads)
    model.load_state(job.trainer["model"])
    predict = Predictor(model, list(shape.variables))
    with ExitStack() as stack:
        configs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sniper-eval-")))
        server = _server_config(
            config,
            "ps",
            workers=config.worker_threads(job.num_ps),
            checkpoint_root=str(job.directory.parent),
            metrics_port=-1,
        )
        command = serve_config_command(server, configs / "ps.toml")
        ports = [stack.enter_context(server_process(command)).port for _ in range(job.num_ps)]
        security = Security.of(config)
        result = anyio.run(
            _score, job, ports, reader, predict, security, consume, backend="asyncio"
        )
    return job, result


def run_eval(checkpoint: str, data: str, config: TrainConfig) -> int:
    """Score ``data`` with the model of ``checkpoint`` (``config``: see
    :func:`score_checkpoint`); prints the figures (each label's too, where there are several
    or one is a regression target), returns 0."""

    async def score(evaluator: DataEvaluator, predict: Predictor, step: int) -> EvalResult:
        return await evaluator.score(predict, step)

    job, result = score_checkpoint(checkpoint, data, config, score)
    print(f"\nscored {data} with the model of {job.directory} (step {job.step})")
    print_table(
        ["examples", "AUC", "logloss", "examples/s"],
        [
            [
                f"{result.examples:,}",
                shown(result.auc),
                shown(result.logloss),
                f"{result.examples / result.seconds:,.0f}",
            ]
        ],
    )
    print_labels(result.per_label, {"value": "{metric}", "logloss": "logloss"})
    return 0


async def _score(
    job: JobCheckpoint,
    ports: list[int],
    reader: Reader,
    predict: Predictor,
    security: Security,
    consume: Consume[T],
) -> T:
    # The checkpoint's placement: its variables are on the ps it names (balanced at the start,
    # moved by auto_shard), not always on the ones their names hash to.
    cluster = PsCluster(
        [PsClient("127.0.0.1", port, security=security) for port in ports], job.placement
    )
    try:
        for index, member in enumerate(cluster.members):
            await member.restore(f"{job.directory.name}/ps-{index}")
        inputs = predict.model.inputs
        evaluator = DataEvaluator(
            reader, cluster, [*predict.variables, *predict.sequences], inputs.regression
        )
        start = time.perf_counter()
        result = await consume(evaluator, predict, job.step)
        log.info("scored in %.1f s", time.perf_counter() - start)
        return result
    finally:
        cluster.close()
