"""sniper's own values of the ps calls and their messages: what the gRPC client sends is what
the role receives, and the wire's unset fields read as their documented meaning."""

from __future__ import annotations

from sniper.rpc import (
    LatencySummary,
    PsStats,
    VariableConfig,
    VariableStats,
    config_from_message,
    config_to_message,
    stats_from_message,
    stats_to_message,
)
from sniper.rpc.v1 import CreateVariableRequest, StatsResponse


def test_a_config_crosses_the_wire_unchanged() -> None:
    config = VariableConfig(
        "emb",
        8,
        1000,
        optimizer="ftrl",
        optimizer_params={"alpha": 0.05, "l1": 1.0},
        initializer=("normal", 0.0, 0.1),
        shards=3,
        eviction="lru",
        admission_min_count=2,
        admission_sketch_width=64,
        admission_sketch_depth=2,
        seed=11,
    )
    message = config_to_message(config)
    assert config_from_message(CreateVariableRequest().parse(bytes(message))) == config


def test_unset_fields_read_as_their_meaning() -> None:
    config = config_from_message(CreateVariableRequest(name="v", dim=4, capacity=8))
    assert config == VariableConfig("v", 4, 8, optimizer="", shards=1, eviction="lru")
    assert config.initializer is None and config.admission_min_count == 0


def test_a_config_keeps_its_own_copy_of_the_optimizer_params() -> None:
    params = {"lr": 0.1}
    config = VariableConfig("v", 4, 8, optimizer_params=params)
    params["lr"] = 1.0
    assert config.optimizer_params == {"lr": 0.1}


def test_stats_cross_the_wire_unchanged() -> None:
    stats = PsStats(
        latencies={
            "EmbeddingLookup": LatencySummary(3, 10.0, 20.0, 30.0, 40.0),
            "EmbeddingLookup.kernel": LatencySummary(9, 1.0, 2.0, 3.0, 4.0),
        },
        variables=(
            VariableStats(
                name="emb",
                rows=5,
                capacity=100,
                inserts=5,
                evictions=0,
                hits=7,
                misses=5,
                admitted=5,
                rejected=0,
                dropped_gradients=0,
                bytes=4096,
                shards=2,
                nonfinite_updates=1,
                kernel_seconds=0.25,
            ),
        ),
        scheduler="inline",
        pending_batches=2,
        nonfinite_gradients=1,
        cpu_seconds=1.5,
    )
    message = StatsResponse().parse(bytes(stats_to_message(stats)))
    assert [s.name for s in message.latencies] == ["EmbeddingLookup", "EmbeddingLookup.kernel"]
    assert stats_from_message(message) == stats
