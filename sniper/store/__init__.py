"""Embedding tables for one ps process: bounded, sharded, with sparse optimizers.

``EmbeddingTable`` keeps rows in preallocated slabs indexed by an open-addressing hash of the
64-bit sign; all per-sign work runs in numba kernels that release the GIL. :func:`pin_shards`,
:func:`pool_shards` and :func:`push_shards` map, pool and update shards of many tables in one
kernel call (a ps request). See
:mod:`sniper.store._table` for lock modes and eviction, and :mod:`sniper.store._kernels` for the
memory layout.
"""

from sniper.store._abc import EmbeddingStore as EmbeddingStore
from sniper.store._abc import ShardedBatch as ShardedBatch
from sniper.store._abc import TableExport as TableExport
from sniper.store._abc import TableStatistics as TableStatistics
from sniper.store._grouped import PinPart as PinPart
from sniper.store._grouped import PoolPart as PoolPart
from sniper.store._grouped import PushPart as PushPart
from sniper.store._grouped import max_abs_matrices as max_abs_matrices
from sniper.store._grouped import pin_shards as pin_shards
from sniper.store._grouped import pool_shards as pool_shards
from sniper.store._grouped import push_shards as push_shards
from sniper.store._grouped import strides_of as strides_of
from sniper.store._initializers import DEFAULT_INITIALIZER as DEFAULT_INITIALIZER
from sniper.store._initializers import INITIALIZERS as INITIALIZERS
from sniper.store._initializers import Initializer as Initializer
from sniper.store._initializers import constant as constant
from sniper.store._initializers import make_initializer as make_initializer
from sniper.store._initializers import normal as normal
from sniper.store._initializers import uniform as uniform
from sniper.store._initializers import zeros as zeros
from sniper.store._kernels import FLOAT32_MAX as FLOAT32_MAX
from sniper.store._kernels import INIT_NORMAL as INIT_NORMAL
from sniper.store._kernels import MAX_TABLE_SHARDS as MAX_TABLE_SHARDS
from sniper.store._kernels import initial_rows as initial_rows
from sniper.store._kernels import kernel as kernel
from sniper.store._kernels import mix64 as mix64
from sniper.store._optimizers import OPTIMIZERS as OPTIMIZERS
from sniper.store._optimizers import SGD as SGD
from sniper.store._optimizers import Adagrad as Adagrad
from sniper.store._optimizers import Adam as Adam
from sniper.store._optimizers import Ftrl as Ftrl
from sniper.store._optimizers import Optimizer as Optimizer
from sniper.store._optimizers import make_optimizer as make_optimizer
from sniper.store._table import BAG_POOLINGS as BAG_POOLINGS
from sniper.store._table import EVICTION_POLICIES as EVICTION_POLICIES
from sniper.store._table import LOCK_MODES as LOCK_MODES
from sniper.store._table import POOLINGS as POOLINGS
from sniper.store._table import Admission as Admission
from sniper.store._table import BagPooling as BagPooling
from sniper.store._table import CapacityError as CapacityError
from sniper.store._table import EmbeddingTable as EmbeddingTable
from sniper.store._table import LockMode as LockMode
from sniper.store._table import Pooling as Pooling
from sniper.store._warm import load_kernels as load_kernels

__all__ = [
    "BAG_POOLINGS",
    "DEFAULT_INITIALIZER",
    "EVICTION_POLICIES",
    "FLOAT32_MAX",
    "INITIALIZERS",
    "INIT_NORMAL",
    "LOCK_MODES",
    "MAX_TABLE_SHARDS",
    "OPTIMIZERS",
    "POOLINGS",
    "SGD",
    "Adagrad",
    "Adam",
    "Admission",
    "BagPooling",
    "CapacityError",
    "EmbeddingStore",
    "EmbeddingTable",
    "Ftrl",
    "Initializer",
    "LockMode",
    "Optimizer",
    "PinPart",
    "PoolPart",
    "Pooling",
    "PushPart",
    "ShardedBatch",
    "TableExport",
    "TableStatistics",
    "constant",
    "initial_rows",
    "kernel",
    "load_kernels",
    "make_initializer",
    "make_optimizer",
    "max_abs_matrices",
    "mix64",
    "normal",
    "pin_shards",
    "pool_shards",
    "push_shards",
    "strides_of",
    "uniform",
    "zeros",
]
