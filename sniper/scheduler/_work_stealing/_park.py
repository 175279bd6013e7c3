"""Parking a worker thread without busy-waiting.

Each worker has a ``Parker``: a condition variable plus a wake-up token, as in Java's
``LockSupport`` or Rust's ``thread::park``. ``unpark`` sets the token; ``park`` sleeps until
the token is set and consumes it. A token set before ``park`` is not lost, so there is no
window in which a wake-up can slip between "decided to sleep" and "sleeping". Spurious
condition-variable wake-ups are absorbed here: ``park`` returns only for a real ``unpark``.
"""

from __future__ import annotations

import threading

__all__ = ["Parker"]


class Parker:
    """One worker's sleep/wake-up token."""

    __slots__ = ("_cond", "_notified")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._notified = False

    def park(self) -> None:
        """Sleep until :meth:`unpark` is called (or return at once if it already was)."""
        with self._cond:
            while not self._notified:
                self._cond.wait()
            self._notified = False

    def unpark(self) -> None:
        """Wake the parked worker, or make its next :meth:`park` return at once."""
        with self._cond:
            self._notified = True
            self._cond.notify()

    def clear(self) -> None:
        """Drop a pending token; used by a worker that found work before it slept."""
        with self._cond:
            self._notified = False
