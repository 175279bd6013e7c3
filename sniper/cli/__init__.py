"""The ``sniper`` command line: one module per command group, each owning its parser.

``main`` is the console script (``sniper``) and ``python -m sniper``. Each command imports its
implementation only when it runs, so ``sniper --help`` never pays for numba or grpclib.
"""

from sniper.cli._main import main as main

__all__ = ["main"]
