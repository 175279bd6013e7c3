"""``python -m sniper`` is the ``sniper`` command."""

import sys

from sniper.cli import main

sys.exit(main())
