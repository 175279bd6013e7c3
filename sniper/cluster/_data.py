"""What the launcher learns of the data before it starts a process: its :class:`DataShape`.

Variables and the dense feature count come from the data itself: the synthetic workload's
generator, a Parquet file's schema, Criteo's fixed columns. Signs per batch (which decide the
shard count) are the generator's own figures for synthetic data and measured on the first batch
of a file. The vocabulary (which decides the capacity) is known for synthetic data alone, whose
generator is the source; a file's tables are sized from the distinct ids counted in it
(``sniper.cluster._plan``). Parquet written from synthetic data is such a file: the generator's
vocabulary it records is the ids the generator could draw, and the file holds those it drew (3%
to 42% of them, by variable, in 10,000 rows of seed_ctr at scale 0.02). Reading one batch also
catches an empty input or a malformed first line before any process starts.
"""

from __future__ import annotations

from typing import Any

from sniper.cluster._spec import DataShape
from sniper.data import (
    FeatureSpec,
    NonfiniteDense,
    Reader,
    SyntheticCtr,
    Workload,
    open_reader,
)

__all__ = ["check_same_schema", "probe_data", "resolved_features"]


def probe_data(
    data: str,
    *,
    batch_size: int,
    workload: Workload | None = None,
    scale: float = 1.0,
    seed: int = 0,
    num_batches: int = 1,
    features: FeatureSpec | None = None,
    nonfinite_dense: NonfiniteDense = "error",
    optional_labels: bool = False,
) -> tuple[DataShape, Reader]:
    """The shape of ``data`` (a ``data`` config value) and a reader of it (of
    ``num_batches`` batches per epoch for synthetic data; files are read whole, with
    ``nonfinite_dense``), through the feature spec ``features`` for a user's table (read
    with the labels it has, or none, and its null labels kept as NaN, with
    ``optional_labels``: see :func:`~sniper.data.open_reader`). ``workload``, ``scale``,
    ``seed`` and ``num_batches`` shape synthetic data alone: a file's shape is its own."""
    if data == "synthetic":
        if workload is None:
            raise ValueError("synthetic data needs a workload (load_workload('seed_ctr'))")
        generator = SyntheticCtr(
            workload, num_batches=num_batches, scale=scale, seed=seed, batch_size=batch_size
        )
        shape = DataShape(
            data,
            generator.variables,
            generator.dense_features,
            dict(generator.signs_per_batch),
            dict(generator.vocabulary),
            generator.label_names,
        )
        return shape, generator
    reader = open_reader(
        data,
        batch_size=batch_size,
        features=features,
        nonfinite_dense=nonfinite_dense,
        optional_labels=optional_labels,
    )
    first = next(iter(reader.batches()), None)
    if first is None:
        raise ValueError(f"data {data!r} holds no examples")
    factor = batch_size / first.batch_size  # a short file's only batch stands for a full one
    signs = {name: round(len(first.sparse[name][0]) * factor) for name in reader.variables}
    shape = DataShape(
        data,
        reader.variables,
        reader.dense_features,
        signs,
        None,
        reader.label_names,
        _regression(reader),
    )
    return shape, reader


def _regression(reader: Reader) -> tuple[str, ...]:
    """The labels read that a user's table declares regression targets (none in other data,
    nor in a table read without its labels)."""
    spec = getattr(reader, "features", None)
    if not isinstance(spec, FeatureSpec):
        return ()
    return tuple(name for name in spec.regression_labels if name in reader.label_names)


def check_same_schema(evaluation: DataShape, training: DataShape) -> None:
    """Evaluation data must hold the training data's variables, dense features and labels."""
    if evaluation.variables != training.variables:
        raise ValueError(
            f"eval_data ({evaluation.source}) holds variables "
            f"{', '.join(evaluation.variables[:6])}..., but data ({training.source}) holds "
            f"{', '.join(training.variables[:6])}...: they must be the same, in the same order"
        )
    if evaluation.dense_features != training.dense_features:
        raise ValueError(
            f"eval_data ({evaluation.source}) has {evaluation.dense_features} dense features, "
            f"but data ({training.source}) has {training.dense_features}"
        )
    if (evaluation.labels, evaluation.regression) != (training.labels, training.regression):
        raise ValueError(
            f"eval_data ({evaluation.source}) has labels {', '.join(evaluation.labels)} "
            f"(regression: {', '.join(evaluation.regression) or 'none'}), but data "
            f"({training.source}) has {', '.join(training.labels)} (regression: "
            f"{', '.join(training.regression) or 'none'})"
        )


def resolved_features(reader: Reader) -> dict[str, Any]:
    """The ``[features]`` table a reader of a user's table read through, with what it measured
    (``standardize``'s stats): what hubs, evaluation and checkpoints take, so that every one
    transforms as training did. Empty for other readers."""
    spec = getattr(reader, "features", None)
    return spec.to_table() if isinstance(spec, FeatureSpec) else {}
