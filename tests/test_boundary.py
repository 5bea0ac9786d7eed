"""The import boundary: the core imports no store, no driver, no Hypothesis, no cryptography, no SDK, no Django."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = (
    *("psycopg", "psycopg_pool", "pymysql", "pymongo", "redis", "hypothesis", "agentsessions.stores", "requests"),
    *("cryptography", "agentsessions.crypto"),
    *("agents", "claude_agent_sdk", "django", "agentsessions.integrations", "agentsessions.contrib"),
)


def test_importing_the_package_loads_no_driver_and_no_store() -> None:
    probe = "import json, sys, agentsessions, agentsessions.endpoints; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    )
    leaked = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert leaked == []
