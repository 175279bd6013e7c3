"""Synthetic CTR batches in a workload's shape, with labels a model can learn.

Shape. Each variable draws zipf-distributed signs (``P(rank r) ~ (r + 1) ** -exponent`` over its
vocabulary, turned into signs by ``sniper.data._zipf.signs_of_ranks``). ``scale`` multiplies every
variable's signs per batch and vocabulary, but a variable keeps at least one sign per example
on average: at small scales most variables become one-hot fields, as real CTR fields mostly are,
instead of leaving most examples without a sign. A ``seed_ctr`` batch holds 719k signs at scale
1, ~97k at 0.05 and ~83k at 0.02. With a mean of ``m`` signs per example, each example gets
``floor(m)`` or ``ceil(m)``, so every batch of a variable has exactly the same number of signs,
as in the seed logs. ``batch_size`` may differ from the workload's; signs per example stay.

The planted model. Labels are ``Bernoulli(sigmoid(logit))`` with::

    logit = bias + sum over variables v of  c_v * sum over the example's signs s of w_v(s)
                 + sum over dense features j of  beta_j * (x_j - mean_j) / std_j

- ``w_v(s)``, the hidden weight of a sign, is a standard normal draw for each of the
  :data:`SIGNAL_RANKS` most frequent ranks of ``v`` (seeded by ``(seed, field)``, so a pure
  function of the seed, the variable at its scale, and the sign) and 0 for every rarer sign,
  rescaled so that the weight of one zipf draw has variance 1. All of the signal is in the head
  because that is what a model can learn from a few hundred batches: the 16th rank of a one-hot
  variable still turns up ~7 times in every batch of 1024 (~2000 times in 300 steps), and the 16
  ranks hold 40-50% of the draws, whereas tail signs, seen once or never, carry nothing a model
  could learn and only add noise to it. (Weighting the top 64 ranks instead costs the logistic
  regression described below 1-4 points of the oracle's lift.)
- ``c_v = importance_v / sqrt(mean signs per example)``, so that a variable contributes variance
  ``importance_v ** 2`` whatever its bag size, and the logit is exactly linear in the sum-pooled
  weights: an embedding model with sum pooling can represent the planted model exactly.
  Importances are lognormal (a few variables matter much more than the rest, as real fields do)
  and scaled so that the sparse part of the logit has standard deviation :data:`SPARSE_STD`.
- Dense features are ``log(1 + x)`` of exponential counts with per-feature means from 1 to e^4,
  the transform Criteo's integer columns get; their standardized linear term has standard
  deviation :data:`DENSE_STD` (about 15% of the logit's variance: easy lift for any model).
- ``bias`` is solved on a calibration sample so that the positive rate is the workload's.

Several labels (a workload's ``labels``, for multi-task models): label ``k`` has its own dense
coefficients and bias (its own positive rate) over the same sparse part, so the tasks share what
the embeddings learn and differ in what the dense features say; label 0 is the single label's
planted model, drawn with the same random numbers.

With a logit standard deviation of ~1.3 at a 9% positive rate the planted model, which knows
every weight, reaches an AUC of 0.79-0.83 depending on the seed, at every scale (the oracle):
high enough that a learned model's progress is unmistakable, low enough to leave realistic label
noise. A logistic regression on hashed signs with FTRL (alpha 0.1, beta 1, L1 3, L2 1) reaches
~90% of the oracle's lift over 0.5 after 100-200 batches of 1024 at scale 0.02 or 0.05 and ~93%
after 300; with plain Adagrad (lr 0.1), which learns noise from rare signs, ~88% after 300.
:meth:`SyntheticCtr.oracle_auc` measures the oracle; :meth:`SyntheticCtr.oracle_logits` scores
any batch, also one read back from a Parquet file, because the sign hash is a bijection whose
inverse gives back each sign's rank.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from sniper._hashing import mix_u64
from sniper.data._batch import Batch, Ragged
from sniper.data._checks import check_int
from sniper.data._metrics import roc_auc
from sniper.data._reader import check_stream
from sniper.data._sampling import ZipfColumns, unmix_u64
from sniper.data._workload import Workload
from sniper.data._zipf import signs_of_ranks

__all__ = ["DENSE_STD", "SIGNAL_RANKS", "SPARSE_STD", "SyntheticCtr"]

SIGNAL_RANKS = 16
"""Most frequent ranks of each variable that carry a hidden weight; rarer signs weigh 0."""
SPARSE_STD = 1.2
"""Standard deviation of the sparse part of the planted logit."""
DENSE_STD = 0.5
"""Standard deviation of the dense part of the planted logit."""
IMPORTANCE_SIGMA = 1.0
"""Log-scale spread of the variables' importances."""
CALIBRATION_EXAMPLES = 16384
"""Examples drawn to solve the bias and the dense features' moments."""

_SLICE = 1 << 15
"""Signs drawn per pass, small enough that a pass's temporaries stay in the CPU cache."""
# Independent random streams of one seed, as the first words of a SeedSequence entropy.
_STREAM_BATCH = 0
_STREAM_CALIBRATION = 1
_STREAM_WEIGHTS = 2
_STREAM_MODEL = 3


class _SparseModel:
    """Every variable's shape at this scale, and the sparse part of the planted model.

    All variables are drawn together (:class:`ZipfColumns`): the hidden weight of a sign, times
    its variable's coefficient, is attached to the alias column it was drawn from, so one gather
    gives every sign's share of the logit.
    """

    def __init__(self, generator: SyntheticCtr, importances: NDArray[np.float64]) -> None:
        workload, scale, size = generator.workload, generator.scale, generator.batch_size
        self.specs = workload.variables
        per_example = [
            max(1.0, v.signs_per_batch * scale / workload.batch_size) for v in self.specs
        ]
        counts = [round(m * size) for m in per_example]
        vocabularies = [max(1, round(v.vocabulary * scale)) for v in self.specs]
        self.zipf = ZipfColumns(vocabularies, counts, workload.zipf_exponent)
        self.size = size
        # The key of rank 0 of each field, recovered from the sign contract itself, so the
        # keys below are exactly those of sniper.data._zipf.signs_of_ranks: key = field_key | rank.
        rank_zero = np.zeros(1, dtype=np.int64)
        self.field_keys = np.array(
            [unmix_u64(signs_of_ranks(rank_zero, v.field))[0] for v in self.specs],
            dtype=np.uint64,
        )
        self._key_bits = np.repeat(self.field_keys, self.zipf.counts)
        self.column_weights = np.zeros(len(self.zipf.column_probabilities), dtype=np.float64)
        self.fixed_offsets: list[NDArray[np.int64] | None] = []
        for v, spec in enumerate(self.specs):
            first = int(self.zipf.column_starts[v])
            head = min(SIGNAL_RANKS, int(self.zipf.heads[v]))
            hidden = np.random.default_rng([generator.seed, _STREAM_WEIGHTS, spec.field])
            weights = hidden.standard_normal(head)
            # Variance of one draw's weight: its rank is zipf, ranks past the head weigh 0.
            p = self.zipf.column_probabilities[first : first + head]
            variance = float(p @ weights**2 - (p @ weights) ** 2)
            weights /= math.sqrt(variance) if variance > 0 else 1.0
            coefficient = importances[v] / math.sqrt(counts[v] / size)
            self.column_weights[first : first + head] = coefficient * weights
            self.fixed_offsets.append(_even_offsets(counts[v], size))
        # Where each variable's examples start and end among all signs of a batch; the rows of
        # variables with random counts are filled in per batch.
        self._bounds = np.zeros((len(self.specs), size + 1), dtype=np.int64)
        for v, fixed in enumerate(self.fixed_offsets):
            if fixed is not None:
                np.add(fixed, self.zipf.starts[v], out=self._bounds[v])

    def draw(self, rng: np.random.Generator) -> tuple[dict[str, Ragged], NDArray[np.float64]]:
        """One batch of every variable's signs, and the sparse part of each example's logit."""
        total = self.zipf.total
        signs = np.empty(total, dtype=np.uint64)
        weights = np.empty(total, dtype=np.float64)
        for start in range(0, total, _SLICE):
            stop = min(start + _SLICE, total)
            ranks, columns = self.zipf.sample(rng, start, stop)
            keys = ranks.view(np.uint64)
            keys |= self._key_bits[start:stop]
            signs[start:stop] = mix_u64(keys)
            np.take(self.column_weights, columns, out=weights[start:stop])
        starts = self.zipf.starts
        offsets: list[NDArray[np.int64]] = []
        bounds = self._bounds.copy()
        for v, fixed in enumerate(self.fixed_offsets):
            if fixed is not None:
                offsets.append(fixed)
                continue
            offsets.append(_random_offsets(rng, int(self.zipf.counts[v]), self.size))
            np.add(offsets[-1], starts[v], out=bounds[v])
        sparse = {
            spec.name: (signs[starts[v] : starts[v + 1]], offsets[v])
            for v, spec in enumerate(self.specs)
        }
        return sparse, _example_sums(weights, bounds)

    def logits(self, sparse: Mapping[str, Ragged]) -> NDArray[np.float64]:
        """The sparse part of the logit of a batch's examples, from their signs alone."""
        weights, offsets = [], []
        for v, spec in enumerate(self.specs):
            signs, variable_offsets = sparse[spec.name]
            ranks = unmix_u64(signs) ^ self.field_keys[v]
            head = min(SIGNAL_RANKS, int(self.zipf.heads[v]))
            # A sign of another field (or past the vocabulary) gets a huge "rank": weight 0.
            known = ranks < np.uint64(head)
            columns = self.zipf.column_starts[v] + np.where(known, ranks, 0).astype(np.int64)
            weights.append(np.where(known, self.column_weights[columns], 0.0))
            offsets.append(variable_offsets)
        starts = np.cumsum([0] + [len(w) for w in weights])
        return _example_sums(np.concatenate(weights), starts[:-1, None] + np.stack(offsets))


def _even_offsets(count: int, size: int) -> NDArray[np.int64] | None:
    """Offsets shared by every batch when each example gets ``count / size`` signs, else None.

    Read-only, because every batch of the generator holds the same array.
    """
    if count % size:
        return None
    offsets = np.arange(size + 1, dtype=np.int64) * (count // size)
    offsets.flags.writeable = False
    return offsets


def _random_offsets(rng: np.random.Generator, count: int, size: int) -> NDArray[np.int64]:
    """Each example gets ``floor(count / size)`` signs, and a random ``count % size`` one more."""
    counts = np.full(size, count // size, dtype=np.int64)
    counts[rng.choice(size, count % size, replace=False)] += 1
    offsets = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def _example_sums(values: NDArray[np.float64], bounds: NDArray[np.int64]) -> NDArray[np.float64]:
    """Per example ``b``, the sum over variables ``v`` of ``values[bounds[v, b]:bounds[v, b+1]]``.

    ``values`` holds the variables' signs one after another, and row ``v`` of ``bounds`` is
    variable ``v``'s offsets shifted to where it starts. A prefix sum turns every
    (variable, example) sum into one difference, also for an example without signs.
    """
    prefix = np.zeros(len(values) + 1, dtype=np.float64)
    np.cumsum(values, out=prefix[1:])
    at_bounds = np.take(prefix, bounds)
    return np.asarray((at_bounds[:, 1:] - at_bounds[:, :-1]).sum(axis=0))


@dataclass(frozen=True, eq=False)
class _DenseModel:
    """Dense features and their linear part of the planted logit."""

    means: NDArray[np.float64]
    """Mean count of each feature before ``log1p``."""
    coefficients: NDArray[np.float64]
    """``beta_j / std_j``."""
    center: float
    """``sum_j beta_j * mean_j / std_j``, subtracted so the term has mean ~0."""

    def draw(self, rng: np.random.Generator, size: int) -> NDArray[np.float32]:
        counts = rng.exponential(size=(size, len(self.means)))
        counts *= self.means
        return np.log1p(counts).astype(np.float32)

    def contribution(self, dense: NDArray[np.float32]) -> NDArray[np.float64]:
        return np.asarray(dense.astype(np.float64) @ self.coefficients - self.center)


class SyntheticCtr:
    """A deterministic stream of CTR batches in a workload's shape, with learnable labels.

    ``num_batches`` batches per epoch; batch ``i`` of epoch ``e`` depends only on
    ``(seed, e, i)`` and the generator's parameters, so shards and epochs cost nothing to skip
    and any batch can be regenerated alone (:meth:`batch`). See the module docstring for the
    shape and the planted model.
    """

    def __init__(
        self,
        workload: Workload,
        *,
        num_batches: int,
        scale: float = 1.0,
        seed: int = 0,
        batch_size: int | None = None,
    ) -> None:
        """``batch_size`` defaults to the workload's; another size keeps the signs per example."""
        check_int("num_batches", num_batches)
        check_int("seed", seed, minimum=0)
        if batch_size is not None:
            check_int("batch_size", batch_size)
        if isinstance(scale, bool) or not isinstance(scale, int | float):
            raise TypeError(f"scale must be a number, got {type(scale).__name__}")
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"scale must be positive and finite, got {scale}")
        self.workload = workload
        self.num_batches = num_batches
        self.scale = float(scale)
        self.seed = seed
        self._batch_size = batch_size or workload.batch_size
        self._sparse = _SparseModel(self, _importances(seed, len(workload.variables)))
        labels = workload.label_specs
        self._dense = [_dense_model(seed, workload.dense_features, k) for k in range(len(labels))]
        # The calibration draws logits without a bias, then solves for each label's.
        self._biases = np.zeros(len(labels))
        self._biases = self._calibrate_biases()

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.workload.variables)

    @property
    def dense_features(self) -> int:
        return self.workload.dense_features

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def label_names(self) -> tuple[str, ...]:
        return tuple(label.name for label in self.workload.label_specs)

    @property
    def signs_per_batch(self) -> dict[str, int]:
        """Signs of each variable in every batch, at this scale and batch size."""
        return dict(zip(self.variables, self._sparse.zipf.counts.tolist(), strict=True))

    @property
    def vocabulary(self) -> dict[str, int]:
        """Distinct signs each variable draws from, at this scale."""
        return dict(zip(self.variables, self._sparse.zipf.vocabularies.tolist(), strict=True))

    def batches(self, *, epoch: int = 0, shard: int = 0, num_shards: int = 1) -> Iterator[Batch]:
        """Batches ``shard, shard + num_shards, ...`` of epoch ``epoch``."""
        check_stream(epoch, shard, num_shards)
        for index in range(shard, self.num_batches, num_shards):
            yield self.batch(index, epoch=epoch)

    def batch(self, index: int, *, epoch: int = 0) -> Batch:
        """Batch ``index`` of epoch ``epoch``, generated on its own."""
        return self.batch_with_logits(index, epoch=epoch)[0]

    def batch_with_logits(self, index: int, *, epoch: int = 0) -> tuple[Batch, NDArray[np.float64]]:
        """Batch ``index`` of ``epoch`` and the planted model's logit of each example (and
        label: the shape of the batch's labels)."""
        check_int("index", index, minimum=0)
        check_stream(epoch, 0, 1)
        return self._generate(np.random.default_rng([self.seed, _STREAM_BATCH, epoch, index]))

    def oracle_logits(self, batch: Batch) -> NDArray[np.float64]:
        """The planted model's logit of each example of ``batch`` (and label: the shape of its
        labels), recovered from its signs.

        Works on any batch with this generator's variables and dense features, for example one
        read back from Parquet; a sign that this generator cannot have drawn weighs 0.
        """
        missing = [name for name in self.variables if name not in batch.sparse]
        if missing:
            raise ValueError(f"batch lacks variables of this generator: {', '.join(missing)}")
        if batch.dense_features != self.dense_features:
            raise ValueError(
                f"batch has {batch.dense_features} dense features, expected {self.dense_features}"
            )
        return self._logits(self._sparse.logits(batch.sparse), batch.dense)

    def oracle_auc(
        self, num_batches: int | None = None, *, epoch: int = 0, label: int = 0
    ) -> float:
        """AUC of the planted model for label number ``label`` on the first ``num_batches``
        (default all) of ``epoch``.

        No model does better in expectation: this is the ceiling a trainer is measured by.
        """
        count = self.num_batches if num_batches is None else num_batches
        check_int("num_batches", count)
        labels, logits = [], []
        for index in range(count):
            batch, logit = self.batch_with_logits(index, epoch=epoch)
            labels.append(batch.labels if batch.labels.ndim == 1 else batch.labels[:, label])
            logits.append(logit if logit.ndim == 1 else logit[:, label])
        return roc_auc(np.concatenate(labels), np.concatenate(logits))

    def __repr__(self) -> str:
        return (
            f"SyntheticCtr({self.workload.name!r}, num_batches={self.num_batches}, "
            f"scale={self.scale}, seed={self.seed}, batch_size={self.batch_size})"
        )

    def _logits(
        self, sparse: NDArray[np.float64], dense: NDArray[np.float32]
    ) -> NDArray[np.float64]:
        """Each label's logit from the sparse part and the dense features: ``[batch]`` for one
        label, else ``[batch, labels]``."""
        columns = []
        for model, bias in zip(self._dense, self._biases, strict=True):
            logits = sparse + model.contribution(dense)
            logits += bias
            columns.append(logits)
        return columns[0] if len(columns) == 1 else np.stack(columns, axis=1)

    def _generate(self, rng: np.random.Generator) -> tuple[Batch, NDArray[np.float64]]:
        sparse, shared = self._sparse.draw(rng)
        dense = self._dense[0].draw(rng, self._batch_size)  # the label models share the draw
        logits = self._logits(shared, dense)
        # Label 0 draws from the batch's stream as a single label always did; the others from
        # a child stream, which leaves the batch's own untouched (spawning draws nothing).
        draws = [rng.random(self._batch_size)]
        if len(self._dense) > 1:
            others = rng.spawn(1)[0]
            draws += [others.random(self._batch_size) for _ in self._dense[1:]]
        uniform = draws[0] if logits.ndim == 1 else np.stack(draws, axis=1)
        labels = (uniform < _sigmoid(logits)).astype(np.float32)
        return Batch(labels=labels, dense=dense, sparse=sparse), logits

    def _calibrate_biases(self) -> NDArray[np.float64]:
        """Each label's bias that puts its mean predicted probability at its positive rate."""
        rng = np.random.default_rng([self.seed, _STREAM_CALIBRATION])
        rounds = max(1, CALIBRATION_EXAMPLES // self._batch_size)
        logits = np.concatenate([self._generate(rng)[1] for _ in range(rounds)])
        logits = logits.reshape(len(logits), -1)
        rates = [label.positive_rate for label in self.workload.label_specs]
        return np.array([_solve_bias(logits[:, k], rate) for k, rate in enumerate(rates)])


def _importances(seed: int, count: int) -> NDArray[np.float64]:
    rng = np.random.default_rng([seed, _STREAM_MODEL, 0])
    importances = rng.lognormal(0.0, IMPORTANCE_SIGMA, size=count)
    return np.asarray(importances * (SPARSE_STD / np.linalg.norm(importances)))


def _dense_model(seed: int, features: int, label: int) -> _DenseModel:
    """Label ``label``'s dense part (label 0's from the stream a single label always had)."""
    rng = np.random.default_rng([seed, _STREAM_MODEL, 1, *([label] if label else [])])
    means = np.exp(np.linspace(0.0, 4.0, features))
    beta = rng.standard_normal(features)
    beta *= DENSE_STD / max(float(np.linalg.norm(beta)), 1e-12)
    plain = _DenseModel(means=means, coefficients=np.zeros(features), center=0.0)
    sample = plain.draw(rng, CALIBRATION_EXAMPLES).astype(np.float64)
    coefficients = beta / np.maximum(sample.std(axis=0), 1e-12)
    return _DenseModel(
        means=means,
        coefficients=coefficients,
        center=float(sample.mean(axis=0) @ coefficients),
    )


def _solve_bias(logits: NDArray[np.float64], rate: float) -> float:
    """The ``b`` with ``mean(sigmoid(logits + b)) == rate``, by bisection (monotone in ``b``)."""
    if not 0 < rate < 1:
        raise ValueError(f"positive_rate must be in (0, 1), got {rate}")
    lo, hi = -60.0, 60.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if float(_sigmoid(logits + mid).mean()) < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _sigmoid(x: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * x)))
