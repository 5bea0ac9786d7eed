"""The OpenAI Agents SDK's session tests that are about SQLiteSession itself, not the Session protocol, are left out.

Each left-out test reaches into ``SQLiteSession``'s own machinery (its connections, file
locks, SQL tables, a sqlite3 probe) or tests no session at all; README.md lists them.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("agents", extra="openai-agents")  # the folder, outside CI: the vendored tests import the SDK

from pathlib import Path

import pytest

from tests.support.sdk_suites import deselect

FOLDER = Path(__file__).parent

NOT_THE_PROTOCOL = {
    "test_await_mutation_cancellation_hides_later_failure_without_loop_error": "an SDK helper; no session",
    "test_session_memory_disabled_parametrized": "runs without a session",
    "test_session_settings_resolve": "SessionSettings alone; no session",
    "test_sqlite_session_close_closes_worker_thread_connections": "SQLiteSession's per-thread connections",
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": "SQLiteSession's per-thread connections",
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": "SQLiteSession's connections",
    "test_sqlite_session_keeps_connections_of_live_worker_threads": "SQLiteSession's per-thread connections",
    "test_sqlite_session_closed_rejects_empty_add_items": "SQLiteSession.close()",
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": "writes a corrupt row through SQLiteSession's connection",
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": "writes a corrupt row (as above)",
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": "writes a corrupt row (as above)",
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": "writes a corrupt row (as above)",
    "test_sqlite_session_file_lock_is_shared_across_instances": "SQLiteSession's process-local file locks",
    "test_sqlite_session_failed_add_items_releases_write_lock": "probes SQLiteSession's file with sqlite3",
    "test_sqlite_session_failed_clear_session_rolls_back": "drops SQLiteSession's table with sqlite3",
    "test_sqlite_session_failed_pop_item_releases_write_lock": "drops SQLiteSession's table with sqlite3",
    "test_sqlite_session_rollback_failure_evicts_connection": "SQLiteSession's connection pool",
    "test_sqlite_session_close_retries_quarantined_connection": "SQLiteSession's connection pool",
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": "SQLiteSession's commit",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect(items, config, FOLDER, NOT_THE_PROTOCOL)
