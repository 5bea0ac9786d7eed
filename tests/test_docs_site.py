"""The documentation site, built as CI builds it, then read as a visitor would: no raw reST, no bare signature.

The docstrings use Sphinx's roles; ``docs/griffe_extensions.py`` renders them as links
when the site is built. This builds the site strictly and scans every page it wrote for a
role left raw, and every signature of the API reference for a parameter or a return
without its annotation; each count is printed, and must be 0.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.servers import skip_without

pytestmark = pytest.mark.slow  # builds the documentation site

RAW_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj|const|ref):(?:`|<code>)")
HEADING_AND_SIGNATURE = re.compile(
    r'doc-symbol-heading doc-symbol-(?P<kind>\w+)".*?<span class="doc doc-object-name[^"]*">(?P<name>[^<]+)</span>'
    r'.*?(?:<div class="doc-signature highlight"><pre>(?P<signature>.*?)</pre>|(?=doc-symbol-heading)|\Z)',
    re.DOTALL,
)
TAG = re.compile(r"<[^>]+>")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built with ``mkdocs build --strict`` (a broken link or reference fails the build)."""
    skip_without("mkdocs", "mkdocstrings", "griffe_fieldz", extra="docs")
    where = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(where)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return where


def _pages(site: Path, under: str = "") -> dict[str, str]:
    return {str(page.relative_to(site)): page.read_text() for page in sorted((site / under).rglob("*.html"))}


def test_no_page_shows_a_raw_role(site: Path) -> None:
    found = {name: RAW_ROLE.findall(text) for name, text in _pages(site).items()}
    found = {name: roles for name, roles in found.items() if roles}
    print(f"raw reST roles in the built site: {sum(map(len, found.values()))}")
    assert not found, found


def _parameters(signature: str) -> tuple[list[str], str]:
    """The parameters of a rendered signature, split at its top-level commas, and what follows its ``)``."""
    text = html.unescape(TAG.sub("", signature))
    start = text.index("(")
    depth, parts, current = 0, [], ""
    for index, char in enumerate(text[start + 1 :], start + 1):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                parts.append(current)
                return [p.strip() for p in parts if p.strip()], text[index + 1 :]
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    raise AssertionError(f"no closing parenthesis in {text!r}")


def _unannotated(kind: str, signature: str) -> list[str]:
    parameters, rest = _parameters(signature)
    missing = [p for p in parameters if p not in ("self", "cls", "/", "*") and ":" not in p.split("=")[0]]
    if kind in ("function", "method") and "->" not in rest:
        missing.append("the return")
    return missing


def test_every_signature_of_the_reference_is_annotated(site: Path) -> None:
    pages = _pages(site, "reference")
    signatures, bare = 0, {}
    for name, text in pages.items():
        for match in HEADING_AND_SIGNATURE.finditer(text):
            if match["signature"] is None or match["kind"] not in ("class", "function", "method"):
                continue  # an attribute's line is its annotation or its value
            signatures += 1
            missing = _unannotated(match["kind"], match["signature"])
            if missing:
                bare[f"{name}: {match['name']}"] = missing
    print(f"signatures in the reference: {signatures}; without an annotation: {len(bare)}")
    assert signatures > 100, "the reference shows almost no signatures: is separate_signature still on?"
    assert not bare, bare


def test_each_area_has_its_page_and_code_is_highlighted(site: Path) -> None:
    areas = ["running", "messages", "sessions", "errors", "endpoints", "stores", "testing", "events"]
    areas += ["telemetry", "console", "integrations", "django", "crypto"]
    for area in areas:
        assert (site / "reference" / area / "index.html").is_file(), area
    install = (site / "install" / "index.html").read_text()
    assert "pip install agentsessions" in html.unescape(TAG.sub("", install))
    home = (site / "index.html").read_text()
    assert '<div class="highlight"><pre>' in home and '<span class="kn">import</span>' in home  # Pygments colours it
    assert "content.code.copy" in home  # the theme adds a copy button to each block


def test_the_signature_check_sees_what_is_missing() -> None:
    assert _unannotated("function", "f(<span>a</span>, b: dict[str, int] = {}, *args, **kw: int)") == [
        "a",
        "*args",
        "the return",
    ]
    assert _unannotated("method", "g(self, x: int = 1) -&gt; None") == []
    assert _unannotated("class", "C(x: int)") == []
