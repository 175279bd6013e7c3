"""The grpcio peer of ``sniper bench rpc``: a server that answers EmbeddingLookup with fixed bytes.

Run as ``python -m sniper._bench._grpcio_peer VARIABLES BATCH DIM``; prints ``listening on
127.0.0.1:PORT`` and serves until stdin closes. The response is a real
``sniper.v1.EmbeddingLookupResponse`` of the same size as sniper's, serialized once, so this
measures what grpcio's transport costs for the same bytes.
"""

from __future__ import annotations

import sys
from concurrent import futures
from typing import Any

import grpc
import numpy as np

from sniper.rpc._generated.sniper.v1 import EmbeddingLookupResponse, PooledEmbedding
from sniper.rpc._tensor import encode

MAX_MESSAGE = 256 * 2**20


def response_bytes(variables: int, batch: int, dim: int) -> bytes:
    pooled = np.random.default_rng(0).normal(size=(batch, dim)).astype(np.float32)
    return bytes(
        EmbeddingLookupResponse(
            embeddings=[
                PooledEmbedding(name=f"embedding_{i}", pooled=encode(pooled), kernel_seconds=0.0)
                for i in range(variables)
            ]
        )
    )


def main() -> None:
    variables, batch, dim = (int(a) for a in sys.argv[1:4])
    payload = response_bytes(variables, batch, dim)

    def lookup(request: bytes, context: Any) -> bytes:
        return payload

    handler = grpc.method_handlers_generic_handler(
        "sniper.v1.Ps",
        {
            "EmbeddingLookup": grpc.unary_unary_rpc_method_handler(
                lookup, request_deserializer=None, response_serializer=None
            )
        },
    )
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.max_receive_message_length", MAX_MESSAGE),
    ]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=options)
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    sys.stdin.read()
    server.stop(grace=1).wait()


if __name__ == "__main__":
    main()
