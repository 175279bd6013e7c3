"""The rows a job's batches in flight hold, checked against the capacities a config writes.

A ps maps a fed batch's signs to rows when FeedSample arrives and keeps them until the
batch's PushGrad, so that no eviction moves a row a gradient is on its way to. A table whose
every row the batches fed and not yet pushed hold refuses the next batch (RESOURCE_EXHAUSTED),
and the job stops part way, after the time it trained. How many batches that is follows from
the config (:func:`batches_in_flight`), and how many distinct ids they hold from the data: so
:func:`check_capacities` refuses a written ``capacity`` below it before any process starts,
naming the least that works (:func:`~sniper.placement.inflight_capacity`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from itertools import islice

import numpy as np

from sniper.cluster._config import TrainConfig
from sniper.cluster._spec import DataShape, ModelSpec, TableSpec
from sniper.data import Batch, Reader
from sniper.placement import INFLIGHT_HEADROOM, inflight_capacity

__all__ = ["batches_in_flight", "check_capacities"]


def batches_in_flight(config: TrainConfig) -> tuple[int, str]:
    """The most batches whose rows a ps holds at once, and how ``config`` makes them that many.

    With ``map_rows = "feed"`` a batch holds its rows from its FeedSample to its PushGrad:
    each hub's feeds under way (``max_in_flight``) and its queue (``queue_size``), each
    trainer rank's batches read ahead (``prefetch``) and the one it trains, and the batch of
    ``eval_data`` being scored. With ``"lookup"`` a batch's rows are mapped at its lookup,
    one batch at a time.
    """
    if config.map_rows == "lookup":
        at_lookup = (
            'a ps maps a batch\'s ids to rows at its lookup (map_rows = "lookup"), one at a time'
        )
        return 1, at_lookup
    hubs = config.num_hubs * (config.max_in_flight + config.queue_size)
    trainers = config.num_trainers * (config.prefetch + 1)
    scoring = 1 if config.eval_data else 0
    batches = hubs + trainers + scoring
    how = (
        f"num_hubs {config.num_hubs} x (max_in_flight {config.max_in_flight} + queue_size "
        f"{config.queue_size}) + num_trainers {config.num_trainers} x (prefetch "
        f"{config.prefetch} + 1)" + (" + 1 of eval_data" if scoring else "")
    )
    return batches, (
        f"up to {batches} batches are fed to the ps and not yet pushed at once ({how}), each "
        "keeping its rows until its push"
    )


def check_capacities(
    config: TrainConfig,
    model_spec: ModelSpec,
    tables: Mapping[str, TableSpec],
    shape: DataShape,
    reader: Reader,
) -> None:
    """Refuse a ``capacity`` written in ``[variables]`` that is smaller than the rows the
    batches in flight hold (``ValueError`` naming the key, the capacity, the least that works
    and why); a table sniper sizes (``capacity = 0``) is left to its sizing.

    The batches in flight are measured on the data's first ones (``reader``'s), read only
    where the signs per batch leave a table short of them: a table that holds every sign of
    that many batches, or every id of its variable, reads nothing more.
    """
    batches, why = batches_in_flight(config)
    vocabulary = shape.vocabulary or {}
    per_batch = shape.signs_per_batch
    short = {
        name: table
        for name, table in tables.items()
        if model_spec.table(name).capacity
        and _may_fall_short(table, per_batch.get(name, 0), batches, vocabulary.get(name))
    }
    if not short:
        return
    window = _first_batches(config, reader, batches)
    for name, table in short.items():
        held = np.concatenate([batch.sparse[name][0] for batch in window])
        least = inflight_capacity(held, table.shards, vocabulary.get(name))
        if table.capacity < least:
            first = "first batch holds" if len(window) == 1 else f"first {len(window)} hold"
            distinct = f"{first} {np.unique(held).shape[0]:,} distinct {name} ids"
            fewer = " (or lower queue_size, max_in_flight or prefetch)" if batches > 1 else ""
            raise ValueError(
                f"variables.{name}.capacity = {table.capacity} is too small for the batches "
                f"in flight: {why}, and the data's {distinct}, so the job would stop part way "
                f"with RESOURCE_EXHAUSTED; set it to at least {least}{fewer}"
            )


def _may_fall_short(
    table: TableSpec, signs_per_batch: int, batches: int, vocabulary: int | None
) -> bool:
    """Whether ``batches`` batches of ``signs_per_batch`` signs, all distinct and all in one
    shard, would need more rows than ``table`` has (none would if it holds the whole
    ``vocabulary`` in one shard)."""
    if table.shards == 1 and vocabulary and table.capacity >= vocabulary:
        return False
    most = table.shards * math.ceil(batches * signs_per_batch * INFLIGHT_HEADROOM)
    return table.capacity < most


def _first_batches(config: TrainConfig, reader: Reader, count: int) -> list[Batch]:
    """The data's first ``count`` batches (all of them if it has fewer): the hubs' reader for
    synthetic data (the plan's generates one batch), the plan's ``reader`` for files."""
    source = config.open() if config.data == "synthetic" else reader
    batches: Iterator[Batch] = source.batches()
    try:
        return list(islice(batches, count))
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()  # a reader's decoding thread goes now, not at collection
