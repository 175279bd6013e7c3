"""``Ranks``: the trainers of one job (``num_trainers``), joined by ``torch.distributed``.

Several trainer processes (ranks) train one job: each reads its own hubs, looks up and pushes
its own batches against the shared ps, and every step they average the dense model's gradients
with one all-reduce, so that every rank applies the same update and the ranks hold one model.
This module is that collective and the few others a job needs (a broadcast at the start, a
gather and a barrier at each checkpoint and at the end); sniper writes no collective of its
own. The process group is gloo on the CPU; with GPUs enough for one per rank on the host, a
model's gradients on a GPU go through NCCL (``cpu:gloo,cuda:nccl``), and otherwise through
gloo by way of the host.

Uneven data. The hubs hand each rank its own batches, and one rank's data may end a few
steps before another's. A rank whose data has ended goes on taking part in every step with
a weight of 0 (:meth:`Ranks.average`): its gradients count for nothing, it applies the same
averaged update, and the step whose weights sum to 0 tells every rank at once that every
rank's data has ended. The steps of every rank stay aligned, so a checkpoint every ``K``
steps pauses every rank at the same step.

Local SGD (``sync = "local_sgd"``). Each rank applies its own updates, and every
``sync_every`` steps the ranks average the model's state instead (:meth:`Ranks.local_step`):
its floating-point arrays (parameters, the optimizer's moments), each rank weighted by
whether it trained a batch since the last average. The steps stay aligned as above (a rank
whose data has ended counts the others' steps, without a collective until the next average),
and the first average after every rank's data has ended is the job's last: up to
``sync_every`` - 1 steps after the last batch trained.

Failure. Every collective is bounded by the group's timeout (``collective_timeout``), and a
peer that dies closes its connections, which fails the others' collective at once: either
way the call raises :class:`~sniper.roles.TrainingError` naming the collective, the job's
attempt fails, and the supervisor restarts the ranks from the latest checkpoint. No rank
waits for a dead one.

Networks. A rank's collective listens on one of its machine's interfaces and tells the
others its address. By default that is the interface of the address the machine's hostname
resolves to; a rank given its own address (a cluster spec's ``[[trainer]] host``) uses the
interface holding it instead (:func:`interface_of`), so that ranks on machines with several
networks, or in network namespaces, reach each other where the spec says.

torch is needed only here and only when ``num_trainers`` > 1: the numpy MLP of a
single-rank job never imports it.
"""

from __future__ import annotations

import datetime
import fcntl
import logging
import os
import re
import socket
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sniper._metrics import Histogram
from sniper.models import DenseModel
from sniper.roles._errors import TrainingError

__all__ = ["RankMaster", "Ranks", "import_torch_distributed", "interface_of"]

log = logging.getLogger("sniper.trainer")
T = TypeVar("T")

NEEDS_TORCH = (
    "num_trainers > 1 averages the dense model's gradients with torch.distributed, and torch "
    "is not installed: pip install 'sniper[torch]' (or train with num_trainers = 1)"
)
"""The one line a job with several ranks fails with where torch is missing."""


def import_torch_distributed() -> Any:
    """``torch.distributed``, or ``ValueError`` with :data:`NEEDS_TORCH`."""
    try:
        import torch.distributed as dist
    except ImportError:
        raise ValueError(NEEDS_TORCH) from None
    if not dist.is_available():
        raise ValueError(NEEDS_TORCH)
    return dist


SIOCGIFADDR = 0x8915
"""Linux's ioctl that reads an interface's IPv4 address."""


def interface_of(host: str) -> str:
    """The name of this machine's network interface that holds ``host``'s (IPv4) address:
    where a rank given that address binds its collective. ``ValueError`` where ``host`` does
    not resolve or no interface here holds it (the spec names another machine)."""
    try:
        address = socket.gethostbyname(host)
    except OSError as exc:
        raise ValueError(f"trainer host {host!r} does not resolve: {exc}") from None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)
            except OSError:
                continue  # no IPv4 address on this one
            if socket.inet_ntoa(answer[20:24]) == address:
                return name
    raise ValueError(
        f"trainer host {host!r} ({address}) is not an address of this machine: a rank runs "
        "on the machine its [[trainer]] entry names"
    )


class RankMaster:
    """The rendezvous of a job's ranks (a ``TCPStore``), held by rank 0's process: made
    before the other ranks start, so that they are told its port (``port`` 0: a free one).
    ``interface``: the network interface of rank 0's collective (None: by hostname)."""

    def __init__(
        self,
        host: str,
        size: int,
        timeout: float,
        port: int = 0,
        interface: str | None = None,
    ) -> None:
        dist = import_torch_distributed()
        self.host = host
        self.interface = interface
        try:
            self.store = dist.TCPStore(
                host,
                port,
                size,
                True,
                timeout=datetime.timedelta(seconds=timeout),
                wait_for_workers=False,
            )
        except RuntimeError as exc:
            raise ValueError(
                f"the ranks' rendezvous cannot listen on port {port}: {_reason(exc)}"
            ) from None
        self.port = int(self.store.port)

    @property
    def address(self) -> str:
        """``host:port`` for the other ranks' ``--master``."""
        return f"{self.host}:{self.port}"


class Ranks:
    """Rank ``rank`` of ``size`` in a process group (see the module doc). Blocking calls:
    the trainer makes them on its model thread or a worker thread, never on its loop."""

    def __init__(
        self,
        rank: int,
        size: int,
        master: str | RankMaster,
        timeout: float,
        interface: str | None = None,
        sync: str = "allreduce",
        sync_every: int = 1,
    ) -> None:
        """``interface``: the network interface this rank's collective binds to
        (:func:`interface_of`; rank 0's is ``master``'s; None: the hostname's). ``sync``:
        ``allreduce`` (:meth:`average` each step's gradients) or ``local_sgd``
        (:meth:`local_step`, the model's state averaged every ``sync_every`` steps)."""
        dist = import_torch_distributed()
        import torch

        self.rank = rank
        self.size = size
        self.timeout = timeout
        self.local_sgd = sync == "local_sgd"
        """Each rank updates its own model; :meth:`local_step` averages them now and then."""
        self.sync_every = sync_every
        self._local_steps = 0
        self._trained_since_average = False
        if isinstance(master, RankMaster):
            store = master.store
            interface = master.interface
        else:
            host, _, port = master.rpartition(":")
            store = dist.TCPStore(
                host, int(port), size, False, timeout=datetime.timedelta(seconds=timeout)
            )
        if interface is not None:
            # gloo reads it when the group is made; this process is one rank, so it is ours.
            os.environ["GLOO_SOCKET_IFNAME"] = interface
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        self.nccl = gpus >= size
        """A GPU of its own for each rank on this host: gradients on a GPU go through NCCL."""
        if self.nccl:
            torch.cuda.set_device(rank % gpus)
        self._call(
            "joining the job's ranks",
            lambda: dist.init_process_group(
                "cpu:gloo,cuda:nccl" if self.nccl else "gloo",
                store=store,
                rank=rank,
                world_size=size,
                timeout=datetime.timedelta(seconds=timeout),
            ),
        )
        self._dist = dist
        self.allreduce = Histogram()
        """Time of each step's all-reduce of the gradients."""
        self.bytes_per_step = 0
        """Bytes of gradients each rank all-reduces per step."""
        self.contributors = size
        """Ranks that trained a batch in the latest step (0: every rank's data has ended)."""
        log.info("trainer rank %d of %d joined the job's ranks", rank, size)

    def _call(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, a failure of the group (a rank died, or the timeout passed) as one
        :class:`TrainingError` line naming ``what`` the ranks were doing."""
        try:
            return call()
        except RuntimeError as exc:
            raise TrainingError(
                f"trainer rank {self.rank} of {self.size}: {what} failed (a rank died, or did "
                f"not answer within collective_timeout {self.timeout:g} s): {_reason(exc)}"
            ) from exc

    def average(self, grads: Sequence[Any], weight: float = 1.0) -> bool:
        """Average ``grads`` (numpy arrays or tensors, the same shapes on every rank) in
        place across the ranks, each rank's weighted by ``weight`` (1: it trained a batch; 0:
        its data has ended). False: every weight was 0, so there is no update to apply."""
        import numpy as np
        import torch

        tensors = [g if isinstance(g, torch.Tensor) else torch.from_numpy(g) for g in grads]
        device = tensors[0].device if tensors else torch.device("cpu")
        flat = torch.cat(
            [t.detach().reshape(-1).to(torch.float32) for t in tensors]
            + [torch.tensor([weight], dtype=torch.float32, device=device)]
        )
        if weight != 1.0:
            flat[:-1] *= weight
        self.bytes_per_step = flat.numel() * flat.element_size()
        start = time.perf_counter()
        wire = flat if device.type == "cpu" or self.nccl else flat.cpu()
        self._call("the all-reduce of the gradients", lambda: self._dist.all_reduce(wire))
        self.allreduce.record(time.perf_counter() - start)
        total = float(wire[-1])
        self.contributors = int(np.rint(total))
        if total <= 0:
            return False
        wire = wire.to(device) if wire.device != device else wire
        wire /= total
        offset = 0
        for tensor in tensors:
            count = tensor.numel()
            tensor.copy_(wire[offset : offset + count].view_as(tensor))
            offset += count
        return True

    def local_step(self, model: DenseModel, trained: bool) -> bool:
        """``local_sgd``: count a step of the job, in which this rank trained a batch (and
        applied its update) or not (its data has ended); every ``sync_every``-th, average
        ``model``'s state across the ranks, weighted by whether each trained since the last
        average. False: no rank trained this step (every rank's data has ended)."""
        self._trained_since_average |= trained
        self._local_steps += 1
        if self._local_steps % self.sync_every:
            return True
        weight = 1.0 if self._trained_since_average else 0.0
        self._trained_since_average = False
        self.average_state(model, weight)
        # A rank trains every step until its data ends, then joins: none trained this step
        # means every rank's data has ended.
        return self.any(trained)

    def average_state(self, model: DenseModel, weight: float = 1.0) -> bool:
        """Average ``model``'s floating-point state arrays across the ranks (each weighted by
        ``weight``), as :meth:`average` does gradients, and load the result into it."""
        import numpy as np

        arrays = model.state()
        floats = {
            name: np.array(array, copy=True, order="C")
            for name, array in arrays.items()
            if np.issubdtype(array.dtype, np.floating) and array.ndim
        }
        if not self.average(list(floats.values()), weight):
            return False
        model.load_state({**arrays, **floats})
        return True

    def broadcast(self, value: T | None) -> T:
        """Rank 0's ``value`` on every rank (the others pass None)."""
        box = [value]
        self._call("the start's broadcast", lambda: self._dist.broadcast_object_list(box, src=0))
        assert box[0] is not None
        return box[0]

    def gather(self, value: T) -> list[T]:
        """Every rank's ``value``, by rank, on every rank."""
        values: list[Any] = [None] * self.size
        self._call("gathering the ranks' state", lambda: self._gather(values, value))
        return values

    def _gather(self, values: list[Any], value: object) -> None:
        self._dist.all_gather_object(values, value)

    def any(self, flag: bool) -> bool:
        """Whether any rank's ``flag`` is true."""
        import torch

        value = torch.tensor([1.0 if flag else 0.0])
        self._call("agreeing on the end", lambda: self._dist.all_reduce(value))
        return float(value[0]) > 0

    def barrier(self) -> None:
        """Wait until every rank gets here (rank 0's checkpoint is saved)."""
        self._call("waiting for the checkpoint", self._dist.barrier)

    def close(self) -> None:
        """Leave the process group (after a failure too)."""
        try:
            self._dist.destroy_process_group()
        except (RuntimeError, ValueError, AssertionError) as exc:
            log.debug("leaving the ranks' process group: %s", exc)


_SOURCE = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*")
"""The source location gloo and c10d put before their messages (``[/__w/pytorch/.../pair.cc:553]
``): a build machine's path, nothing the user can act on."""
_ADVICE = re.compile(r"\s+(?:This is typically caused by|Check the logs of)\b.*$")
"""What torch.distributed says after its reason: advice for its own launcher's workers."""


def _reason(exc: BaseException) -> str:
    """torch.distributed's error on one line: its first, without the source location before it
    or the advice after it, cut at a word past 200 characters (the cause, such as
    ``EADDRINUSE`` or ``1/2 clients joined``, is in the line's middle: it stays)."""
    first = (str(exc).splitlines() or [""])[0]
    reason = _ADVICE.sub("", _SOURCE.sub("", first)).strip() or type(exc).__name__
    if len(reason) <= 200:
        return reason
    return reason[:200].rsplit(" ", 1)[0] + " ..."
