"""The model zoo: torch models by name, each a :class:`~sniper.torch.TorchModel` over a
network module that takes ``(embeddings, dense)`` and returns one logit per label.

=============  ==================  ===========================================================
name           class (network)     params (defaults)
=============  ==================  ===========================================================
``torch_mlp``  TorchMlp (MlpNet)   ``hidden = [64]``: the numpy ``mlp``, in torch
``dlrm``       DLRM (DlrmNet)      ``bottom = [64]``, ``top = [64]``,
                                   ``interaction_threads = 2``; one embedding width
``deepfm``     DeepFM (DeepFmNet)  ``hidden = [64, 32]``; one embedding width
``dcn_v2``     DCNv2 (DcnV2Net)    ``cross_layers = 2``, ``rank = 0``, ``hidden = [64, 32]``
``wide_deep``  WideDeep            ``hidden = [64, 32]``
``mmoe``       MMoE (MmoeNet)      ``experts = 4``, ``expert_hidden = [64]``,
                                   ``tower_hidden = [16]``; one task per label
=============  ==================  ===========================================================

The names are ``sniper.models`` entry points of sniper's own distribution: ``[model] factory =
"dlrm"`` opens :class:`DLRM` (importing torch then, not before). Every one also takes the
``[model]`` settings ``optimizer`` (Adam), ``lr`` (0.001; the MLP's 0.002), ``device`` and
the job's ``seed``.

Sequence variables (pooling ``none``) are one more field of every zoo model: the mean of each
example's sequence (zeros for an empty one), as wide as the variable's dim, beside the pooled
embeddings (so DLRM's and DeepFM's one width counts them too). A model that attends over a
sequence is a module of one's own (the README's "Your model").
"""

from sniper.torch.models._dcn import DCNv2 as DCNv2
from sniper.torch.models._dcn import DcnV2Net as DcnV2Net
from sniper.torch.models._deepfm import DeepFM as DeepFM
from sniper.torch.models._deepfm import DeepFmNet as DeepFmNet
from sniper.torch.models._dlrm import DLRM as DLRM
from sniper.torch.models._dlrm import DlrmNet as DlrmNet
from sniper.torch.models._mlp import MlpNet as MlpNet
from sniper.torch.models._mlp import TorchMlp as TorchMlp
from sniper.torch.models._mmoe import MMoE as MMoE
from sniper.torch.models._mmoe import MmoeNet as MmoeNet
from sniper.torch.models._wide_deep import WideDeep as WideDeep
from sniper.torch.models._wide_deep import WideDeepNet as WideDeepNet
from sniper.torch.models._zoo import ZooModel as ZooModel

__all__ = [
    "DLRM",
    "DCNv2",
    "DcnV2Net",
    "DeepFM",
    "DeepFmNet",
    "DlrmNet",
    "MMoE",
    "MlpNet",
    "MmoeNet",
    "TorchMlp",
    "WideDeep",
    "WideDeepNet",
    "ZooModel",
]
