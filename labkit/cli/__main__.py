"""`python -m labkit.cli`: the `labkit` command (reproduce runs each bench this way, in a fresh process)."""

import sys

from labkit.cli import main

sys.exit(main())
