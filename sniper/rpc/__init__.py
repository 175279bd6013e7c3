"""The gRPC contract (``sniper.v1``, in ``sniper.proto``) and typed clients.

``sniper.rpc.v1`` holds the generated message and stub classes; ``PsClient`` and ``PsCluster``
are what applications use.
"""

from sniper.rpc._client import Pooled as Pooled
from sniper.rpc._client import PsClient as PsClient
from sniper.rpc._client import PsCluster as PsCluster
from sniper.rpc._codec import SniperCodec as SniperCodec
from sniper.rpc._tensor import TensorError as TensorError
from sniper.rpc._tensor import decode as decode_tensor
from sniper.rpc._tensor import encode as encode_tensor

__all__ = [
    "Pooled",
    "PsClient",
    "PsCluster",
    "SniperCodec",
    "TensorError",
    "decode_tensor",
    "encode_tensor",
]
