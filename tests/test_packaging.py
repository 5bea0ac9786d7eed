"""The wheel and the sdist build, install into a fresh virtual environment, and import."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.slow  # builds the wheel and the sdist, installs each into a new venv

# Outside the checkout, with only what the package installs: a run on a SQLite store.
SCRIPT = """
import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.stores import sqlite

store = sqlite.open("sessions.db")
spec = agent.Spec(session=agent.open("s1", store))
result = agent.Runner().run(spec, [agent.Message.user("hi")], ScriptedEndpoint([agent.Message.assistant("hello")]))
print(agent.__version__, store.messages("s1")[-1].text)
"""


def _run(*argv: str | Path, cwd: Path = ROOT) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_wheel_and_the_sdist_install_and_import_in_a_fresh_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--outdir", dist, ROOT)
    (wheel,) = dist.glob("agentsessions-*.whl")
    (sdist,) = dist.glob("agentsessions-*.tar.gz")
    names = zipfile.ZipFile(wheel).namelist()
    assert "agentsessions/py.typed" in names and any(n.endswith("/LICENSE") for n in names)
    # The console reads its script and style sheet from the package when it starts.
    assert {"agentsessions/console/static/console.js", "agentsessions/console/static/console.css"} <= set(names)
    assert not any(n.startswith(("tests/", "benchmarks/", "examples/")) for n in names)
    # Every module of every subpackage (the stores' folders, their kit): a folder left out of
    # the package list would import in the checkout and fail once installed.
    modules = {str(path.relative_to(ROOT)) for path in (ROOT / "agentsessions").rglob("*.py")}
    assert "agentsessions/stores/kit/incremental.py" in modules and modules <= set(names)
    for archive in (wheel, sdist):
        env = tmp_path / f"venv-{archive.suffix.strip('.')}"
        venv.create(env, with_pip=True)
        python = env / "bin" / "python"
        _run(python, "-m", "pip", "install", "--quiet", archive)
        version, answer = _run(python, "-c", SCRIPT, cwd=tmp_path).split()
        assert answer == "hello" and version
        help_text = _run(env / "bin" / "agentsessions", "--help", cwd=tmp_path)
        assert "agentsessions" in help_text
