"""``python -m sniper`` is the ``sniper`` command."""

import sys

from sniper._cli import main

sys.exit(main())
