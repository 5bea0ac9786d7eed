"""The suite is a package: helpers come from ``tests.support``, never from a conftest or another test module.

Importing a conftest (by its bare name, or relatively from a parent folder's) works only
in some of pytest's import modes, and importing a test module runs its module-level code and
registers its tests twice over; both break under ``--import-mode=importlib``. The SDKs'
vendored suites (``tests/sdk/*/test_*.py``) are left as their authors wrote them, apart
from the lines their READMEs list: one imports a helper of its own folder's
``test_responses.py``, which holds no test.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import ROOT

TESTS = ROOT / "tests"


def _imported(path: Path) -> list[str]:
    """Every module ``path`` imports, relative ones written with their leading dots."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names += [base] if node.module else [f"{base}{alias.name}" for alias in node.names]
    return names


def _wrong(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith("test_")


def test_no_module_of_the_suite_imports_a_conftest_or_a_test_module() -> None:
    vendored = set(TESTS.glob("sdk/*/test_*.py"))
    files = sorted(path for path in TESTS.rglob("*.py") if path not in vendored)
    assert len(files) > 80 and vendored and TESTS / "support" / "backends.py" in files
    found = [f"{path.relative_to(ROOT)}: {name}" for path in files for name in _imported(path) if _wrong(name)]
    assert found == []


def test_the_check_sees_each_way_of_writing_such_an_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    # Written in pieces, so that a grep of the suite for such imports finds none here.
    conftest = "conf" + "test"
    sample.write_text(
        f"from {conftest} import x\nfrom ..{conftest} import y\nfrom . import {conftest}\n"
        "import tests.test_cli\nfrom tests.test_sessions import SeedOnly\nfrom tests.support import backends\n"
    )
    assert [name for name in _imported(sample) if _wrong(name)] == [
        "conftest",
        "..conftest",
        ".conftest",
        "tests.test_cli",
        "tests.test_sessions",
    ]
