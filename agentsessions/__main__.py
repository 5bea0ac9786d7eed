"""``python -m agentsessions``: the operator command (see :mod:`agentsessions.cli`)."""

import sys

from agentsessions.cli import main

sys.exit(main())
