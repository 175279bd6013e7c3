"""A naive pure-Python embedding table: the model that the numba kernels are checked against.

It keeps a dict of rows and models the same documented semantics in the plainest way:
CLOCK eviction per shard, admission by exact sighting counts, per-sign initial values, and
each optimizer written out in float32 numpy, one row at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from sniper.hashing import shard_of_sign
from sniper.store import SGD, Adagrad, Adam, EmbeddingTable, Ftrl, Optimizer


@dataclass
class _Shard:
    capacity: int
    order: list[int] = field(default_factory=list)  # row slot -> sign (allocation order)
    referenced: dict[int, bool] = field(default_factory=dict)
    hand: int = 0

    def evict(self, pinned: set[int]) -> int | None:
        """Return the sign evicted by one CLOCK sweep, or None when every row is pinned."""
        for _ in range(2 * self.capacity + 1):
            sign = self.order[self.hand]
            position = self.hand
            self.hand = (self.hand + 1) % self.capacity
            if sign in pinned:
                continue
            if self.referenced[sign]:
                self.referenced[sign] = False
                continue
            del self.referenced[sign]
            return position
        return None


class ReferenceTable:
    """Same constructor shape as ``EmbeddingTable`` (the subset the tests use)."""

    def __init__(self, like: EmbeddingTable) -> None:
        self.like = like
        self.dim = like.dim
        self.optimizer: Optimizer = like.optimizer
        self.rows: dict[int, NDArray[np.float32]] = {}
        self.state: dict[int, NDArray[np.float32]] = {}
        self.steps: dict[int, int] = {}
        self.sightings: dict[int, int] = {}
        caps = [like.capacity // like.num_shards] * like.num_shards
        for i in range(like.capacity % like.num_shards):
            caps[i] += 1
        self.shards = [_Shard(c) for c in caps]
        self.min_count = like.admission.min_count if like.admission else 0
        self.dropped = 0

    def _fresh_initial(self, sign: int) -> NDArray[np.float32]:
        fresh = EmbeddingTable(
            self.dim,
            capacity=1,
            optimizer=SGD(1.0),
            initializer=self.like.initializer,
            seed=self.like.seed,
        )
        row: NDArray[np.float32] = fresh.get(np.array([sign], dtype=np.uint64))[0]
        return row

    def _row(self, sign: int, count_sighting: bool, pinned: set[int]) -> bool:
        """Make sure ``sign`` has a row if admission allows; return whether it has one."""
        shard = self.shards[shard_of_sign(sign, len(self.shards))]
        if sign in self.rows:
            shard.referenced[sign] = True
            pinned.add(sign)
            return True
        if self.min_count > 1:
            if count_sighting:
                self.sightings[sign] = self.sightings.get(sign, 0) + 1
            if self.sightings.get(sign, 0) < self.min_count:
                return False
        if len(shard.order) < shard.capacity:
            shard.order.append(sign)
        else:
            position = shard.evict(pinned)
            assert position is not None, "reference ran out of rows"
            victim = shard.order[position]
            del self.rows[victim], self.state[victim], self.steps[victim]
            shard.order[position] = sign
        self.rows[sign] = self._fresh_initial(sign).copy()
        self.state[sign] = np.tile(self.optimizer.state_init()[:, None], (1, self.dim))
        self.steps[sign] = 0
        shard.referenced[sign] = True
        pinned.add(sign)
        return True

    def _map_shardwise(self, signs: NDArray[np.uint64], count: bool) -> list[bool]:
        """Whether each position has a row, mapped shard by shard in the table's order.

        Admission is decided per sighting: within one batch, the sighting that reaches
        ``min_count`` gets the row, the ones before it read as zeros.
        """
        has_row = [False] * len(signs)
        by_shard: list[list[int]] = [[] for _ in self.shards]
        for position, s in enumerate(signs.tolist()):
            by_shard[shard_of_sign(s, len(self.shards))].append(position)
        for members in by_shard:
            pinned: set[int] = set()
            for position in members:
                has_row[position] = self._row(int(signs[position]), count, pinned)
        return has_row

    def lookup_pool(
        self, signs: NDArray[np.uint64], offsets: NDArray[np.int64]
    ) -> NDArray[np.float32]:
        has_row = self._map_shardwise(signs, True)
        out = np.zeros((len(offsets) - 1, self.dim), dtype=np.float32)
        for b in range(len(offsets) - 1):
            for position in range(offsets[b], offsets[b + 1]):
                if has_row[position]:
                    out[b] += self.rows[int(signs[position])]
        return out

    def push_grad(
        self, signs: NDArray[np.uint64], offsets: NDArray[np.int64], grads: NDArray[np.float32]
    ) -> None:
        has_row = self._map_shardwise(signs, False)
        summed: dict[int, NDArray[np.float32]] = {}
        for b in range(len(offsets) - 1):
            for position in range(offsets[b], offsets[b + 1]):
                s = int(signs[position])
                if not has_row[position]:
                    self.dropped += 1
                    continue
                summed[s] = summed.get(s, np.zeros(self.dim, np.float32)) + grads[b]
        for s, g in summed.items():
            self._apply(s, g.astype(np.float32))

    def _apply(self, sign: int, g: NDArray[np.float32]) -> None:
        w, st, opt = self.rows[sign], self.state[sign], self.optimizer
        f32 = np.float32
        if isinstance(opt, SGD):
            w -= f32(opt.lr) * g
        elif isinstance(opt, Adagrad):
            st[0] += g * g
            w -= f32(opt.lr) * g / (np.sqrt(st[0]) + f32(opt.eps))
        elif isinstance(opt, Adam):
            self.steps[sign] += 1
            t = self.steps[sign]
            st[0] = f32(opt.beta1) * st[0] + (f32(1) - f32(opt.beta1)) * g
            st[1] = f32(opt.beta2) * st[1] + (f32(1) - f32(opt.beta2)) * g * g
            step_size = f32(opt.lr / (1 - opt.beta1**t))
            denom = np.sqrt(st[1]) / f32(math.sqrt(1 - opt.beta2**t)) + f32(opt.eps)
            w -= step_size * st[0] / denom
        elif isinstance(opt, Ftrl):
            for d in range(self.dim):
                gd, n_old = float(g[d]), float(st[1, d])
                n_new = n_old + gd * gd
                sigma = (math.sqrt(n_new) - math.sqrt(n_old)) / opt.alpha
                z = float(st[0, d]) + gd - sigma * float(w[d])
                st[0, d], st[1, d] = z, n_new
                w[d] = (
                    0.0
                    if abs(z) <= opt.l1
                    else (
                        (math.copysign(1.0, z) * opt.l1 - z)
                        / ((opt.beta + math.sqrt(n_new)) / opt.alpha + opt.l2)
                    )
                )
        else:  # pragma: no cover - the tests only build the four optimizers
            raise TypeError(f"unknown optimizer {opt!r}")

    def held(self) -> set[int]:
        return set(self.rows)
