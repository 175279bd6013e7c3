"""Mount sniper's ps service in your own grpclib server, next to your own services.

Run it: ``python examples/embedded_ps.py``. It starts one grpclib server on a free loopback
port that serves sniper's ``sniper.v1.Ps`` and the standard health service, which also answers
for the application's own service name (``myapp.v1.Ranking``: put your service objects in the
same list). Then it talks to the ps with sniper's client and prints what it got.
"""

from __future__ import annotations

import asyncio

import numpy as np

from sniper.roles import PsEngine, PsRole
from sniper.rpc import PsClient, Server, VariableConfig
from sniper.scheduler import open_scheduler
from sniper.transport import HealthService, PsService, bound_address


async def main() -> None:
    async with open_scheduler("work_stealing", workers=2) as scheduler:
        role = PsRole(PsEngine(scheduler))
        ps = PsService(role)  # the gRPC adapter: decodes, calls the role, encodes
        # Your own services go in the same list; the health service answers for all of them.
        health = HealthService(("sniper.v1.Ps", "myapp.v1.Ranking"), lambda: not role.draining)
        # sniper.rpc.Server is a grpclib.server.Server with sniper's codec and HTTP/2 frame and
        # window sizes; a plain grpclib Server(..., codec=SniperCodec(...)) works too, slower.
        server = Server([ps, health], max_message_bytes=64 * 2**20)
        await server.start("127.0.0.1", 0)
        host, port = bound_address(server)
        client = PsClient(host, port)
        try:
            await client.create_variable(
                VariableConfig(
                    "user_id",
                    dim=8,
                    capacity=10_000,
                    optimizer="adagrad",
                    optimizer_params={"lr": 0.05},
                )
            )
            signs = np.array([101, 202, 101, 303], dtype=np.uint64)
            offsets = np.array([0, 2, 4], dtype=np.int64)
            await client.feed_sample(1, {"user_id": (signs, offsets)})
            pooled = (await client.embedding_lookup(1, ["user_id"]))["user_id"].pooled
            await client.push_grad(1, {"user_id": np.ones_like(pooled)})
            stats = await client.stats()
            print(
                f"served on {host}:{port}: pooled {pooled.shape}, "
                f"{stats.variables[0].rows} rows, ops {list(stats.latencies)[:3]}"
            )
        finally:
            client.close()
            server.close()
            await server.wait_closed()


if __name__ == "__main__":
    asyncio.run(main())
