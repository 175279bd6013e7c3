"""auto_shard: planning moves, the placement table, and moves that lose no gradient.

The exactness test drives a real hub and four real ps step by step with gradients that depend
only on the batch, so that a run with moves and one without must read the same pooled
embeddings and end with the same rows, bit for bit: a gradient lost, applied twice or applied
to the wrong ps, or a fed batch left behind on the old owner, would show.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import numpy as np
import pytest
from numpy.typing import NDArray

from sniper.cluster import ModelSpec, probe_data
from sniper.cluster._job import drop_misplaced
from sniper.data import SyntheticCtr, load_workload
from sniper.hashing import ps_for_variable
from sniper.placement import Move, Placement, plan_moves
from sniper.roles import (
    AutoShard,
    HubConfig,
    HubRole,
    PsCluster,
    PsEngine,
    PsRole,
    TrainerConfig,
)
from sniper.rpc import (
    MovedVariable,
    VariableConfig,
    placement_from_message,
    placement_to_message,
)
from sniper.scheduler import open_scheduler
from sniper.testing import local_cluster

NUM_PS = 4
BATCHES = 14
HEAVY = "embedding_11"  # seed_ctr's largest variable


# -- planning --------------------------------------------------------------------------------


def test_plan_moves_takes_the_variable_nearest_half_the_gap() -> None:
    placement = Placement(2, {"a": 0, "b": 0, "c": 0, "d": 1})
    costs = {"a": 6.0, "b": 3.0, "c": 1.0, "d": 2.0}  # ps 0: 10, ps 1: 2, gap 8
    assert plan_moves(costs, placement, ratio=1.5) == [Move("b", 0, 1, 3.0)]


def test_plan_moves_leaves_an_even_enough_cluster_alone() -> None:
    placement = Placement(2, {"a": 0, "b": 1})
    assert plan_moves({"a": 1.4, "b": 1.0}, placement, ratio=1.5) == []


def test_plan_moves_never_makes_the_lighter_ps_the_busier() -> None:
    placement = Placement(2, {"a": 0, "b": 1})
    # Moving a (5) would leave ps 1 at 6 > 5: no move lowers the busiest ps.
    assert plan_moves({"a": 5.0, "b": 1.0}, placement, ratio=1.1) == []


def test_plan_moves_fills_an_idle_ps_and_respects_exclusions() -> None:
    placement = Placement(3, {"a": 0, "b": 0, "c": 0})
    costs = {"a": 4.0, "b": 3.0, "c": 2.0}
    moves = plan_moves(costs, placement, ratio=1.2, max_moves=2)
    assert [m.to for m in moves] == [1, 2]
    assert len({m.variable for m in moves}) == 2
    excluded = plan_moves(costs, placement, ratio=1.2, exclude=frozenset({"a", "b", "c"}))
    assert excluded == []


def test_placement_versions_and_moving_home() -> None:
    hashed = Placement(4)
    home = ps_for_variable(HEAVY, 4)
    away = hashed.moved(HEAVY, (home + 1) % 4)
    assert away.version == 1 and away.owner(HEAVY) == (home + 1) % 4
    back = away.moved(HEAVY, home)
    assert back.version == 2 and back.owners == {} and back.owner(HEAVY) == home
    assert placement_from_message(placement_to_message(away)) == away
    assert Placement.from_dict(away.to_dict()) == away


def test_placement_refuses_an_owner_outside_the_cluster() -> None:
    with pytest.raises(ValueError, match="puts variable 'x' on ps 4, but there are 4 ps"):
        Placement(4, {"x": 4})


def test_auto_shard_keys_are_checked() -> None:
    with pytest.raises(ValueError, match="auto_shard_ratio must be at least 1"):
        TrainerConfig(auto_shard_ratio=0.5)
    with pytest.raises(ValueError, match="auto_shard_window"):
        TrainerConfig(auto_shard_window=0)


# -- moves lose no gradient ------------------------------------------------------------------

Rows = dict[str, tuple[NDArray[np.generic], ...]]
Lookups = list[dict[str, NDArray[np.float32]]]


def _sorted_rows(moved: MovedVariable) -> tuple[NDArray[np.generic], ...]:
    order = np.argsort(moved.signs)
    return moved.signs[order], moved.weights[order], moved.state[order], moved.steps[order]


def _gradient(batch_id: int, shape: tuple[int, int]) -> NDArray[np.float32]:
    return (np.random.default_rng(batch_id).normal(size=shape) * 0.1).astype(np.float32)


async def _drive(moves: dict[int, list[tuple[str, int | None]]]) -> tuple[Lookups, Rows, list[int]]:
    """Train BATCHES steps on 4 ps and a hub that feeds ahead; before step ``s``, make the
    moves ``moves[s]`` (variable, to; None: back to its hashed ps). Returns every lookup, the
    final rows of every variable, and how many fed batches each move carried."""
    reader = SyntheticCtr(load_workload("seed_ctr"), num_batches=BATCHES, scale=0.002, seed=3)
    names = list(reader.variables)
    configs = {
        name: VariableConfig(name, 4, 50_000, optimizer="adam" if i % 2 else "adagrad", shards=2)
        for i, name in enumerate(names)
    }
    async with AsyncExitStack() as stack:
        ps = []
        for _ in range(NUM_PS):
            scheduler = await stack.enter_async_context(open_scheduler("thread_pool", workers=2))
            ps.append(PsRole(PsEngine(scheduler)))
        cluster = PsCluster(ps)
        for name, config in configs.items():
            await cluster.owner(name).create_variable(config)
        hub = HubRole(reader, PsCluster(ps), HubConfig(max_in_flight=4, queue_size=8))
        shard = AutoShard(cluster, [hub], configs)
        carried: list[int] = []
        looked: Lookups = []
        async with anyio.create_task_group() as group:
            group.start_soon(hub.run)
            for step in range(BATCHES):
                for name, to in moves.get(step, []):
                    while hub.batches_fed < min(step + 6, BATCHES):
                        await anyio.sleep(0.005)  # let the hub feed ahead of the trainer
                    source = cluster.placement.owner(name)
                    target = ps_for_variable(name, NUM_PS) if to is None else to
                    await shard.move(step, Move(name, source, target, 0.0))
                    assert name not in ps[source].engine.variables
                    carried.append(len(ps[target].engine.batches_of(name)))
                sample = await hub.read_sample()
                assert sample is not None
                await hub.acknowledge([sample.batch_id])
                pooled = await cluster.embedding_lookup(sample.batch_id, names)
                looked.append({name: p.pooled.copy() for name, p in pooled.items()})
                grads = {
                    name: _gradient(sample.batch_id * 100 + i, pooled[name].pooled.shape)
                    for i, name in enumerate(names)
                }
                await cluster.push_grad(sample.batch_id, grads)
            assert await hub.read_sample() is None
            group.cancel_scope.cancel()
        rows = {
            name: _sorted_rows(await cluster.owner(name).export_variable(name)) for name in names
        }
        for name in names:  # each variable is held by exactly the ps the placement names
            holders = [i for i, role in enumerate(ps) if name in role.engine.variables]
            assert holders == [cluster.placement.owner(name)]
        return looked, rows, carried


@pytest.mark.anyio
async def test_moves_train_the_same_rows_as_no_moves() -> None:
    reference, reference_rows, _ = await _drive({})
    home = ps_for_variable(HEAVY, NUM_PS)
    other = "embedding_0"
    moves: dict[int, list[tuple[str, int | None]]] = {
        3: [(HEAVY, (home + 1) % NUM_PS)],
        6: [(other, (ps_for_variable(other, NUM_PS) + 2) % NUM_PS), (HEAVY, (home + 2) % NUM_PS)],
        9: [(HEAVY, None)],  # back home
    }
    looked, rows, carried = await _drive(moves)
    assert all(count > 0 for count in carried), carried  # fed batches travelled with them
    assert len(looked) == len(reference) == BATCHES
    for step, (ours, theirs) in enumerate(zip(looked, reference, strict=True)):
        for name in theirs:
            assert np.array_equal(ours[name], theirs[name]), (step, name)
    assert rows.keys() == reference_rows.keys()
    for name, arrays in reference_rows.items():
        for ours_array, theirs_array in zip(rows[name], arrays, strict=True):
            assert np.array_equal(ours_array, theirs_array), name


# -- the trainer plans and makes moves while training ----------------------------------------


@pytest.mark.anyio
async def test_a_trainer_moves_variables_with_windows_shorter_than_its_pipeline() -> None:
    """A window (2 steps) shorter than a pause's drain (prefetch 4): windows that end while a
    pause drains plan nothing, so no move is planned twice or from a stale placement."""
    reports = []
    for auto_shard in (False, True):
        shape, reader = probe_data(
            "synthetic",
            workload=load_workload("seed_ctr"),
            scale=0.002,
            batch_size=256,
            seed=1,
            num_batches=48,
        )
        tables = ModelSpec.parse({"default": {"dim": 4}}, default_dim=4).resolve(shape)
        async with local_cluster(reader, tables, shape.dense_features, num_ps=NUM_PS) as job:
            config = TrainerConfig(
                progress=False,
                prefetch=4,
                max_steps=40,
                auto_shard=auto_shard,
                auto_shard_ratio=1.0,
                auto_shard_window=2,
                auto_shard_max_moves=2,
            )
            report = await job.train(config)
            held = {
                name: [i for i, ps in enumerate(job.ps) if name in ps.engine.variables]
                for name in tables
            }
            assert held == {name: [job.cluster.placement.owner(name)] for name in tables}
        reports.append(report)
    plain, shard = reports
    assert not plain.moves and plain.placement_version == 0
    assert shard.moves and shard.placement_version == len(shard.moves)
    assert len({(m["step"], m["variable"]) for m in shard.moves}) == len(shard.moves)
    assert (shard.steps, shard.examples) == (plain.steps, plain.examples)


@pytest.mark.anyio
async def test_a_stale_copy_on_a_ps_the_placement_does_not_name_is_dropped() -> None:
    """A job resumed against ps that kept running: the variable moved after the checkpoint is
    still on its later owner, and the restored placement names the earlier one."""
    async with AsyncExitStack() as stack:
        ps = []
        for _ in range(2):
            scheduler = await stack.enter_async_context(open_scheduler("inline", workers=1))
            ps.append(PsRole(PsEngine(scheduler)))
        home = ps_for_variable(HEAVY, 2)
        for role in ps:
            await role.create_variable(VariableConfig(HEAVY, 4, 100))
        await ps[home].create_variable(VariableConfig("other", 4, 100))
        await drop_misplaced(PsCluster(ps), [HEAVY])
        assert [HEAVY in role.engine.variables for role in ps] == [i == home for i in range(2)]
        assert "other" in ps[home].engine.variables  # not this job's: left alone
