"""Running sniper as a job: the model spec, the data's shape, and training over any transport.

``sniper train`` reads ``[variables]`` from its TOML into a :class:`ModelSpec`, learns the
variables, their signs per batch and the dense feature count from the data
(:func:`probe_data` gives a :class:`DataShape`), and resolves one sized :class:`TableSpec` per
variable before it starts any process, so that a spec that does not fit the data fails at
once, with the key named. Then :func:`create_variables` and :func:`train` run the job, over gRPC
against ps and hub processes, or in one process through ``sniper.testing.local_cluster``.
"""

from sniper.cluster._data import probe_data as probe_data
from sniper.cluster._hosts import ClusterSpec as ClusterSpec
from sniper.cluster._hosts import Endpoint as Endpoint
from sniper.cluster._hosts import load_cluster_spec as load_cluster_spec
from sniper.cluster._job import create_variables as create_variables
from sniper.cluster._job import train as train
from sniper.cluster._reshard import reshard as reshard
from sniper.cluster._spec import DataShape as DataShape
from sniper.cluster._spec import ModelSpec as ModelSpec
from sniper.cluster._spec import TableSpec as TableSpec
from sniper.cluster._train import TrainConfig as TrainConfig
from sniper.cluster._train import TrainPlan as TrainPlan
from sniper.cluster._train import plan_training as plan_training

__all__ = [
    "ClusterSpec",
    "DataShape",
    "Endpoint",
    "ModelSpec",
    "TableSpec",
    "TrainConfig",
    "TrainPlan",
    "create_variables",
    "load_cluster_spec",
    "plan_training",
    "probe_data",
    "reshard",
    "train",
]
