"""``ModelError``: the user's dense model failed in its own code.

Why a type of its own. A model is code sniper did not write: a factory that raises, a module
that cannot be imported, a forward pass with a shape bug, an optimizer that needs a closure.
Reported by their own types, they read as sniper's bugs ("RuntimeError ... a bug in sniper") or
as a bare message naming nothing ("factory bug"). Raised as a ``ModelError`` from the original,
the one line names the model and what of it failed, and ``--debug`` still shows the traceback
into the user's code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ModelError", "users_code"]


class ModelError(Exception):
    """The dense model's own code (its factory, import, forward or optimizer) raised; the
    original exception is the ``__cause__``."""


@contextmanager
def users_code(what: str, keep: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Raise what the block raises as a :class:`ModelError` prefixed by ``what`` (say,
    ``"the model DeepFM's forward"``), but a ``ModelError`` or one of ``keep`` as it is (a
    factory's ``ValueError`` is its documented refusal of its params)."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, (ModelError, *keep)):
            raise
        raise ModelError(f"{what} raised {type(exc).__name__}: {exc}") from exc
