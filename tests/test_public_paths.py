"""Every documented import path imports: a move inside the package must keep the paths users wrote.

The paths come from the README and docs/ (each ``from agentsessions... import ...`` and
``import agentsessions...`` line, and each ``::: agentsessions...`` of the API reference),
and from the list below: what the store authors' guide names, and every store module's
``__all__`` as released.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import warnings
from collections.abc import Iterator, Sequence

from tests.support.paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# Module path -> the names users import from it.
NAMED: dict[str, tuple[str, ...]] = {
    "agentsessions.stores": ("from_url", "memory", "sqlite", "postgres", "mysql", "mongodb", "redis", "urls"),
    "agentsessions.stores.memory": ("MemoryStore",),
    "agentsessions.stores.sqlite": ("PAGE_SIZE", "SCHEMA", "SQLiteStore", "open"),
    "agentsessions.stores.postgres": ("CHECK_TIMEOUT", "PAGE_SIZE", "SCHEMA", "PostgresStore", "check_connection"),
    "agentsessions.stores.mysql": ("SCHEMA", "MySQLStore"),
    "agentsessions.stores.mongodb": ("COUNTERS", "INDEXES", "MESSAGES", "PAGE_SIZE", "SESSIONS", "MongoStore"),
    "agentsessions.stores.redis": ("PAGE_SIZE", "RedisStore"),
    "agentsessions.stores.urls": ("CONNECT_TIMEOUT", "StoreURL", "from_url", "mask_urls", "open_url", "parse_url"),
    "agentsessions.stores.incremental": ("Known", "KnownSessions", "SavePlan", "new_revision", "plan_save"),
    "agentsessions.stores.failures": ("could_not",),
    "agentsessions.stores.kit.incremental": ("Known", "KnownSessions", "SavePlan", "new_revision", "plan_save"),
    "agentsessions.stores.kit.failures": ("Failure", "could_not", "first_line", "plain", "translated"),
    "agentsessions.stores.kit.listing": ("Page", "pages"),
    "agentsessions.stores.kit.values": ("EPOCH", "MICROSECOND", "micros", "moment", "span", "text", "utc"),
    "agentsessions.stores.kit.schema": ("VERSION_TABLE", "Step", "Migrator", "check_version", "plan"),
    "agentsessions.stores.kit.steerkeys": ("conflict", "digest", "fresh"),
    "agentsessions.stores.kit.arguments": ("add_steer", "claim", "renew", "save_run"),
    "agentsessions.testing.storetest": ("properties", "check", "run", "Report"),
    "agentsessions.runs": (
        "derive_state",
        "busy",
        "superseded",
        "state_filter",
        "check_updated_before",
        "check_lease",
        "listed",
        "utcnow",
    ),
    "agentsessions.session": (
        "check_session_id",
        "check_steer",
        "check_steer_key",
        "check_fork_at",
        "keeps_steer_keys",
        "MAX_STEER_KEY",
    ),
    "agentsessions.codec": ("dump_message", "load_message", "encode_text", "decode_text"),
}

_FROM = re.compile(r"^\s*from (agentsessions[\w.]*) import \(?([\w ,]+)\)?\s*$")
_IMPORT = re.compile(r"^\s*import (agentsessions[\w.]*)(?: as \w+)?\s*$")
_REFERENCE = re.compile(r"^::: (agentsessions[\w.]*)\s*$")
# What an optional extra brings; a path needing one that is not installed cannot be checked here.
_EXTRAS = {"psycopg", "psycopg_pool", "pymysql", "pymongo", "redis", "opentelemetry", "waitress", "hypothesis"}


def _documented() -> Iterator[tuple[str, str, str | None]]:
    """(where, module, name) for every import line and API reference in the README and docs/."""
    for page in PAGES:
        where = str(page.relative_to(ROOT))
        for line in page.read_text(encoding="utf-8").splitlines():
            if found := _FROM.match(line):
                for name in found[2].split(","):
                    if name.strip():
                        yield where, found[1], name.strip()
            elif found := _IMPORT.match(line) or _REFERENCE.match(line):
                yield where, found[1], None


def _is_module(path: str) -> bool:
    try:
        return importlib.util.find_spec(path) is not None
    except ModuleNotFoundError:  # a parent is a module, not a package: the path names an attribute
        return False


def _resolve(path: str, name: str | None) -> None:
    """Import ``path`` (its longest importable prefix when it ends in attributes), then take ``name``."""
    parts = path.split(".")
    cut = next(cut for cut in range(len(parts), 0, -1) if _is_module(".".join(parts[:cut])))
    thing: object = importlib.import_module(".".join(parts[:cut]))
    for attribute in parts[cut:]:
        thing = getattr(thing, attribute)
    if name is not None and not hasattr(thing, name):
        importlib.import_module(f"{path}.{name}")  # a submodule not imported yet, or an ImportError


def _broken(paths: Sequence[tuple[str, str, str | None]]) -> list[str]:
    broken = []
    for where, path, name in paths:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                _resolve(path, name)
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] in _EXTRAS:
                continue  # an extra this environment lacks; CI installs every one
            broken.append(f"{where}: {path} {name or ''}: {error!r}")
        except (ImportError, AttributeError) as error:
            broken.append(f"{where}: {path} {name or ''}: {error!r}")
    return broken


def test_every_import_path_the_docs_show_imports() -> None:
    paths = list(_documented())
    assert len(paths) > 20  # the pages were read: a broken pattern must not pass on nothing
    assert not _broken(paths)


def test_every_path_of_the_guide_and_of_the_store_modules_imports() -> None:
    paths = [("NAMED", module, name) for module, names in NAMED.items() for name in names]
    assert not _broken(paths)


def test_a_path_that_does_not_exist_is_reported() -> None:
    # The check itself can fail: a moved module and a dropped name are both caught.
    assert len(_broken([("here", "agentsessions.stores._postgres_watchdog", None)])) == 1
    assert len(_broken([("here", "agentsessions.stores.postgres", "NoSuchName")])) == 1
