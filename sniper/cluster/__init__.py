"""Running sniper as a job: the model spec, the data's shape, launchers, and training.

``sniper train`` reads ``[variables]`` from its TOML into a :class:`ModelSpec`, learns the
variables, their signs per batch and the dense feature count from the data
(:func:`probe_data` gives a :class:`DataShape`), and resolves one sized :class:`TableSpec` per
variable before it starts any process (:func:`plan_training`), so that a spec that does not
fit the data fails at once, with the key named. Then a :class:`Launcher` chosen by name
(:func:`open_launcher`: ``inprocess``, ``local``, ``ray`` or a ``sniper.launchers`` plugin)
starts the roles, and :func:`create_variables` and :func:`train` run the job on them, over
gRPC against ps and hub processes, or in one process (as ``sniper.testing.local_cluster``
does). ``sniper serve`` (:func:`run_serve`, :class:`ServeConfig`) runs one ps or hub server.
"""

from sniper.cluster._abc import Attempt as Attempt
from sniper.cluster._abc import Launch as Launch
from sniper.cluster._abc import Launcher as Launcher
from sniper.cluster._abc import RoleStartError as RoleStartError
from sniper.cluster._checkpoint import load_job as load_job
from sniper.cluster._config import TrainConfig as TrainConfig
from sniper.cluster._config import load_train_config as load_train_config
from sniper.cluster._data import probe_data as probe_data
from sniper.cluster._eval import run_eval as run_eval
from sniper.cluster._hosts import ClusterSpec as ClusterSpec
from sniper.cluster._hosts import Endpoint as Endpoint
from sniper.cluster._hosts import RankHost as RankHost
from sniper.cluster._hosts import load_cluster_spec as load_cluster_spec
from sniper.cluster._inprocess import InProcessRoles as InProcessRoles
from sniper.cluster._inprocess import serve_in_process as serve_in_process
from sniper.cluster._job import create_variables as create_variables
from sniper.cluster._job import train as train
from sniper.cluster._placement import print_checkpoint_placement as print_checkpoint_placement
from sniper.cluster._placement import print_live_placement as print_live_placement
from sniper.cluster._placement import print_placement as print_placement
from sniper.cluster._placement import workload_placement as workload_placement
from sniper.cluster._plan import TrainPlan as TrainPlan
from sniper.cluster._plan import plan_training as plan_training
from sniper.cluster._predict import run_predict as run_predict
from sniper.cluster._preemption import Preemption as Preemption
from sniper.cluster._process import ps_command as ps_command
from sniper.cluster._process import server_process as server_process
from sniper.cluster._process import sniper_command as sniper_command
from sniper.cluster._rank import run_rank as run_rank
from sniper.cluster._registry import LAUNCHER_NAMES as LAUNCHER_NAMES
from sniper.cluster._registry import launcher_names as launcher_names
from sniper.cluster._registry import open_launcher as open_launcher
from sniper.cluster._report import ReportFile as ReportFile
from sniper.cluster._report import describe_cores_busy as describe_cores_busy
from sniper.cluster._report import read_report as read_report
from sniper.cluster._reshard import reshard as reshard
from sniper.cluster._serve import ServeConfig as ServeConfig
from sniper.cluster._serve import load_serve_config as load_serve_config
from sniper.cluster._serve import parse_addresses as parse_addresses
from sniper.cluster._serve import run_serve as run_serve
from sniper.cluster._serve import serve_hub as serve_hub
from sniper.cluster._serve import serve_ps as serve_ps
from sniper.cluster._spec import DataShape as DataShape
from sniper.cluster._spec import ModelSpec as ModelSpec
from sniper.cluster._spec import TableSpec as TableSpec
from sniper.cluster._train import run_train as run_train

__all__ = [
    "LAUNCHER_NAMES",
    "Attempt",
    "ClusterSpec",
    "DataShape",
    "Endpoint",
    "InProcessRoles",
    "Launch",
    "Launcher",
    "ModelSpec",
    "Preemption",
    "RankHost",
    "ReportFile",
    "RoleStartError",
    "ServeConfig",
    "TableSpec",
    "TrainConfig",
    "TrainPlan",
    "create_variables",
    "describe_cores_busy",
    "launcher_names",
    "load_cluster_spec",
    "load_job",
    "load_serve_config",
    "load_train_config",
    "open_launcher",
    "parse_addresses",
    "plan_training",
    "print_checkpoint_placement",
    "print_live_placement",
    "print_placement",
    "probe_data",
    "ps_command",
    "read_report",
    "reshard",
    "run_eval",
    "run_predict",
    "run_rank",
    "run_serve",
    "run_train",
    "serve_hub",
    "serve_in_process",
    "serve_ps",
    "server_process",
    "sniper_command",
    "train",
    "workload_placement",
]
