"""Training data for sniper: batches, readers, a synthetic CTR generator and quality metrics.

A hub reads :class:`Batch` es from a :class:`Reader` and sends each variable's signs to the ps
that owns it; a trainer takes labels and dense features from the same batches and scores its
predictions with :func:`roc_auc`, :class:`StreamingAuc` and :func:`log_loss`.

A :class:`Workload` is a job's shape (``seed_ctr``, ``criteo``, or a JSON file, through
:func:`load_workload`). Readers: :class:`SyntheticCtr` (a workload's shape with a planted,
learnable model),
:class:`CriteoTsv` (the Criteo TSV format) and :class:`ParquetReader` (sniper's Parquet schema,
read zero-copy; :func:`write_parquet` and :func:`convert` write it). :func:`open_reader` picks
one by name (``synthetic``, ``criteo:PATH``, ``parquet:PATH``); a path may name a directory or
a glob of files, read in order as one :class:`FileSet` that several hubs split. A user's own
table (Parquet, CSV or TSV of any schema) is read by :class:`TableReader` through a
:class:`FeatureSpec` (the ``[features]`` table), its values hashed into signs with
:func:`sniper.hashing.feature_sign`.
"""

from sniper.data._batch import Batch as Batch
from sniper.data._batch import Ragged as Ragged
from sniper.data._columns import TableError as TableError
from sniper.data._convert import CONVERT_KINDS as CONVERT_KINDS
from sniper.data._convert import ConvertKind as ConvertKind
from sniper.data._convert import convert as convert
from sniper.data._criteo import CRITEO_DENSE as CRITEO_DENSE
from sniper.data._criteo import CRITEO_VARIABLES as CRITEO_VARIABLES
from sniper.data._criteo import CriteoFormatError as CriteoFormatError
from sniper.data._criteo import CriteoTsv as CriteoTsv
from sniper.data._criteo import criteo_sign as criteo_sign
from sniper.data._distinct import DistinctSigns as DistinctSigns
from sniper.data._distinct import count_distinct_signs as count_distinct_signs
from sniper.data._features import POOLINGS as POOLINGS
from sniper.data._features import ColumnSpec as ColumnSpec
from sniper.data._features import FeatureSpec as FeatureSpec
from sniper.data._features import LabelSpec as LabelSpec
from sniper.data._files import FileSet as FileSet
from sniper.data._inspect import inspect_table as inspect_table
from sniper.data._inspect import suggest_features as suggest_features
from sniper.data._metrics import StreamingAuc as StreamingAuc
from sniper.data._metrics import log_loss as log_loss
from sniper.data._metrics import roc_auc as roc_auc
from sniper.data._open import DATA_KINDS as DATA_KINDS
from sniper.data._open import open_reader as open_reader
from sniper.data._parquet import NonfiniteDense as NonfiniteDense
from sniper.data._parquet import ParquetFormatError as ParquetFormatError
from sniper.data._parquet import ParquetReader as ParquetReader
from sniper.data._parquet import parquet_schema as parquet_schema
from sniper.data._parquet import write_parquet as write_parquet
from sniper.data._reader import Reader as Reader
from sniper.data._source import DataSource as DataSource
from sniper.data._source import check_data_value as check_data_value
from sniper.data._synthetic import SyntheticCtr as SyntheticCtr
from sniper.data._table_reader import TableReader as TableReader
from sniper.data._workload import BUILTIN_WORKLOADS as BUILTIN_WORKLOADS
from sniper.data._workload import PlantedLabel as PlantedLabel
from sniper.data._workload import VariableSpec as VariableSpec
from sniper.data._workload import Workload as Workload
from sniper.data._workload import WorkloadError as WorkloadError
from sniper.data._workload import load_workload as load_workload
from sniper.data._zipf import ZipfSampler as ZipfSampler
from sniper.data._zipf import signs_of_ranks as signs_of_ranks

__all__ = [
    "BUILTIN_WORKLOADS",
    "CONVERT_KINDS",
    "CRITEO_DENSE",
    "CRITEO_VARIABLES",
    "DATA_KINDS",
    "POOLINGS",
    "Batch",
    "ColumnSpec",
    "ConvertKind",
    "CriteoFormatError",
    "CriteoTsv",
    "DataSource",
    "DistinctSigns",
    "FeatureSpec",
    "FileSet",
    "LabelSpec",
    "NonfiniteDense",
    "ParquetFormatError",
    "ParquetReader",
    "PlantedLabel",
    "Ragged",
    "Reader",
    "StreamingAuc",
    "SyntheticCtr",
    "TableError",
    "TableReader",
    "VariableSpec",
    "Workload",
    "WorkloadError",
    "ZipfSampler",
    "check_data_value",
    "convert",
    "count_distinct_signs",
    "criteo_sign",
    "inspect_table",
    "load_workload",
    "log_loss",
    "open_reader",
    "parquet_schema",
    "roc_auc",
    "signs_of_ranks",
    "suggest_features",
    "write_parquet",
]
