"""A variable's configuration as sniper speaks it, and its ``CreateVariableRequest`` form.

:class:`VariableConfig` is what :meth:`~sniper.rpc.PsApi.create_variable` takes, what a ps
keeps of each variable and what travels with a moved one; only the gRPC client and service
see the message (:func:`config_to_message`, :func:`config_from_message`). A checkpoint's
manifest records the configuration as the message's JSON form (:meth:`VariableConfig.to_dict`,
camelCase keys such as ``minCount``), so checkpoints written before this type existed restore
unchanged and the manifest stays readable by any protobuf JSON reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from sniper.rpc._generated.sniper.v1 import (
    AdmissionConfig,
    CreateVariableRequest,
    InitializerConfig,
    OptimizerConfig,
)

__all__ = ["VariableConfig", "config_from_message", "config_to_message"]


@dataclass(frozen=True)
class VariableConfig:
    """One variable as a ps creates it (CreateVariable).

    Built with ``name``, ``dim`` and ``capacity`` alone it takes sniper's defaults. It is not
    checked here: the ps that receives it validates it and names a wrong field as the wire
    does (``optimizer.name``, ``admission.sketch_width``...), whatever transport carried it.
    Two configurations describe the same variable when they are equal.
    """

    name: str
    """The variable's name: unique in a job; it is what places the variable on a ps."""
    dim: int
    """Width of a row (1 to 4096)."""
    capacity: int
    """Rows the table preallocates; a new row beyond them evicts one (``eviction``)."""
    _: KW_ONLY
    optimizer: str = "adagrad"
    """``sgd``, ``adagrad``, ``adam`` or ``ftrl`` (``sniper.store.OPTIMIZERS``)."""
    optimizer_params: Mapping[str, float] = field(default_factory=dict, hash=False)
    """The optimizer's parameters by name (``lr``...); a missing one takes its default."""
    initializer: tuple[str, float, float] | None = None
    """``(kind, a, b)`` of a new row: ``("constant", value, 0)``, ``("uniform", low, high)``
    or ``("normal", mean, std)`` (:meth:`sniper.store.Initializer.args`); None:
    ``normal(std=0.01)``."""
    shards: int = 1
    """Shards of the table: a sign's row is in shard ``shard_for_sign(sign, shards)``."""
    eviction: str = "lru"
    """Which row a full table evicts for a new one."""
    admission_min_count: int = 0
    """A sign gets a row once seen this many times (0 or 1: every sign at once)."""
    admission_sketch_width: int = 0
    """Counters in each row of the sketch that counts unadmitted signs (0: 2**20)."""
    admission_sketch_depth: int = 0
    """Rows of that sketch (0: 4)."""
    seed: int = 0
    """A new row's values are a function of ``(seed, sign)`` only."""
    pooling: str = "sum"
    """How a lookup combines an example's rows (``sniper.store.BAG_POOLINGS``): ``sum``,
    ``mean`` (divided by the bag's weight sum), ``sqrtn`` (by the root of its squared
    weights' sum) or ``none`` (every value's row, unpooled: a sequence feature). The wire
    and a manifest write ``sum`` as no value at all, so configurations written before this
    field existed read as ``sum``."""

    def __post_init__(self) -> None:
        # The config is kept by the ps it is handed to (in process, by reference): a copy of
        # the caller's mapping, so changing that mapping later changes no variable.
        object.__setattr__(self, "optimizer_params", dict(self.optimizer_params))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of its CreateVariableRequest: what a checkpoint's manifest records."""
        data: dict[str, Any] = config_to_message(self).to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VariableConfig:
        """The configuration :meth:`to_dict` wrote (or a manifest written before this type);
        ``KeyError``, ``TypeError``, ``AttributeError`` or ``ValueError`` if it is malformed."""
        return config_from_message(CreateVariableRequest().from_dict(dict(data)))


def config_to_message(config: VariableConfig) -> CreateVariableRequest:
    """The CreateVariable message of ``config``."""
    return CreateVariableRequest(
        name=config.name,
        dim=config.dim,
        capacity=config.capacity,
        optimizer=OptimizerConfig(name=config.optimizer, params=dict(config.optimizer_params)),
        initializer=InitializerConfig(*config.initializer)
        if config.initializer
        else InitializerConfig(),
        shards=config.shards,
        admission=AdmissionConfig(
            min_count=config.admission_min_count,
            sketch_width=config.admission_sketch_width,
            sketch_depth=config.admission_sketch_depth,
        ),
        eviction=config.eviction,
        seed=config.seed,
        pooling="" if config.pooling == "sum" else config.pooling,
    )


def config_from_message(message: CreateVariableRequest) -> VariableConfig:
    """The configuration a CreateVariable message carries; the wire's unset fields take their
    documented meaning (no initializer: the default one; 0 shards: 1; no eviction: ``lru``;
    no pooling: ``sum``)."""
    optimizer, initializer, admission = message.optimizer, message.initializer, message.admission
    return VariableConfig(
        message.name,
        message.dim,
        message.capacity,
        optimizer=optimizer.name if optimizer is not None else "",
        optimizer_params=dict(optimizer.params) if optimizer is not None else {},
        initializer=(initializer.kind, initializer.a, initializer.b)
        if initializer is not None and initializer.kind
        else None,
        shards=message.shards or 1,
        eviction=message.eviction or "lru",
        admission_min_count=admission.min_count if admission is not None else 0,
        admission_sketch_width=admission.sketch_width if admission is not None else 0,
        admission_sketch_depth=admission.sketch_depth if admission is not None else 0,
        seed=message.seed,
        pooling=message.pooling or "sum",
    )
