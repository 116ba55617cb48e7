"""`python -m proxy`: the same as `logquake proxy`."""

import sys

from proxy.cli import main

sys.exit(main())
