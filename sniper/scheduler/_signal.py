"""A one-shot, thread-safe completion flag that sync code and async code can both wait on.

Worker threads finish tasks; awaiters live in an event loop (asyncio or trio) or in plain
threads. Two rules shape this module:

* A worker must never block on an event loop, and an await must not cost a thread. So an async
  waiter captures its running loop when it starts waiting and registers a callback that hops
  onto that loop with the loop's own non-blocking, thread-safe entry point
  (``loop.call_soon_threadsafe`` for asyncio, ``TrioToken.run_sync_soon`` for trio), where it
  sets an ``anyio.Event``.
* Sync waiters are rare next to async ones, so the ``threading.Event`` they block on is created
  only when the first one arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from functools import partial

import anyio
import anyio.lowlevel
import sniffio

__all__ = ["Callback", "OneShot", "run_callbacks"]

Callback = Callable[[], None]


class OneShot:
    """A flag that goes from unset to set exactly once, with callbacks and sync/async waits.

    Its methods are underscored because :class:`~sniper.scheduler.TaskHandle` extends it and
    must not grow a public ``set()``; the scheduler package uses them directly.
    """

    __slots__ = ("_callbacks", "_event", "_is_set", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._is_set = False
        self._event: threading.Event | None = None
        self._callbacks: list[Callback] | None = None

    def _set(self) -> None:
        """Set the flag and run the callbacks, from any thread; later calls do nothing."""
        with self._lock:
            if self._is_set:
                return
            callbacks = self._mark_set_locked()
        run_callbacks(callbacks)

    def _wait_blocking(self, timeout: float | None = None) -> bool:
        """Block the calling thread until set; return False if ``timeout`` seconds passed first."""
        if self._is_set:
            return True
        with self._lock:
            if self._is_set:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    async def _wait_async(self) -> None:
        """Wait in the running asyncio or trio loop without blocking it or using a thread.

        If the flag is already set this only checks for cancellation, so awaiting work that
        finished inline costs no trip through the loop.
        """
        if self._is_set:
            await anyio.lowlevel.checkpoint_if_cancelled()
            return
        event = anyio.Event()
        callback = partial(_current_loop_scheduler(), event.set)
        if not self._add_callback(callback):
            await anyio.lowlevel.checkpoint_if_cancelled()
            return
        try:
            await event.wait()
        except BaseException:
            self._remove_callback(callback)
            raise

    def _mark_set_locked(self) -> list[Callback] | None:
        """Set the flag while the caller holds the lock; the caller runs what this returns."""
        self._is_set = True
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, None
        return callbacks

    def _add_callback(self, callback: Callback) -> bool:
        """Register ``callback`` for when the flag is set; False if it is set already."""
        with self._lock:
            if self._is_set:
                return False
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append(callback)
            return True

    def _remove_callback(self, callback: Callback) -> None:
        with self._lock:
            if self._callbacks is not None and callback in self._callbacks:
                self._callbacks.remove(callback)


def run_callbacks(callbacks: list[Callback] | None) -> None:
    """Run what ``OneShot._mark_set_locked`` returned, after the lock is released."""
    for callback in callbacks or ():
        callback()


def _current_loop_scheduler() -> Callable[[Callback], None]:
    """Return a function that runs a callback soon in the current event loop, from any thread."""
    library = sniffio.current_async_library()
    schedule: Callable[[Callback], object]
    if library == "asyncio":
        schedule = asyncio.get_running_loop().call_soon_threadsafe
    elif library == "trio":
        import trio

        schedule = trio.lowlevel.current_trio_token().run_sync_soon
    else:
        raise RuntimeError(f"sniper.scheduler can be awaited under asyncio or trio, not {library}")
    return partial(_schedule_quietly, schedule)


def _schedule_quietly(schedule: Callable[[Callback], object], callback: Callback) -> None:
    # A loop that has closed (asyncio) or a run that has finished (trio's RunFinishedError)
    # raises RuntimeError: nobody can be waiting any more, and the worker thread calling us
    # must not die for it.
    with contextlib.suppress(RuntimeError):
        schedule(callback)
