"""Pluggable task schedulers for a parameter server's per-variable work.

A ps handles every RPC by running kernels (numba ``nogil``, numpy) on embedding tables. A
``Scheduler`` runs those kernels on threads, driven from async gRPC handlers (asyncio or trio,
through anyio) or from sync code. The backends, opened by name with :func:`open_scheduler`,
are interchangeable so they can be compared on the same workload:

``inline``
    Runs the task inside ``submit``: the zero-overhead, zero-parallelism baseline.
``thread_pool``
    One FIFO queue, N threads.
``per_variable``
    One mailbox per key, N threads; a key's tasks run one at a time in submission order, so a
    shard's data needs no lock. The only backend that merges tasks (see below).
``work_stealing``
    Per-worker deques plus an inject queue; idle workers steal half of a busy one's deque.

Other distributions add backends under their own names through the ``sniper.schedulers``
entry-point group; :func:`scheduler_names` lists every name that opens (see
:mod:`sniper.scheduler._registry`).

The contract every backend keeps (exactly-once, ordering, thread-safety, cancellation, errors,
shutdown) is in the :class:`Scheduler` docstring.

**Keys and huge variables.** A task is keyed by ``TaskKey(variable, shard)``; a plain
variable name means shard 0. One huge variable (``embedding_11``: 270k signs per batch) must
not be one task on one thread, so the caller splits it: ``sniper.hashing.shard_of(signs, n)``
assigns every sign to one of ``n`` shards, and the caller submits one task per
``(variable, shard)`` with that shard's signs. ``work_stealing`` lets idle workers take those
shards from whichever worker queued them; ``per_variable`` keys its mailboxes by
``(variable, shard)``, so the shards of one variable run in parallel while each shard stays
single-threaded and lock-free. A task may also split its own work by submitting sub-tasks
(they go to the current worker's deque on ``work_stealing``), but must not block waiting for
them.

**Merging.** ``submit(key, fn, *args, merge=batch_fn)`` opts a task into merging:
``batch_fn([args1, args2, ...])`` must return ``[fn(*args1), fn(*args2), ...]``.
``per_variable`` drains a mailbox in batches and replaces consecutive queued tasks of the key
that pass the same ``batch_fn`` object with one call (several lookups of one shard become one
kernel pass); each handle still gets its own result. Every other backend calls ``fn`` per
task, so merging is an optimization that never changes results. Details in
``Scheduler.submit``.

**Groups.** ``await wait_all(handles)`` returns every result in order and wakes the event loop
once for the whole group instead of once per task; a failure is raised only after every task
has finished.

Example::

    async with open_scheduler("per_variable", workers=4) as scheduler:
        rows = await scheduler.run(TaskKey("embedding_11", 3), lookup, signs)
        handle = scheduler.submit("embedding_2", push_grad, signs, grads)  # from any thread
        handle.result(timeout=1.0)  # blocking wait, from a plain thread
"""

from sniper._metrics import Histogram as Histogram
from sniper._metrics import LatencySummary as LatencySummary

from ._abc import Scheduler as Scheduler
from ._exceptions import SchedulerBusy as SchedulerBusy
from ._exceptions import SchedulerClosed as SchedulerClosed
from ._exceptions import SchedulerError as SchedulerError
from ._exceptions import TaskCancelled as TaskCancelled
from ._group import wait_all as wait_all
from ._key import KeyLike as KeyLike
from ._key import TaskKey as TaskKey
from ._registry import SCHEDULER_NAMES as SCHEDULER_NAMES
from ._registry import open_scheduler as open_scheduler
from ._registry import scheduler_names as scheduler_names
from ._stats import SchedulerStatistics as SchedulerStatistics
from ._task import MergeFn as MergeFn
from ._task import Outcome as Outcome
from ._task import TaskHandle as TaskHandle

__all__ = [
    "SCHEDULER_NAMES",
    "Histogram",
    "KeyLike",
    "LatencySummary",
    "MergeFn",
    "Outcome",
    "Scheduler",
    "SchedulerBusy",
    "SchedulerClosed",
    "SchedulerError",
    "SchedulerStatistics",
    "TaskCancelled",
    "TaskHandle",
    "TaskKey",
    "open_scheduler",
    "scheduler_names",
    "wait_all",
]
