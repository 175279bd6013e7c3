"""py-spy's collapsed stacks turned into a time budget: what kind of work each sample was doing.

``py-spy record --format raw`` writes one line per distinct stack, its frames outermost first,
separated by ``;``, then a space and the number of samples that caught it::

    main (sniper/cli/_main.py:70);EmbeddingTable.lookup_shard (sniper/store/_table.py:297) 12

Without ``--idle`` py-spy keeps only the samples of threads it finds runnable: a ps blocked on
its socket or a worker parked on a condition should add nothing. Runnable is not running,
though: a thread just woken from a wait is runnable until a core is free, and py-spy then finds
it still inside the wait. py-spy also counts a blocked thread as runnable now and then (here
about 3% of its samples of a thread that never woke). So a sample whose innermost Python frame
is a blocking call (:data:`WAITS`) is no one's CPU, and :func:`cpu_by_category` splits each
thread's own CPU time (from ``/proc``) over that thread's other samples: a thread that wakes
often, or one that sleeps all along, gets only the CPU it burned.

Each sample gets one category from :data:`CATEGORIES`, read from its innermost frame outwards:
the first frame that a rule matches names it. Innermost first, so that the most specific
component that did the work is the one charged: numpy called from a codec counts as the codec,
the codec called from grpclib's send counts as the codec and not as gRPC, and a numba kernel
(invisible to py-spy: it has no Python frame) counts as the store function that called it. A
sample that no rule matches is ``other``; one with no Python frame at all (a thread in native
code only, or py-spy's ``--native`` frames alone) is :data:`NO_PYTHON_FRAME`, and so is the CPU
of threads py-spy never finds with a Python frame (Arrow's pool decoding Parquet in the hub).

The function names are py-spy 0.4's, qualified by class (``Condition.wait``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CATEGORIES",
    "NO_PYTHON_FRAME",
    "OTHER",
    "WAITS",
    "Frame",
    "Rule",
    "Stack",
    "categorise",
    "category_of",
    "cpu_by_category",
    "in_a_wait",
    "parse_collapsed",
    "parse_frame",
    "read_collapsed",
]

OTHER = "other"
NO_PYTHON_FRAME = "native threads, no Python frame (Arrow's readers, BLAS)"


@dataclass(frozen=True)
class Frame:
    """One frame of a sample: ``function (file:line)`` as py-spy prints it."""

    function: str
    """Qualified as py-spy gives it (``EmbeddingTable.lookup_shard``)."""
    file: str
    """py-spy's short filename: the path from the package down (``sniper/store/_table.py``),
    or a bare name for the standard library (``selectors.py``, ``asyncio/events.py``)."""


@dataclass(frozen=True)
class Rule:
    """A frame whose file starts with ``file`` (and, when ``functions`` is given, whose
    function is one of them) puts the sample in ``category``."""

    category: str
    file: str
    functions: frozenset[str] = frozenset()

    def matches(self, frame: Frame) -> bool:
        """Whether ``frame`` belongs to this rule's category."""
        if not frame.file.startswith(self.file):
            return False
        return not self.functions or frame.function in self.functions


def _rule(category: str, file: str, *functions: str) -> Rule:
    return Rule(category, file, frozenset(functions))


HASH_INDEX = "ps: hash index (signs to rows, shard split)"
POOLING = "ps: pooling (lookup kernels)"
OPTIMIZER = "ps: gradients and optimizer (push kernels)"
ENGINE = "ps: engine and role (batches held, results merged)"
SCHEDULER = "ps: scheduler (dispatch, steal, park)"
DATA = "hub: data reading (Parquet, synthetic)"
HUB = "hub: feeding and handing out batches"
DENSE = "trainer: dense model (forward, backward, its optimizer)"
TRAINER = "trainer: loop, metrics, fan-out to ps"
CODECS = "codecs: protobuf and tensors (betterproto, numpy)"
GRPC = "transport: gRPC, HTTP/2 (grpclib, h2, sniper.transport)"
EVENT_LOOP = "event loop (asyncio, anyio)"
THREADS = "threads: locks, queues, wake-ups"
LOGGING = "logging and metrics"
START_UP = "numba compiling, imports (start-up)"
WAKE_UPS = "waits and wake-ups (threads that only wait)"

CATEGORIES: tuple[Rule, ...] = (
    # The store, by function: a numba kernel shows up as the Python function that calls it.
    _rule(HASH_INDEX, "sniper/store/_table.py", "EmbeddingTable._map", "EmbeddingTable.split"),
    _rule(
        HASH_INDEX, "sniper/store/_table.py", "EmbeddingTable._map_rows", "EmbeddingTable._restamp"
    ),
    _rule(HASH_INDEX, "sniper/store/_table.py", "EmbeddingTable._check_fits", "_check_batch"),
    _rule(HASH_INDEX, "sniper/store/_grouped.py", "pin_shards"),
    _rule(POOLING, "sniper/store/_grouped.py", "pool_shards"),
    _rule(POOLING, "sniper/store/_table.py", "EmbeddingTable.lookup_shard"),
    _rule(POOLING, "sniper/store/_table.py", "EmbeddingTable.lookup_pool"),
    _rule(OPTIMIZER, "sniper/store/_grouped.py", "push_shards", "max_abs_matrices"),
    _rule(OPTIMIZER, "sniper/store/_table.py", "EmbeddingTable.push_grad_shard"),
    _rule(OPTIMIZER, "sniper/store/_table.py", "EmbeddingTable._rows_for_push", "_check_grads"),
    _rule(OPTIMIZER, "sniper/store/_optimizers.py"),
    _rule(ENGINE, "sniper/store/"),
    _rule(ENGINE, "sniper/roles/_engine.py"),
    _rule(ENGINE, "sniper/roles/_ps.py"),
    _rule(SCHEDULER, "sniper/scheduler/"),
    _rule(TRAINER, "sniper/data/_metrics.py"),  # AUC and log loss: the trainer's
    _rule(DATA, "sniper/data/"),
    _rule(DATA, "pyarrow/"),
    _rule(HUB, "sniper/roles/_hub.py"),
    _rule(HUB, "sniper/roles/_handout.py"),
    _rule(DENSE, "sniper/models/"),
    _rule(DENSE, "sniper/torch/"),
    _rule(DENSE, "torch/"),
    _rule(TRAINER, "sniper/roles/"),
    _rule(CODECS, "sniper/rpc/_codec.py"),
    _rule(CODECS, "sniper/rpc/_tensor.py"),
    _rule(CODECS, "sniper/rpc/_wire.py"),
    _rule(CODECS, "betterproto/"),
    _rule(GRPC, "sniper/rpc/"),
    _rule(GRPC, "sniper/transport/"),
    _rule(GRPC, "grpclib/"),
    _rule(GRPC, "h2/"),
    _rule(GRPC, "hpack/"),
    _rule(GRPC, "multidict/"),
    _rule(EVENT_LOOP, "asyncio/"),
    _rule(EVENT_LOOP, "anyio/"),
    _rule(EVENT_LOOP, "selectors.py"),
    _rule(EVENT_LOOP, "sniffio/"),
    _rule(THREADS, "threading.py"),
    _rule(THREADS, "queue.py"),
    _rule(THREADS, "concurrent/"),
    _rule(LOGGING, "logging/"),
    _rule(LOGGING, "prometheus_client/"),
    _rule(LOGGING, "sniper/_metrics.py"),
    _rule(LOGGING, "sniper/monitoring/"),
    _rule(START_UP, "<frozen importlib"),
    _rule(START_UP, "numba/"),
    _rule(START_UP, "llvmlite/"),
)
"""Categories by module (and, in the store, by function), tried in this order on each frame.

A module's rule sits above a broader one it would otherwise fall under (``sniper/store/``
functions above the store as a whole; ``sniper/data/_metrics.py``, which the trainer calls,
above the hub's ``sniper/data/``). numpy is deliberately absent: its time belongs to whoever
called it (the dense model, a codec, the engine merging results).
"""

WAITS: tuple[Rule, ...] = (
    _rule(WAKE_UPS, "threading.py", "Condition.wait", "Event.wait", "Semaphore.acquire"),
    _rule(WAKE_UPS, "threading.py", "Condition._acquire_restore", "Thread.join"),
    _rule(WAKE_UPS, "threading.py", "Thread._wait_for_tstate_lock"),
    # An idle executor thread (Parquet reads) waits in SimpleQueue.get, which has no Python
    # frame: its innermost is the loop that called it. Running a task, it has deeper ones.
    _rule(WAKE_UPS, "concurrent/futures/thread.py", "_worker"),
    # Epoll and poll selectors inherit their select, which py-spy names by its class.
    _rule(WAKE_UPS, "selectors.py", "_PollLikeSelector.select", "SelectSelector.select"),
    _rule(WAKE_UPS, "selectors.py", "EpollSelector.select", "KqueueSelector.select"),
    _rule(WAKE_UPS, "sniper/cluster/_serve.py", "_wait_for_eof"),  # in os.read of stdin
)
"""Python frames that block: a sample whose innermost Python frame is one of them caught a
thread runnable but not yet running again, or entering the wait, or one py-spy misjudged."""

_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
_THREAD = re.compile(r"^thread \((?P<id>[^)]*)\)")


@dataclass(frozen=True)
class Stack:
    """One line of collapsed stacks: a thread's frames (outermost first) and its samples."""

    thread: int | None
    """The OS thread id (py-spy ``--threads``), None when py-spy did not give one."""
    frames: tuple[Frame, ...]
    samples: int


def parse_frame(text: str) -> Frame | None:
    """A Python frame; None for py-spy's ``process``/``thread`` frames and unparsable ones."""
    if text.startswith(("process ", "thread ")):
        return None
    match = _FRAME.match(text)
    return Frame(match["function"], match["file"]) if match else None


def _thread_of(texts: Iterable[str]) -> int | None:
    for text in texts:
        if (match := _THREAD.match(text)) is not None:
            return int(match["id"]) if match["id"].isdigit() else None
    return None


def parse_collapsed(lines: Iterable[str]) -> Iterator[Stack]:
    """Each stack of a collapsed-stack file.

    Raises ValueError naming the line when one is not ``frames count``: the file is not
    py-spy's raw output (or was cut short).
    """
    for number, line in enumerate(lines, 1):
        text = line.rstrip("\n")
        if not text.strip():
            continue
        stack, _, count = text.rpartition(" ")
        if not count.isdigit():
            raise ValueError(
                f"line {number} of the collapsed stacks does not end in a sample count: "
                f"{text[-80:]!r}; give py-spy's --format raw output"
            )
        texts = stack.split(";")
        frames = tuple(f for f in map(parse_frame, texts) if f is not None)
        yield Stack(_thread_of(texts), frames, int(count))


def read_collapsed(path: Path) -> list[Stack]:
    """Every stack of a py-spy raw file."""
    with path.open() as lines:
        return list(parse_collapsed(lines))


def category_of(frames: Sequence[Frame], rules: Sequence[Rule] = CATEGORIES) -> str:
    """The category of one sample: the first rule matching its innermost matching frame."""
    if not frames:
        return NO_PYTHON_FRAME
    for frame in reversed(frames):
        for rule in rules:
            if rule.matches(frame):
                return rule.category
    return OTHER


def in_a_wait(frames: Sequence[Frame]) -> bool:
    """Whether the innermost Python frame is a blocking wait (:data:`WAITS`)."""
    python = [f for f in frames if f.file.endswith(".py") or f.file.startswith("<")]
    return bool(python) and any(rule.matches(python[-1]) for rule in WAITS)


def categorise(stacks: Iterable[Stack], rules: Sequence[Rule] = CATEGORIES) -> Counter[str]:
    """Samples per category, those caught in a wait left out."""
    counts: Counter[str] = Counter()
    for stack in stacks:
        if not in_a_wait(stack.frames):
            counts[category_of(stack.frames, rules)] += stack.samples
    return counts


def cpu_by_category(
    stacks: Sequence[Stack], thread_cpu: Mapping[int, float], process_cpu: float
) -> dict[str, float]:
    """A process's CPU seconds split by category, each thread's own CPU over its samples.

    Each thread's CPU time (``thread_cpu``, by thread id, the threads alive at the end) is
    split over that thread's categories as its samples are, those caught in a wait left out;
    a thread with CPU time and only such samples spent it waiting and waking
    (:data:`WAKE_UPS`), one with no sample at all ran no Python (:data:`NO_PYTHON_FRAME`:
    Arrow's and BLAS's threads). What is left of ``process_cpu`` is the threads that exited
    meanwhile: it is split over the samples of threads not in ``thread_cpu``.
    """
    by_thread: dict[int | None, list[Stack]] = {}
    for stack in stacks:
        by_thread.setdefault(stack.thread, []).append(stack)
    split: dict[str, float] = {}
    # /proc counts in clock ticks, each thread's rounded apart: their sum can pass the process's
    # by a few ticks. The process's total stands; its threads are scaled into it.
    scale = min(1.0, process_cpu / (sum(thread_cpu.values()) or 1.0))
    for thread, seconds in thread_cpu.items():
        own = by_thread.pop(thread, None)
        counts = categorise(own) if own else Counter({NO_PYTHON_FRAME: 1})
        _spread(split, counts, seconds * scale)
    exited = [stack for own in by_thread.values() for stack in own]
    left = max(0.0, process_cpu - sum(thread_cpu.values()))
    _spread(split, categorise(exited) if exited else Counter({NO_PYTHON_FRAME: 1}), left)
    return {category: seconds for category, seconds in split.items() if seconds}


def _spread(split: dict[str, float], counts: Counter[str], seconds: float) -> None:
    """Add ``seconds`` to ``split``, shared among categories as ``counts`` are (all to
    :data:`WAKE_UPS` when there are none)."""
    total = sum(counts.values())
    if not total:
        counts, total = Counter({WAKE_UPS: 1}), 1
    for category, count in counts.items():
        split[category] = split.get(category, 0.0) + seconds * count / total
