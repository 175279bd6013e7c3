"""The contract: ``sniper.v1`` (in ``sniper.proto``), its Python protocols, and gRPC clients.

``sniper.rpc.v1`` holds the generated message and stub classes. :class:`PsApi` and
:class:`HubApi` are the calls as Python, implemented by the roles, the gRPC clients
(:class:`PsClient`, :class:`HubClient`) and the in-process transport alike; :class:`Pooled`,
:class:`Sample` and :class:`Checkpointed` are their answers. :class:`Placement` is
``sniper.placement``'s, re-exported here where the calls take it; :func:`placement_to_message`
and :func:`placement_from_message` are its wire form. ``Server`` and ``Channel`` are
grpclib's, with sniper's codec and the HTTP/2 frame and window sizes that 5 MB tensor messages
need.
"""

from sniper.placement import Placement as Placement
from sniper.rpc._api import Checkpointed as Checkpointed
from sniper.rpc._api import HubApi as HubApi
from sniper.rpc._api import LookupTarget as LookupTarget
from sniper.rpc._api import MovedVariable as MovedVariable
from sniper.rpc._api import Pooled as Pooled
from sniper.rpc._api import PsApi as PsApi
from sniper.rpc._api import Sample as Sample
from sniper.rpc._api import Signs as Signs
from sniper.rpc._api import variable_request as variable_request
from sniper.rpc._client import HubClient as HubClient
from sniper.rpc._client import PsClient as PsClient
from sniper.rpc._codec import SniperCodec as SniperCodec
from sniper.rpc._http2 import Channel as Channel
from sniper.rpc._http2 import Server as Server
from sniper.rpc._placement import placement_from_message as placement_from_message
from sniper.rpc._placement import placement_to_message as placement_to_message
from sniper.rpc._security import Security as Security
from sniper.rpc._tensor import TensorError as TensorError
from sniper.rpc._tensor import decode as decode_tensor
from sniper.rpc._tensor import encode as encode_tensor

__all__ = [
    "Channel",
    "Checkpointed",
    "HubApi",
    "HubClient",
    "LookupTarget",
    "MovedVariable",
    "Placement",
    "Pooled",
    "PsApi",
    "PsClient",
    "Sample",
    "Security",
    "Server",
    "Signs",
    "SniperCodec",
    "TensorError",
    "decode_tensor",
    "encode_tensor",
    "placement_from_message",
    "placement_to_message",
    "variable_request",
]
