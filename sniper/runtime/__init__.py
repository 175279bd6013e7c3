"""Process-wide settings for programs that embed sniper's servers or clients.

The ``sniper`` command applies them at start-up; an application that runs a ps or a trainer
in its own process calls them once, early. What ``/proc`` says about processes (CPU time,
children, command lines, listening sockets) is read here too, for whatever watches a job.
"""

from sniper.runtime._capacity import parallel_capacity as parallel_capacity
from sniper.runtime._gc import collect_less as collect_less
from sniper.runtime._logging import log_to_stderr as log_to_stderr
from sniper.runtime._malloc import release_freed_memory as release_freed_memory
from sniper.runtime._malloc import reuse_freed_memory as reuse_freed_memory
from sniper.runtime._proc import busy_share as busy_share
from sniper.runtime._proc import children as children
from sniper.runtime._proc import command_line as command_line
from sniper.runtime._proc import cpu_seconds as cpu_seconds
from sniper.runtime._proc import descendants as descendants
from sniper.runtime._proc import listening_pid as listening_pid
from sniper.runtime._proc import machine_cpu_reading as machine_cpu_reading
from sniper.runtime._proc import machine_cpu_seconds as machine_cpu_seconds
from sniper.runtime._proc import machine_steal_reading as machine_steal_reading
from sniper.runtime._proc import thread_cpu_seconds as thread_cpu_seconds
from sniper.runtime._proc import thread_names as thread_names

__all__ = [
    "busy_share",
    "children",
    "collect_less",
    "command_line",
    "cpu_seconds",
    "descendants",
    "listening_pid",
    "log_to_stderr",
    "machine_cpu_reading",
    "machine_cpu_seconds",
    "machine_steal_reading",
    "parallel_capacity",
    "release_freed_memory",
    "reuse_freed_memory",
    "thread_cpu_seconds",
    "thread_names",
]
