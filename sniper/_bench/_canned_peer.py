"""Servers for ``sniper bench rpc`` that answer EmbeddingLookup with fixed bytes.

Run as ``python -m sniper._bench._canned_peer {grpcio,sniper} VARIABLES BATCH DIM``; prints
``listening on 127.0.0.1:PORT`` and serves until stdin closes. The response is a real
``sniper.v1.EmbeddingLookupResponse`` of the same size as sniper's, serialized once, so this
measures what a transport costs for the same bytes: grpcio's C core, or sniper's own
grpclib server and codec (``sniper.rpc.Server``) without any table work.
"""

from __future__ import annotations

import sys
from concurrent import futures
from typing import Any

import anyio
import grpc
import numpy as np
from grpclib.const import Cardinality, Handler

from sniper.rpc import EncodedLookupResponse, Server, encode
from sniper.rpc.v1 import EmbeddingLookupRequest, EmbeddingLookupResponse, PooledEmbedding
from sniper.runtime import reuse_freed_memory
from sniper.transport import bound_address

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


def _serve_grpcio(payload: bytes) -> None:
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


class _CannedPs:
    """A grpclib service answering every EmbeddingLookup with the same encoded bytes."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    async def _lookup(self, stream: Any) -> None:
        await stream.recv_message()
        await stream.send_message(EncodedLookupResponse([self.payload]))

    def __mapping__(self) -> dict[str, Handler]:
        return {
            "/sniper.v1.Ps/EmbeddingLookup": Handler(
                self._lookup,
                Cardinality.UNARY_UNARY,
                EmbeddingLookupRequest,
                EmbeddingLookupResponse,
            )
        }


async def _serve_sniper(payload: bytes) -> None:
    server = Server([_CannedPs(payload)], max_message_bytes=MAX_MESSAGE)
    await server.start("127.0.0.1", 0)
    _, port = bound_address(server)
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.read)
    server.close()
    await server.wait_closed()


def main() -> None:
    transport = sys.argv[1]
    variables, batch, dim = (int(a) for a in sys.argv[2:5])
    payload = response_bytes(variables, batch, dim)
    reuse_freed_memory()  # as every sniper process does; the bench's clients share it too
    if transport == "grpcio":
        _serve_grpcio(payload)
    else:
        anyio.run(_serve_sniper, payload, backend="asyncio")


if __name__ == "__main__":
    main()
