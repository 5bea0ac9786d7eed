"""The Claude Agent SDK's tests that never construct the store, or test InMemorySessionStore's own extras, are left out.

README.md lists them and why.
"""

from __future__ import annotations

from tests.support.servers import skip_without

skip_without("claude_agent_sdk", extra="claude")  # the folder, outside CI: the vendored tests import the SDK

from pathlib import Path

import pytest

from tests.support.sdk_suites import deselect

FOLDER = Path(__file__).parent

NOT_THE_STORE = {
    # test_session_store_conformance.py
    "test_skip_optional_suppresses_contracts": "the SDK's harness on a store the test defines",
    "test_auto_skips_unimplemented_optionals": "the SDK's harness on a store the test defines",
    "test_get_entries_helper": "InMemorySessionStore.get_entries, a test helper outside the protocol",
    "test_size_helper_counts_main_transcripts_only": "InMemorySessionStore.size, a test helper outside the protocol",
    "test_clear_helper": "InMemorySessionStore.clear, a test helper outside the protocol",
    "test_no_store_is_always_valid": "options validation; no store",
    "test_continue_conversation_requires_list_sessions": "options validation on a store the test defines",
    "test_continue_with_resume_and_store_lacking_list_sessions": "options validation on a store the test defines",
    # test_session_helpers_store.py
    "test_load_concurrency_is_bounded": (
        "a timing assumption: list_sessions must answer within five zero-length sleeps of the event loop; "
        "ours answers from a worker thread (the SDK's semaphore is what the test is about)"
    ),
    # test_session_store_conformance.py
    "test_defaults_to_cwd": "project_key_for_directory; no store",
    "test_sanitizes_path": "project_key_for_directory; no store",
    "test_stable_for_same_path": "project_key_for_directory; no store",
    "test_relative_dir_resolved_to_absolute_before_hashing": "project_key_for_directory; no store",
    "test_nfc_normalizes_decomposed_unicode": "project_key_for_directory; no store",
    "test_long_path_uses_portable_djb2_suffix": "project_key_for_directory; no store",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect(items, config, FOLDER, NOT_THE_STORE)
