"""``DataSource``: the data settings of a job, declared and validated once.

``sniper serve --role hub`` and ``sniper train`` both read these keys (``data``, ``workload``,
``scale``...): their configs inherit this class, so a key is declared, defaulted and checked
in one place, and the launcher hands a hub exactly the values the training config holds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any

from sniper._config import RunSettings, check_at_least, check_positive
from sniper.data._features import FeatureSpec
from sniper.data._open import open_reader
from sniper.data._parquet import NonfiniteDense
from sniper.data._reader import Reader

__all__ = ["DataSource", "check_data_value"]


def check_data_value(key: str, value: str, *, synthetic: bool = True) -> None:
    """``value`` names data (``synthetic``, ``criteo:PATH``, ``parquet:PATH``, ``csv:PATH``,
    ``tsv:PATH``), or ``ValueError`` names ``key``."""
    kind, colon, path = value.partition(":")
    if kind == "synthetic" and not colon and synthetic:
        return
    if kind in ("criteo", "parquet", "csv", "tsv") and colon and path:
        return
    files = "criteo:PATH, parquet:PATH, csv:PATH or tsv:PATH"
    forms = f"synthetic, {files}" if synthetic else files
    raise ValueError(f"{key} must be {forms}, got {value!r}")


@dataclass(frozen=True)
class DataSource(RunSettings):
    """What a job reads. Every field is a TOML key."""

    data: str = "synthetic"
    """``synthetic``, ``criteo:PATH``, ``parquet:PATH``, ``csv:PATH`` or ``tsv:PATH`` (a file,
    a directory or a glob; CSV and TSV have a header row and need ``[features]``)."""
    workload: str = "seed_ctr"
    """The shape of synthetic data (a built-in name or a workload JSON file)."""
    scale: float = 0.02
    num_batches: int = 700
    """Batches per epoch of synthetic data; files are read whole."""
    batch_size: int = 1024
    features: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The ``[features]`` table: how a user's table (``parquet:``, ``csv:``, ``tsv:``) maps to
    a label, sparse variables and dense features (:class:`~sniper.data.FeatureSpec`: ``label``
    or ``labels``, ``sparse``, ``dense``, ``[features.columns.NAME]``...). Empty: sniper's own
    Parquet schema, Criteo or synthetic data."""
    nonfinite_dense: NonfiniteDense = "error"
    """What a NaN or Inf dense feature read from a file gets: ``error`` stops the read with
    one line naming the file, the row and the column; ``fill`` reads it as 0. (Criteo's dense
    features are parsed from integers, so always finite: a ``nan`` there is a malformed line.)"""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_data_value("data", self.data)
        check_at_least(self, 1, "num_batches", "batch_size")
        check_positive(self, "scale")
        spec = self.feature_spec()
        kind = self.data.partition(":")[0]
        if spec is None and kind in ("csv", "tsv"):
            raise ValueError(
                f"data = {self.data!r} needs a [features] table: which column is the label, "
                "which are sparse and which dense"
            )
        if spec is not None and kind not in ("parquet", "csv", "tsv"):
            raise ValueError(
                f"[features] maps a table's columns: it applies to parquet:, csv: or tsv: "
                f"data, not {self.data!r}"
            )

    def feature_spec(self) -> FeatureSpec | None:
        """``[features]`` validated (errors name ``features.KEY``); None without one."""
        return FeatureSpec.from_table(self.features) if self.features else None

    def data_digest(self) -> str:
        """16 hex digits of SHA-256 over every data key: each field this class declares (a key
        added here is covered without more code), and the seed of synthetic data. A trainer
        and the hubs it reads compare it (:class:`~sniper.rpc.DataServed`)."""
        keys = {f.name for f in fields(DataSource)} - {f.name for f in fields(RunSettings)}
        if self.data == "synthetic":
            keys.add("seed")
        values = {key: getattr(self, key) for key in sorted(keys)}
        text = json.dumps(values, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def open(self) -> Reader:
        """The reader of this data."""
        return open_reader(
            self.data,
            workload=self.workload,
            scale=self.scale,
            # Files are read whole: num_batches is the synthetic generator's length only.
            num_batches=self.num_batches if self.data == "synthetic" else None,
            batch_size=self.batch_size,
            seed=self.seed,
            features=self.feature_spec(),
            nonfinite_dense=self.nonfinite_dense,
        )
