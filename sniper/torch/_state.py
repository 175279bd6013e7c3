"""A torch module's and optimizer's ``state_dict`` as named numpy arrays, and back, exactly.

A job checkpoint stores the dense model as one ``.npz`` of named arrays, loaded without pickle
(``allow_pickle=False``: a checkpoint must not run code). A module's ``state_dict`` is already
named tensors. An optimizer's is nested: ``state`` (per parameter index, tensors and Python
numbers, ``None`` for a buffer not made yet) and ``param_groups`` (hyperparameters: floats,
tuples, bools, ``None``). Each leaf becomes one array named by its path, its Python kind in
the name where the array alone would lose it (``optimizer.state.0.step`` is a tensor,
``optimizer.value.0.n_iter`` a Python number, ``optimizer.none.0.momentum_buffer`` a ``None``),
and a group's hyperparameters are read back in the types the live optimizer holds (a tuple
stays a tuple), so that ``load(save(x))`` gives ``x`` again, bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

__all__ = ["load_module", "load_optimizer", "module_arrays", "optimizer_arrays"]

Arrays = dict[str, NDArray[np.generic]]
MODULE = "module."
OPTIMIZER = "optimizer."


def module_arrays(module: torch.nn.Module) -> Arrays:
    """Every tensor of ``module.state_dict()`` as a copy on the host, named ``module.KEY``."""
    return {
        MODULE + key: tensor.detach().cpu().numpy().copy()
        for key, tensor in module.state_dict().items()
    }


def load_module(module: torch.nn.Module, arrays: Mapping[str, NDArray[np.generic]]) -> None:
    """Take ``module.*`` of ``arrays`` as ``module``'s; ``ValueError`` names what does not fit."""
    own = module.state_dict()
    theirs = {k[len(MODULE) :]: v for k, v in arrays.items() if k.startswith(MODULE)}
    for key in sorted(set(own) ^ set(theirs)):
        where = "lacks" if key in own else "has an extra"
        raise ValueError(
            f"the dense model checkpoint {where} {MODULE}{key}; was it saved by another model?"
        )
    for key, tensor in own.items():
        array = theirs[key]
        if tuple(array.shape) != tuple(tensor.shape):
            raise ValueError(
                f"the dense model checkpoint's {MODULE}{key} does not fit this model (expected "
                f"{tuple(tensor.shape)}, got {array.shape}); was it saved by another config?"
            )
    module.load_state_dict({key: torch.from_numpy(np.array(theirs[key])) for key in own})


def optimizer_arrays(optimizer: torch.optim.Optimizer) -> Arrays:
    """``optimizer.state_dict()`` flattened to named arrays (see the module's docstring)."""
    state = optimizer.state_dict()
    arrays: Arrays = {}
    for index, values in state["state"].items():
        for key, value in values.items():
            if value is None:
                arrays[f"{OPTIMIZER}none.{index}.{key}"] = np.array(0, dtype=np.int8)
            elif isinstance(value, torch.Tensor):
                arrays[f"{OPTIMIZER}state.{index}.{key}"] = value.detach().cpu().numpy().copy()
            else:
                arrays[f"{OPTIMIZER}value.{index}.{key}"] = np.array(value)
    for number, group in enumerate(state["param_groups"]):
        for key, value in group.items():
            if key != "params" and value is not None and _plain(value):
                arrays[f"{OPTIMIZER}group.{number}.{key}"] = np.array(value)
    return arrays


def load_optimizer(
    optimizer: torch.optim.Optimizer, arrays: Mapping[str, NDArray[np.generic]]
) -> None:
    """Take ``optimizer.*`` of ``arrays`` (from :func:`optimizer_arrays`) as ``optimizer``'s,
    but for the learning rate: ``optimizer`` was built with the job's (``lr`` or ``[model]
    lr``), which a resume may change, so its own stays (a saved one silently undid the change).
    """
    template = optimizer.state_dict()
    state: dict[int, dict[str, Any]] = {}
    groups = [dict(group) for group in template["param_groups"]]
    for name, array in arrays.items():
        if not name.startswith(OPTIMIZER):
            continue
        kind, _, rest = name[len(OPTIMIZER) :].partition(".")
        place, _, key = rest.partition(".")
        if kind == "group":
            number = int(place)
            if number >= len(groups) or key not in groups[number]:
                raise ValueError(
                    f"the dense model checkpoint's {name} does not fit this optimizer; was it "
                    "saved with another [model] optimizer?"
                )
            if key != "lr":
                groups[number][key] = _like(groups[number][key], array)
            continue
        values = state.setdefault(int(place), {})
        if kind == "state":
            values[key] = torch.from_numpy(np.array(array))
        elif kind == "value":
            values[key] = array.item()
        elif kind == "none":
            values[key] = None
        else:
            raise ValueError(f"the dense model checkpoint has an unknown array {name}")
    params = sum(len(group["params"]) for group in groups)
    if any(index >= params for index in state):
        raise ValueError(
            "the dense model checkpoint's optimizer state has more parameters than this model; "
            "was it saved by another model?"
        )
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def _plain(value: object) -> bool:
    """A hyperparameter an array holds exactly: a number, a bool, or a tuple or list of them."""
    if isinstance(value, bool | int | float):
        return True
    return isinstance(value, tuple | list) and all(isinstance(v, bool | int | float) for v in value)


def _like(current: object, array: NDArray[np.generic]) -> object:
    """``array`` as a value of ``current``'s type (the live group's: a tuple stays a tuple)."""
    if isinstance(current, tuple | list):
        return type(current)(array.tolist())
    if isinstance(current, bool):
        return bool(array.item())
    if isinstance(current, int):
        return int(array.item())
    if isinstance(current, float):
        return float(array.item())
    return array.item()
