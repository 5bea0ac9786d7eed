"""``python -m agentsessions.cli``: the operator command, as ``python -m agentsessions`` runs it."""

import sys

from agentsessions.cli import main

sys.exit(main())
