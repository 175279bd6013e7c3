"""Task keys: which variable (and which shard of it) a task works on."""

from __future__ import annotations

from typing import NamedTuple, TypeAlias

__all__ = ["KeyLike", "TaskKey", "as_task_key"]


class TaskKey(NamedTuple):
    """The unit of ordering and placement: one shard of one variable.

    A NamedTuple rather than a dataclass because the per-variable scheduler hashes a key on
    every submit and tuple hashing is the cheapest Python offers.
    """

    variable: str
    """The variable (embedding table) name."""
    shard: int = 0
    """The shard within the variable, e.g. ``sniper.hashing.shard_of(signs, n)``."""
    background: bool = False
    """Work nobody waits on yet (a ps mapping the rows of a batch fed ahead of training):
    ``work_stealing`` runs an outside submission with it only when no other outside
    submission waits, so it never delays the calls a trainer is waiting for. The other
    backends run it as any task (``per_variable`` in a queue of its own, beside the same
    shard's foreground one)."""
    small: bool = False
    """Work too small to gain from a thread of its own (a ps request of a few thousand signs
    per variable: mostly Python around short kernels, which on another thread only contends
    for the GIL with the thread that submitted it): ``adaptive`` runs it inside ``submit``, on
    the submitting thread, as ``inline`` does, while its workers are idle. The other backends
    run it as any task (``per_variable`` in the same mailbox as without the hint)."""

    def __repr__(self) -> str:
        flags = (("background", self.background), ("small", self.small))
        hints = "".join(f", {name}=True" for name, on in flags if on)
        return f"TaskKey(variable={self.variable!r}, shard={self.shard}{hints})"


KeyLike: TypeAlias = TaskKey | str
"""A :class:`TaskKey`, or a plain variable name as shorthand for shard 0."""


def as_task_key(key: KeyLike) -> TaskKey:
    """Normalize a key; anything but a ``str`` or a ``TaskKey`` is a caller bug."""
    if type(key) is TaskKey:
        return key
    if isinstance(key, str):
        return TaskKey(key)
    if isinstance(key, TaskKey):
        return key
    raise TypeError(
        f"a task key should be a variable name (str) or a TaskKey(variable, shard), got {key!r}"
    )
