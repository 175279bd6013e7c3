"""The gRPC contract (``sniper.v1``, in ``sniper.proto``) and typed clients.

``sniper.rpc.v1`` holds the generated message and stub classes; ``PsClient`` and ``PsCluster``
are what applications use. ``Server`` and ``Channel`` are grpclib's, with sniper's codec and
the HTTP/2 frame and window sizes that 5 MB tensor messages need.
"""

from sniper.rpc._client import Pooled as Pooled
from sniper.rpc._client import PsClient as PsClient
from sniper.rpc._client import PsCluster as PsCluster
from sniper.rpc._codec import SniperCodec as SniperCodec
from sniper.rpc._http2 import Channel as Channel
from sniper.rpc._http2 import Server as Server
from sniper.rpc._tensor import TensorError as TensorError
from sniper.rpc._tensor import decode as decode_tensor
from sniper.rpc._tensor import encode as encode_tensor

__all__ = [
    "Channel",
    "Pooled",
    "PsClient",
    "PsCluster",
    "Server",
    "SniperCodec",
    "TensorError",
    "decode_tensor",
    "encode_tensor",
]
