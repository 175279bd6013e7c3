"""``Ranks``: the collective of a job's trainer ranks, on a real gloo process group of one rank
(several ranks run as processes in ``tests/cluster/test_ranks.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from sniper.models import MlpModel, ModelInputs, TrainStep
from sniper.roles import RankMaster, Ranks
from sniper.roles._ranks import _reason

pytest.importorskip("torch.distributed")


@pytest.fixture
def ranks() -> Iterator[Ranks]:
    joined = Ranks(0, 1, RankMaster("127.0.0.1", 1, timeout=30.0), timeout=30.0)
    try:
        yield joined
    finally:
        joined.close()


def test_average_weighs_each_rank(ranks: Ranks) -> None:
    grads = [np.array([2.0, 4.0], dtype=np.float32), np.ones((2, 2), dtype=np.float32)]
    assert ranks.average(grads) is True
    np.testing.assert_array_equal(grads[0], [2.0, 4.0])
    assert ranks.contributors == 1
    assert ranks.bytes_per_step == 4 * (2 + 4 + 1)
    # A rank whose data ended weighs 0; with no rank left, there is nothing to apply.
    assert ranks.average(grads, 0.0) is False
    assert ranks.contributors == 0
    assert ranks.allreduce.count == 2


def test_gather_broadcast_and_any(ranks: Ranks) -> None:
    assert ranks.gather({"tickets": 3}) == [{"tickets": 3}]
    assert ranks.broadcast({"ps": [("127.0.0.1", 1)]}) == {"ps": [("127.0.0.1", 1)]}
    assert ranks.any(True) and not ranks.any(False)
    ranks.barrier()


def test_the_mlp_averaged_on_one_rank_is_the_mlp(ranks: Ranks) -> None:
    inputs = ModelInputs({"a": 4}, 2)
    alone, averaged = MlpModel(inputs, seed=1), MlpModel(inputs, seed=1)
    x = np.random.default_rng(0).normal(size=(8, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.float32)
    alone.train_step(x, y).update()
    averaged.train_step(x, y).update_averaged(ranks.average)
    for name, array in alone.state().items():
        np.testing.assert_array_equal(averaged.state()[name], array, err_msg=name)


def test_a_step_that_cannot_average_says_so() -> None:
    class Plain(TrainStep):
        def update(self) -> None:
            pass

    with pytest.raises(NotImplementedError, match="Plain cannot train with num_trainers > 1"):
        Plain().update_averaged(lambda grads: True)


def test_a_failed_collective_is_said_in_its_first_sentence_without_a_build_path() -> None:
    # What gloo said when a rank was killed mid-run: a build machine's path, then advice for
    # torch's own launcher; the line kept it all and cut it at 200 characters, mid-word.
    said = (
        "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection "
        "closed by peer [127.0.0.1]:15777. This is typically caused by a remote worker "
        "crashing. Check the logs of the remote worker for the root cause."
    )
    assert _reason(RuntimeError(said)) == "Connection closed by peer [127.0.0.1]:15777."
    # The cause in a line's middle stays: a port taken, the ranks that joined in time.
    taken = (
        "The server socket has failed to listen on any local network address. port: 36919, "
        "useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
    )
    assert _reason(RuntimeError(taken)) == taken
    late = "Timed out after 30.1 seconds waiting for clients. 1/2 clients joined."
    assert _reason(RuntimeError(late)) == late
    long = _reason(RuntimeError("word " * 60))
    assert long.endswith("word ...") and len(long) <= 204
    assert _reason(RuntimeError("")) == "RuntimeError"
