"""Dense models: the interface the trainer calls, the numpy MLP, and opening one by name.

- :class:`DenseModel`: what the trainer asks of a model (a step, predictions, state).
- :class:`ModelInputs`: what a model is built for (each variable's width, dense features,
  labels); a factory is called as ``build(inputs, **params)``.
- :class:`MlpModel`: the default, ``"mlp"``: numpy and numba only, no torch.
- :func:`open_model`: a model by registered name (``sniper.models`` entry points) or by
  import path (``"mypkg.models:build"``).
- :class:`ModelError`: the model's own code raised (:func:`users_code` marks such code).
- :class:`ModelConfig`: the ``[model]`` table of a training config (factory, params,
  optimizer, lr, device), which opens its model.
"""

from sniper.models._abc import DenseModel as DenseModel
from sniper.models._abc import GradientAverage as GradientAverage
from sniper.models._abc import Jagged as Jagged
from sniper.models._abc import ModelInputs as ModelInputs
from sniper.models._abc import TrainStep as TrainStep
from sniper.models._config import ModelConfig as ModelConfig
from sniper.models._errors import ModelError as ModelError
from sniper.models._errors import users_code as users_code
from sniper.models._mlp import Mlp as Mlp
from sniper.models._mlp import MlpModel as MlpModel
from sniper.models._registry import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from sniper.models._registry import MODEL_NAMES as MODEL_NAMES
from sniper.models._registry import SETTINGS as SETTINGS
from sniper.models._registry import model_names as model_names
from sniper.models._registry import open_model as open_model

__all__ = [
    "ENTRY_POINT_GROUP",
    "MODEL_NAMES",
    "SETTINGS",
    "DenseModel",
    "GradientAverage",
    "Jagged",
    "Mlp",
    "MlpModel",
    "ModelConfig",
    "ModelError",
    "ModelInputs",
    "TrainStep",
    "model_names",
    "open_model",
    "users_code",
]
