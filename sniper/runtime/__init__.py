"""Process-wide settings for programs that embed sniper's servers or clients.

The ``sniper`` command applies them at start-up; an application that runs a ps or a trainer
in its own process calls them once, early.
"""

from sniper.runtime._gc import collect_less as collect_less
from sniper.runtime._logging import log_to_stderr as log_to_stderr
from sniper.runtime._malloc import reuse_freed_memory as reuse_freed_memory

__all__ = ["collect_less", "log_to_stderr", "reuse_freed_memory"]
