"""With only the package's own requirements, pytest and Hypothesis installed, the whole suite collects.

A fresh virtual environment gets setup.cfg's ``install_requires`` and the test extra's pytest
and Hypothesis, nothing else; the package itself comes from the checkout (pytest's
``pythonpath``). Outside CI, a module whose driver or SDK is missing skips itself, naming
what to install; no module may fail to collect.
"""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import venv
from pathlib import Path

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.slow  # a new virtual environment and a pip install

# A skip_without in a module or a folder's conftest, as pytest -rs reports it: where, what is missing, how to install.
SKIPPED = re.compile(r"^SKIPPED \[\d+\] (tests/\S+\.py):\d+: needs (.+): pip install -e '\.\[test\]'")


def _requirements() -> list[str]:
    """setup.cfg's ``install_requires``, and the pytest and Hypothesis lines of its ``test`` extra."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")

    def lines(value: str) -> list[str]:
        return [line.split("#")[0].strip() for line in value.splitlines() if line.split("#")[0].strip()]

    test_extra = lines(config["options.extras_require"]["test"])
    runners = [line for line in test_extra if re.match(r"(pytest|hypothesis)(?![\w-])", line)]  # not pytest-xdist
    assert len(runners) == 2, test_extra
    return lines(config["options"]["install_requires"]) + runners


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


def test_the_suite_collects_with_only_the_base_requirements_pytest_and_hypothesis(tmp_path: Path) -> None:
    venv.create(tmp_path / "bare", with_pip=True)
    python = str(tmp_path / "bare" / "bin" / "python")
    installed = _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *_requirements()])
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "psycopg" not in _run([python, "-m", "pip", "freeze"]).stdout.lower()  # nothing came in by the way

    # Not in CI (where a missing driver must fail, not skip); no PYTHONPATH reaching this interpreter's packages.
    env = {key: value for key, value in os.environ.items() if key not in ("CI", "PYTHONPATH")}
    argv = [python, "-m", "pytest", "--collect-only", "-q", "-rs", "-p", "no:cacheprovider", "tests"]
    done = _run(argv, env)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    summary = out.strip().splitlines()[-1]
    assert re.match(r"\d+ tests collected in ", summary), summary  # no ", N errors"
    assert "ERROR" not in out, out

    skipped = {match[1]: match[2] for line in out.splitlines() if (match := SKIPPED.match(line))}
    reported = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    unnamed = [line for line in reported if not SKIPPED.match(line)]
    assert not unnamed, f"skips that do not name what to install (use tests.support.servers.skip_without): {unnamed}"
    # The store modules are among them: their drivers are extras, not requirements.
    assert {"tests/stores/test_store_postgres.py", "tests/stores/test_store_redis.py"} <= set(skipped), skipped
    assert "psycopg" in skipped["tests/stores/test_store_postgres.py"]
