"""The hub, ps and trainer roles: actors on anyio, whatever transport carries their calls.

- :class:`PsEngine`: a ps's tables and batches, dispatched to a scheduler; embeddable as is
  (:class:`EngineConfig`: its limits and their defaults).
- :class:`PsRole`: the ps (``sniper.rpc.PsApi``) over an engine: policies, histograms, drain.
- :class:`HubRole`: reads a :class:`~sniper.data.Reader`, feeds the ps, hands out batches.
- :class:`Trainer`: prefetches from hubs, trains the dense model it is given
  (``sniper.models``), pushes gradients; its pipeline, step and pauses are modules of their own.
- :class:`Ranks`: a job's trainer ranks (``num_trainers``), joined by ``torch.distributed``:
  the step's all-reduce of the dense gradients, and the checkpoints' gather and barrier.
- :class:`PsCluster`: several ps as one, each variable on the ps its placement names.
- :class:`AutoShard`: the trainer's moves of variables off a busy ps, as
  ``sniper.placement``'s planner (:func:`plan_moves`, re-exported here) decides them.

Transports (``sniper.transport``) serve these roles over gRPC or in process; the roles never
import them.
"""

from sniper.placement import Move as Move
from sniper.placement import plan_moves as plan_moves
from sniper.roles._balance import AutoShard as AutoShard
from sniper.roles._batch_id import EVAL_HUB as EVAL_HUB
from sniper.roles._batch_id import MAX_HUBS as MAX_HUBS
from sniper.roles._batch_id import BatchId as BatchId
from sniper.roles._checkpoint import MANIFEST as MANIFEST
from sniper.roles._checkpoint import CheckpointPathError as CheckpointPathError
from sniper.roles._checkpoint import CorruptCheckpointError as CorruptCheckpointError
from sniper.roles._checkpoint import check_checkpoint_files as check_checkpoint_files
from sniper.roles._checkpoint import load_checkpoint as load_checkpoint
from sniper.roles._checkpoint import replace_file as replace_file
from sniper.roles._checkpoint import write_checkpoint as write_checkpoint
from sniper.roles._cluster import PsCluster as PsCluster
from sniper.roles._cluster import gather as gather
from sniper.roles._engine import EngineConfig as EngineConfig
from sniper.roles._engine import PendingLookup as PendingLookup
from sniper.roles._engine import PsEngine as PsEngine
from sniper.roles._errors import RPC_ERRORS as RPC_ERRORS
from sniper.roles._errors import AlreadyPushedError as AlreadyPushedError
from sniper.roles._errors import DataError as DataError
from sniper.roles._errors import DataMismatchError as DataMismatchError
from sniper.roles._errors import InFlightLimitError as InFlightLimitError
from sniper.roles._errors import ReopenedBatchError as ReopenedBatchError
from sniper.roles._errors import TrainingError as TrainingError
from sniper.roles._errors import Unavailable as Unavailable
from sniper.roles._errors import UnknownBatchError as UnknownBatchError
from sniper.roles._errors import UnknownVariableError as UnknownVariableError
from sniper.roles._errors import VariableExistsError as VariableExistsError
from sniper.roles._errors import describe_error as describe_error
from sniper.roles._evaluate import DataEvaluator as DataEvaluator
from sniper.roles._evaluate import EvalResult as EvalResult
from sniper.roles._hub import HubConfig as HubConfig
from sniper.roles._hub import HubRole as HubRole
from sniper.roles._hub import HubSettings as HubSettings
from sniper.roles._hub import data_served as data_served
from sniper.roles._ps import MAX_PUSH_VALUE as MAX_PUSH_VALUE
from sniper.roles._ps import PsRole as PsRole
from sniper.roles._ps import PsRoleConfig as PsRoleConfig
from sniper.roles._ps import PsSettings as PsSettings
from sniper.roles._ranks import RankMaster as RankMaster
from sniper.roles._ranks import Ranks as Ranks
from sniper.roles._ranks import import_torch_distributed as import_torch_distributed
from sniper.roles._ranks import interface_of as interface_of
from sniper.roles._step import Predictor as Predictor
from sniper.roles._train_report import LiveProgress as LiveProgress
from sniper.roles._train_report import TrainReport as TrainReport
from sniper.roles._trainer import Checkpointer as Checkpointer
from sniper.roles._trainer import Trainer as Trainer
from sniper.roles._trainer import checkpoint_report as checkpoint_report
from sniper.roles._trainer_config import TrainerConfig as TrainerConfig
from sniper.roles._variables import MAX_DIM as MAX_DIM
from sniper.roles._variables import MemoryBudgetError as MemoryBudgetError
from sniper.roles._variables import estimate_bytes as estimate_bytes

__all__ = [
    "EVAL_HUB",
    "MANIFEST",
    "MAX_DIM",
    "MAX_HUBS",
    "MAX_PUSH_VALUE",
    "RPC_ERRORS",
    "AlreadyPushedError",
    "AutoShard",
    "BatchId",
    "CheckpointPathError",
    "Checkpointer",
    "CorruptCheckpointError",
    "DataError",
    "DataEvaluator",
    "DataMismatchError",
    "EngineConfig",
    "EvalResult",
    "HubConfig",
    "HubRole",
    "HubSettings",
    "InFlightLimitError",
    "LiveProgress",
    "MemoryBudgetError",
    "Move",
    "PendingLookup",
    "Predictor",
    "PsCluster",
    "PsEngine",
    "PsRole",
    "PsRoleConfig",
    "PsSettings",
    "RankMaster",
    "Ranks",
    "ReopenedBatchError",
    "TrainReport",
    "Trainer",
    "TrainerConfig",
    "TrainingError",
    "Unavailable",
    "UnknownBatchError",
    "UnknownVariableError",
    "VariableExistsError",
    "check_checkpoint_files",
    "checkpoint_report",
    "data_served",
    "describe_error",
    "estimate_bytes",
    "gather",
    "import_torch_distributed",
    "interface_of",
    "load_checkpoint",
    "plan_moves",
    "replace_file",
    "write_checkpoint",
]
