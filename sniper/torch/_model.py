"""Any ``torch.nn.Module`` as the trainer's dense model: :class:`TorchModel`.

The module's contract (the README's "Your model"): ``forward(embeddings, dense)`` takes a
dict of ``[batch, dim]`` float32 tensors, each variable's pooled embedding by name in the
order of :attr:`~sniper.models.ModelInputs.dims`, and the ``[batch, dense_features]`` tensor,
and returns ``[batch, len(labels)]`` outputs: a logit for a binary label, the value itself for
a regression one (:attr:`~sniper.models.ModelInputs.regression`). The loss is binary
cross-entropy with logits for a binary label and squared error for a regression one, averaged
over the batch and the labels (the numpy MLP's loss, :mod:`sniper.models._loss`).

A module whose class sets ``takes_matrix = True`` gets the ``[batch, width]`` input matrix
instead, as one tensor: each variable's pooled embedding in its columns
(:attr:`~sniper.models.ModelInputs.columns`), then the dense features (and the sequences'
dict as a second argument when there are sequence variables). The MLP-like models that would
concatenate the dict's tensors anyway take it so: no concatenation, one leaf for autograd
instead of one per variable, and each variable's gradient a view of the one ``[batch,
width]`` gradient (``torch_mlp``: 76 variables' worth of per-leaf bookkeeping, copies and a
5 MB concatenation saved per seed_ctr batch).

Sequence variables (pooling ``none``, :attr:`~sniper.models.ModelInputs.sequences`) come in
the same dict as a jagged pair ``(values, offsets)``: ``values`` is ``[n, dim]`` float32, every
value's embedding of the batch, and ``offsets`` ``[batch + 1]`` int64, example ``b``'s values
being ``values[offsets[b]:offsets[b + 1]]`` (what ``torch.nn.functional.embedding_bag``'s
offsets and torchrec's ``JaggedTensor`` mean); attend over them, or pool them as the model
likes. ``d(loss)/d(values)``, ``[n, dim]``, is pushed to the ps, one gradient per value.

Zero copies on the CPU. The trainer's lookups write one ``[batch, width]`` float32 matrix;
``torch.from_numpy`` views it, and each variable's embedding is a column block of that view
made a leaf that requires grad. After ``backward`` each leaf's ``.grad`` is
``d(loss)/d(pooled)``, which the trainer pushes to the ps while :meth:`TrainStep.update`
runs: the weight gradients of the layers that deferred them
(:func:`~sniper.torch._linear.deferred_weight_grads`), then ``optimizer.step()``. On a GPU
the matrix goes to the device in one copy per batch and the gradients come back in one copy
per variable.

Threads. The model runs on the trainer's model thread; torch's intra-op pool is sized to the
trainer's ``blas_threads`` (``threads``), the limit the numpy MLP's BLAS runs under, so that a
2-core machine's ps and hubs are not crowded out by spinning torch workers.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch.nn import functional

from sniper.models import (
    DenseModel,
    GradientAverage,
    Jagged,
    ModelError,
    ModelInputs,
    TrainStep,
    users_code,
)
from sniper.torch._linear import WeightGrads, deferred_weight_grads
from sniper.torch._state import load_module, load_optimizer, module_arrays, optimizer_arrays

__all__ = ["Feature", "TorchModel", "open_optimizer", "resolve_device"]

F32 = NDArray[np.float32]
_MATRIX = "\0matrix"
"""The key of a matrix-taking module's one leaf (no variable can be called that)."""
Feature = torch.Tensor | tuple[torch.Tensor, torch.Tensor]
"""One variable as the module's ``forward`` gets it: a pooled ``[batch, dim]`` tensor, or a
sequence variable's jagged ``(values [n, dim], offsets [batch + 1])`` pair."""
_ONE = (
    "the data's last, when its rows are one past a multiple of batch_size: drop_last = true "
    "drops it"
)
"""What a forward that fails on one example is told: a BatchNorm's training forward fails
there in torch's words only (``Expected more than 1 value per channel``)."""


def resolve_device(device: str | None) -> torch.device:
    """``cpu``, ``cuda``, ``cuda:N``, or ``auto``: a GPU when torch sees one, else the CPU."""
    name = device or "cpu"
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"device {name!r}: torch sees no GPU here (a CPU build, or none visible); use "
            "device = 'cpu' or 'auto'"
        )
    return torch.device(name)


def open_optimizer(
    name: str | None, parameters: Iterator[torch.nn.Parameter], lr: float | None
) -> torch.optim.Optimizer:
    """The ``torch.optim`` class called ``name`` (case-insensitive; None: Adam) over
    ``parameters``, with learning rate ``lr`` (None: the class's default)."""
    classes: dict[str, Callable[..., torch.optim.Optimizer]] = {
        key.lower(): value
        for key, value in vars(torch.optim).items()
        if isinstance(value, type)
        and issubclass(value, torch.optim.Optimizer)
        and value is not torch.optim.Optimizer
    }
    usable = sorted(key for key, value in classes.items() if not _needs_closure(value))
    chosen = classes.get((name or "adam").lower())
    if chosen is None:
        valid = ", ".join(usable)
        raise LookupError(f"no torch optimizer named {name!r}; valid names are: {valid}")
    if _needs_closure(chosen):
        raise LookupError(
            f"torch optimizer {name!r} needs a closure that computes the loss again (a line "
            f"search), which a training step does not give; valid names are: {', '.join(usable)}"
        )
    options: dict[str, Any] = {} if lr is None else {"lr": lr}
    # A model whose every weight is an embedding (matrix factorization: a dot product of two
    # variables' rows) has no parameter here: the ps trains it all. torch refuses an empty
    # list, but not a group of none, whose step does nothing.
    groups: list[Any] = list(parameters) or [{"params": []}]
    return chosen(groups, **options, **_one_kernel(chosen))


def _needs_closure(optimizer: Callable[..., torch.optim.Optimizer]) -> bool:
    """Whether ``step`` must be given a closure that computes the loss again (LBFGS's line
    search): a trainer's step has none to give, so such a class is not offered."""
    step = getattr(optimizer, "step", None)
    closure = inspect.signature(step).parameters.get("closure") if step is not None else None
    return closure is not None and closure.default is inspect.Parameter.empty


def _one_kernel(optimizer: Callable[..., torch.optim.Optimizer]) -> dict[str, bool]:
    """``fused=True`` where the class has a fused kernel, else ``foreach=True`` where it has
    a multi-tensor one, else nothing.

    Why: torch's CPU default is the per-parameter loop, a dozen ops for each parameter, and
    each op lets go of the GIL and must take it back, which waits while another thread runs
    Python (a one-process job's event loop). ``torch_mlp``'s Adam step took 0.63 ms so and
    0.31 ms fused, alone; beside a thread looping in Python, the whole torch step went from
    550-710 to 300-390 ms."""
    parameters = inspect.signature(optimizer).parameters
    for option in ("fused", "foreach"):
        if option in parameters:
            return {option: True}
    return {}


def _trained(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The parameters ``optimizer`` updates that take gradients, in its order."""
    return [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]


class _TorchStep(TrainStep):
    """A step's loss, predictions and input gradients; its update computes the gradients the
    layers deferred (:func:`~sniper.torch._linear.deferred_weight_grads`), then steps the
    optimizer."""

    def __init__(
        self,
        loss: float,
        predictions: F32,
        grads: dict[str, F32],
        optimizer: torch.optim.Optimizer,
        deferred: WeightGrads,
    ) -> None:
        self.loss = loss
        self.predictions = predictions
        self.input_grads = grads
        self._optimizer = optimizer
        self._deferred = deferred

    def update(self) -> None:
        self._deferred.apply()
        self._step()

    def update_averaged(self, average: GradientAverage) -> None:
        """The step with every parameter's gradient averaged across the ranks first (the
        all-reduce DDP makes, over the same gradients; a parameter the loss did not reach
        counts as a zero gradient, so every rank averages the same list)."""
        self._deferred.apply()
        params = _trained(self._optimizer)
        for param in params:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
        if average([param.grad for param in params]):
            self._step()

    def _step(self) -> None:
        with users_code(f"the optimizer {type(self._optimizer).__name__}'s step"):
            self._optimizer.step()


class TorchModel(DenseModel):
    """``module`` trained by ``optimizer`` on ``device`` for ``inputs``: a
    :class:`~sniper.models.DenseModel`.

    ``optimizer`` must hold ``module``'s parameters (build it before or after moving the
    module: :meth:`torch.nn.Module.to` keeps the parameters' identity). ``threads`` > 0 sizes
    torch's intra-op pool on the threads that run the model (0: torch's default). The module's
    output is checked once here, on a two-example batch of zeros, so a module that does not fit
    the data (another number of labels, another input width) fails before training starts.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        inputs: ModelInputs,
        device: str | torch.device = "cpu",
        threads: int = 0,
    ) -> None:
        self.inputs = inputs
        self.device = device if isinstance(device, torch.device) else resolve_device(device)
        self.module = module.to(self.device)
        self.optimizer = optimizer
        self.threads = threads
        self._threads_set: set[int] = set()
        self._ranges = list(inputs.columns.items())
        self._labels = len(inputs.labels)
        self.takes_matrix = bool(getattr(module, "takes_matrix", False))
        """The module takes the whole input matrix (see the module doc)."""
        self._regression = torch.from_numpy(inputs.regression_mask).to(self.device)
        self._binary_only = not inputs.regression  # once, not a reduction (and sync) a batch
        empty = {
            name: (np.zeros((0, dim), dtype=np.float32), np.zeros(3, dtype=np.int64))
            for name, dim in inputs.sequences.items()
        }
        with self._running(), torch.no_grad():
            self.module.eval()
            zeros = np.zeros((2, inputs.width), dtype=np.float32)
            logits = self._forward(zeros, empty, grad=False)[0]
        if tuple(logits.shape) != (2, self._labels):
            raise ValueError(
                f"the model {type(module).__name__} returns {tuple(logits.shape)} logits for "
                f"a batch of 2; the data has {self._labels} label(s) "
                f"({', '.join(inputs.labels)}), so it must return (2, {self._labels})"
            )

    @classmethod
    def build(
        cls,
        module: torch.nn.Module,
        inputs: ModelInputs,
        *,
        optimizer: str | None = None,
        lr: float | None = None,
        device: str | None = None,
        seed: int | None = None,
        threads: int | None = None,
    ) -> TorchModel:
        """``module`` on ``device`` with the ``torch.optim`` called ``optimizer`` (default
        Adam, at its default learning rate unless ``lr``): how a factory's module is adapted
        (``seed`` seeded torch before the factory ran; it is not used here)."""
        del seed
        place = resolve_device(device)
        module = module.to(place)
        return cls(
            module, open_optimizer(optimizer, module.parameters(), lr), inputs, place, threads or 0
        )

    @contextmanager
    def _running(self) -> Iterator[None]:
        """Torch's intra-op threads set on this thread once (torch keeps the number per
        thread that first runs an op in some builds)."""
        me = threading.get_ident()
        if self.threads and me not in self._threads_set:
            torch.set_num_threads(self.threads)
            self._threads_set.add(me)
        yield

    def _forward(
        self, inputs: F32, sequences: Mapping[str, Jagged] | None, *, grad: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Logits ``[batch, labels]`` and the leaf tensors of the embeddings and sequence
        values (views of ``inputs`` on the CPU: no copy)."""
        matrix = torch.from_numpy(inputs)
        if self.device.type != "cpu":
            matrix = matrix.to(self.device, non_blocking=True)
        leaves = {}
        if self.takes_matrix:
            leaves[_MATRIX] = matrix.detach().requires_grad_(True) if grad else matrix
        else:
            for name, (start, stop) in self._ranges:
                block = matrix[:, start:stop]
                leaves[name] = block.detach().requires_grad_(True) if grad else block
        features: dict[str, Feature] = dict(leaves)
        for name in self.inputs.sequences:
            if sequences is None or name not in sequences:
                raise ValueError(f"sequence variable {name!r} was not given to the model")
            values, offsets = (_writable(array) for array in sequences[name])
            leaf = torch.from_numpy(values).to(self.device)
            leaves[name] = leaf.requires_grad_(True) if grad else leaf
            features[name] = (leaves[name], torch.from_numpy(offsets).to(self.device))
        one = grad and len(inputs) == 1  # training: scoring one example takes BatchNorm's stats
        part = f"forward on a batch of one example ({_ONE})" if one else "forward"
        with self._users_code(part):
            if self.takes_matrix:
                matrix_leaf = leaves[_MATRIX]
                sequences_given = {k: v for k, v in features.items() if k != _MATRIX}
                args: tuple[Any, ...] = (
                    (matrix_leaf, sequences_given) if sequences_given else (matrix_leaf,)
                )
            else:
                args = (features, matrix[:, self.inputs.embedding_width :])
            output = self.module(*args)
        return self._logits(output), leaves

    def _users_code(self, part: str) -> AbstractContextManager[None]:
        """:func:`~sniper.models.users_code` around ``part`` of a module the user wrote; none
        around sniper's own (the zoo's), whose errors are sniper's to own."""
        if type(self.module).__module__.startswith("sniper."):
            return nullcontext()
        return users_code(f"the model {type(self.module).__name__}'s {part}")

    def _logits(self, output: object) -> torch.Tensor:
        """The module's output, refused by name unless it is one floating-point tensor (a
        dict, a tuple or a numpy array failed later inside sniper, not naming the model)."""
        name = type(self.module).__name__
        if not isinstance(output, torch.Tensor):
            raise ValueError(
                f"the model {name} returns a {type(output).__name__} from forward; it must "
                f"return one tensor of logits, [batch, labels]"
            )
        if not output.is_floating_point():
            raise ValueError(
                f"the model {name} returns {output.dtype} logits; they must be floating point"
            )
        return output

    def train_step(
        self, inputs: F32, labels: F32, *, sequences: Mapping[str, Jagged] | None = None
    ) -> TrainStep:
        with self._running():
            self.module.train()
            logits, embeddings = self._forward(inputs, sequences, grad=True)
            targets = torch.from_numpy(_writable(np.asarray(labels, dtype=np.float32)))
            targets = targets.to(self.device).reshape(logits.shape)
            loss = self._loss(logits, targets)
            with deferred_weight_grads(_trained(self.optimizer)) as deferred:
                leaf_grads = self._backward(loss, list(embeddings.values()))
            grads: dict[str, F32] = {}
            for (name, leaf), found in zip(embeddings.items(), leaf_grads, strict=True):
                # None: a sequence of empty bags only, or one the model ignores
                grad = torch.zeros_like(leaf) if found is None else found
                if name == _MATRIX:  # each variable's columns, as views of its one gradient
                    whole = grad.detach().cpu().numpy()
                    grads |= {var: whole[:, start:stop] for var, (start, stop) in self._ranges}
                    continue
                grads[name] = np.ascontiguousarray(grad.detach().cpu().numpy(), dtype=np.float32)
            predictions = self._probabilities(logits.detach())
            return _TorchStep(float(loss.detach()), predictions, grads, self.optimizer, deferred)

    def _backward(
        self, loss: torch.Tensor, leaves: list[torch.Tensor]
    ) -> tuple[torch.Tensor | None, ...]:
        """The embeddings' gradients, as autograd makes them; the gradients of the parameters
        the optimizer holds set as their ``.grad`` (None where the loss does not reach one, or
        where a layer deferred it: the step's update computes those).

        ``torch.autograd.grad`` rather than ``loss.backward()``: accumulating into a leaf's
        ``.grad`` copies a gradient whose memory order is not the leaf's into the leaf's, and
        the zoo's layers hand the input matrix's gradient back ``[width, batch]`` in memory,
        so that each variable's block of it is one contiguous run for the ps's push and its
        finite check (``sniper.torch._linear``)."""
        params = _trained(self.optimizer)
        with self._users_code("backward"):
            found = torch.autograd.grad(loss, [*leaves, *params], allow_unused=True)
        for param, grad in zip(params, found[len(leaves) :], strict=True):
            param.grad = grad
        return found[: len(leaves)]

    def warm_up(self) -> None:
        """Each submodule's own ``warm_up()``, where it has one (the zoo's DLRM loads its
        interaction's compiled kernels: their first call would compile or load them inside
        the first step, on the trainer's clock)."""
        for module in self.module.modules():
            warm_up = getattr(module, "warm_up", None)
            if callable(warm_up):
                warm_up()

    def predict(self, inputs: F32, *, sequences: Mapping[str, Jagged] | None = None) -> F32:
        with self._running(), torch.no_grad():
            self.module.eval()
            logits, _ = self._forward(inputs, sequences, grad=False)
            return self._probabilities(logits)

    def _loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Log loss of the binary labels' logits and squared error of the regression
        labels' values, averaged over the batch and the labels."""
        if self._binary_only:
            return functional.binary_cross_entropy_with_logits(outputs, targets)
        binary = functional.binary_cross_entropy_with_logits(outputs, targets, reduction="none")
        squared = functional.mse_loss(outputs, targets, reduction="none")
        return torch.where(self._regression, squared, binary).mean()

    def _probabilities(self, logits: torch.Tensor) -> F32:
        """The predictions on the host: the sigmoid of a binary label's logit, a regression
        label's value as it is; ``[batch]`` for one label, else ``[batch, labels]``."""
        host = logits.float().cpu()  # bfloat16 (autocast) has no numpy type
        finite = torch.isfinite(host)
        if not bool(finite.all()):
            raise ModelError(
                f"the model {type(self.module).__name__} returned NaN or Inf logits for "
                f"{int((~finite).any(dim=1).sum())} of {len(host)} examples: its forward pass "
                "diverged (a lower lr, or normalization in the model, are the usual cures)"
            )
        outputs = (
            torch.sigmoid(host)
            if self._binary_only
            else torch.where(self._regression.cpu(), host, torch.sigmoid(host))
        )
        probs = outputs.numpy()
        return probs[:, 0] if self._labels == 1 else probs

    def state(self) -> dict[str, NDArray[np.generic]]:
        return {**module_arrays(self.module), **optimizer_arrays(self.optimizer)}

    def load_state(self, arrays: Mapping[str, NDArray[np.generic]]) -> None:
        load_module(self.module, arrays)
        load_optimizer(self.optimizer, arrays)

    def learning_rate(self) -> float | None:
        """The first parameter group's (the only one of an optimizer sniper builds); None
        for an optimizer without one."""
        groups = self.optimizer.param_groups
        lr = groups[0].get("lr") if groups else None
        return None if lr is None else float(lr)


def _writable(array: NDArray[Any]) -> NDArray[Any]:
    """``array``, or a contiguous copy of it where torch cannot view it (a read-only view of
    received bytes: a gRPC lookup's answer)."""
    if array.flags.writeable and array.flags.c_contiguous:
        return array
    return np.array(array, order="C")
