"""The contract: ``sniper.v1`` (in ``sniper.proto``), its Python protocols, and gRPC clients.

``sniper.rpc.v1`` holds the generated message and stub classes. :class:`PsApi` and
:class:`HubApi` are the calls as Python, implemented by the roles, the gRPC clients
(:class:`PsClient`, :class:`HubClient`) and the in-process transport alike. They speak
sniper's own values, never generated messages: :class:`VariableConfig` is what CreateVariable
takes, :class:`PsStats` (its :class:`VariableStats` and :class:`LatencySummary`) what Stats
answers, and :class:`Pooled`, :class:`Sample` and :class:`Checkpointed` are the other answers;
``config_*_message`` and ``stats_*_message`` are their wire forms, for a gRPC server of the
ps. Only ``sniper.rpc`` and the gRPC transport use the messages. :class:`Placement` is
``sniper.placement``'s, re-exported here where the calls take it; :func:`placement_to_message`
and :func:`placement_from_message` are its wire form. ``Server`` and ``Channel`` are
grpclib's, with sniper's codec and the HTTP/2 frame and window sizes that 5 MB tensor messages
need.
:class:`PeerError` is how a client's call fails in its transport: naming the peer, with
what to do.
"""

from sniper._metrics import LatencySummary as LatencySummary
from sniper.placement import Placement as Placement
from sniper.rpc._api import Checkpointed as Checkpointed
from sniper.rpc._api import DataServed as DataServed
from sniper.rpc._api import HubApi as HubApi
from sniper.rpc._api import LookupTarget as LookupTarget
from sniper.rpc._api import MovedVariable as MovedVariable
from sniper.rpc._api import NextLookup as NextLookup
from sniper.rpc._api import PendingFeed as PendingFeed
from sniper.rpc._api import Pooled as Pooled
from sniper.rpc._api import PsApi as PsApi
from sniper.rpc._api import Sample as Sample
from sniper.rpc._api import Signs as Signs
from sniper.rpc._api import Weights as Weights
from sniper.rpc._client import HubClient as HubClient
from sniper.rpc._client import PsClient as PsClient
from sniper.rpc._codec import SniperCodec as SniperCodec
from sniper.rpc._codegen import RPC_DIR as RPC_DIR
from sniper.rpc._generated.grpc.health.v1 import HealthBase as HealthBase
from sniper.rpc._generated.grpc.health.v1 import HealthCheckRequest as HealthCheckRequest
from sniper.rpc._generated.grpc.health.v1 import HealthCheckResponse as HealthCheckResponse
from sniper.rpc._generated.grpc.health.v1 import (
    HealthCheckResponseServingStatus as HealthCheckResponseServingStatus,
)
from sniper.rpc._http2 import Channel as Channel
from sniper.rpc._http2 import Server as Server
from sniper.rpc._moves import moved_from_message as moved_from_message
from sniper.rpc._moves import moved_to_message as moved_to_message
from sniper.rpc._peer import PeerError as PeerError
from sniper.rpc._peer import peer_error as peer_error
from sniper.rpc._placement import placement_from_message as placement_from_message
from sniper.rpc._placement import placement_to_message as placement_to_message
from sniper.rpc._security import Security as Security
from sniper.rpc._security import is_loopback as is_loopback
from sniper.rpc._security import load_token as load_token
from sniper.rpc._served import served_from_message as served_from_message
from sniper.rpc._served import served_to_message as served_to_message
from sniper.rpc._stats import PsStats as PsStats
from sniper.rpc._stats import VariableStats as VariableStats
from sniper.rpc._stats import stats_from_message as stats_from_message
from sniper.rpc._stats import stats_to_message as stats_to_message
from sniper.rpc._tensor import TensorError as TensorError
from sniper.rpc._tensor import check_wire_dtype as check_wire_dtype
from sniper.rpc._tensor import decode as decode
from sniper.rpc._tensor import decode as decode_tensor
from sniper.rpc._tensor import decode_floats as decode_floats
from sniper.rpc._tensor import encode as encode
from sniper.rpc._tensor import encode as encode_tensor
from sniper.rpc._tensor import present as tensor_present
from sniper.rpc._variable import VariableConfig as VariableConfig
from sniper.rpc._variable import config_from_message as config_from_message
from sniper.rpc._variable import config_to_message as config_to_message
from sniper.rpc._wire import EncodedLookupResponse as EncodedLookupResponse
from sniper.rpc._wire import EncodedPushResponse as EncodedPushResponse
from sniper.rpc._wire import EncodedSample as EncodedSample
from sniper.rpc._wire import FeedSampleView as FeedSampleView
from sniper.rpc._wire import LookupRequestView as LookupRequestView
from sniper.rpc._wire import PushGradView as PushGradView
from sniper.rpc._wire import SampleView as SampleView
from sniper.rpc._wire import VariableGradientView as VariableGradientView
from sniper.rpc._wire import VariableSignsView as VariableSignsView
from sniper.rpc._wire import decode_gradient as decode_gradient
from sniper.rpc._wire import lookup_response as lookup_response
from sniper.rpc._wire import push_response as push_response
from sniper.rpc._wire import read_sample_wire as read_sample_wire

__all__ = [
    "RPC_DIR",
    "Channel",
    "Checkpointed",
    "DataServed",
    "EncodedLookupResponse",
    "EncodedPushResponse",
    "EncodedSample",
    "FeedSampleView",
    "HealthBase",
    "HealthCheckRequest",
    "HealthCheckResponse",
    "HealthCheckResponseServingStatus",
    "HubApi",
    "HubClient",
    "LatencySummary",
    "LookupRequestView",
    "LookupTarget",
    "MovedVariable",
    "NextLookup",
    "PeerError",
    "PendingFeed",
    "Placement",
    "Pooled",
    "PsApi",
    "PsClient",
    "PsStats",
    "PushGradView",
    "Sample",
    "SampleView",
    "Security",
    "Server",
    "Signs",
    "SniperCodec",
    "TensorError",
    "VariableConfig",
    "VariableGradientView",
    "VariableSignsView",
    "VariableStats",
    "Weights",
    "check_wire_dtype",
    "config_from_message",
    "config_to_message",
    "decode",
    "decode_floats",
    "decode_gradient",
    "decode_tensor",
    "encode",
    "encode_tensor",
    "is_loopback",
    "load_token",
    "lookup_response",
    "moved_from_message",
    "moved_to_message",
    "peer_error",
    "placement_from_message",
    "placement_to_message",
    "push_response",
    "read_sample_wire",
    "served_from_message",
    "served_to_message",
    "stats_from_message",
    "stats_to_message",
    "tensor_present",
]
