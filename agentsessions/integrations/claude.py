"""The Claude Agent SDK's session-store protocol over any agentsessions store.

    from claude_agent_sdk import ClaudeAgentOptions, query
    from agentsessions.integrations.claude import SessionStore
    from agentsessions.stores import sqlite

    options = ClaudeAgentOptions(session_store=SessionStore(sqlite.open("sessions.db")))

The SDK mirrors each transcript to the store as batches of JSON entries (``append``) and
reads them back to resume (``load``). Each transcript (a main session, or a subagent's under
its ``subpath``) is one session of the agentsessions store, each entry one message holding
one ``RAW`` block (provider ``"claude-agent-sdk"``) with the entry's JSON text. Every append
is one fenced step (claim, read, save and release in one write), so two processes appending
to one session at once lose nothing, and an entry whose ``uuid`` is already stored is not
stored twice (the SDK retries a batch whose answer it lost).

Session ids in the store, under a prefix (``"claude:"`` by default): ``claude:PROJECT:SESSION``
for a main transcript, ``claude:PROJECT:SESSION:SUBPATH`` for a subagent's (each part
percent-encoded; a project key longer than 80 characters encoded is replaced by its
SHA-256), and ``claude:!summary:PROJECT:SESSION`` for the summary the SDK folds into each
append, written after the transcript so its time is never older than the transcript's.

``list_sessions``, ``list_session_summaries`` and ``list_subkeys`` walk the store's listing
of every session and keep those of the project: their cost grows with the whole store.

Needs the SDK: ``pip install agentsessions[claude]``.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

try:
    import anyio.to_thread
    from claude_agent_sdk import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
        fold_session_summary,
    )
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agentsessions.integrations.claude needs the Claude Agent SDK: pip install agentsessions[claude]"
    ) from error

from agentsessions.integrations._fenced import change, check_wait, item_message, items, require_run_store
from agentsessions.messages import Message, Role
from agentsessions.runner import default_replica
from agentsessions.session import MAX_SESSION_ID

__all__ = ["PROVIDER", "SessionStore"]

PROVIDER = "claude-agent-sdk"
"""The provider name of the ``RAW`` blocks that hold the SDK's entries."""

_SUMMARIES = "!summary:"  # quote() escapes "!", so no encoded project key starts with it
_LONGEST_PROJECT = 80


def _project(project_key: str) -> str:
    encoded = quote(project_key, safe="")
    if len(encoded) <= _LONGEST_PROJECT:
        return encoded
    return "~" + hashlib.sha256(project_key.encode()).hexdigest()


def _store_id(prefix: str, key: SessionKey | SessionListSubkeysKey, subpath: str | None = None) -> str:
    parts = [_project(key["project_key"]), quote(key["session_id"], safe="")]
    if subpath:
        parts.append(quote(subpath, safe=""))
    session_id = prefix + ":".join(parts)
    if len(session_id) > MAX_SESSION_ID:
        raise ValueError(
            f"the Claude session key {dict(key)!r:.200} makes a store id of {len(session_id)} characters "
            f"(at most {MAX_SESSION_ID}): use a shorter session id or subpath"
        )
    return session_id


def _milliseconds(moment: datetime.datetime) -> int:
    return int(moment.timestamp() * 1000)


class SessionStore:
    """The Claude Agent SDK's ``SessionStore`` over an agentsessions store.

    Implements ``append`` and ``load`` and the four optional methods: ``list_sessions``,
    ``list_session_summaries``, ``delete`` (a main transcript's delete takes its subagents'
    transcripts and its summary with it) and ``list_subkeys``. The store's calls run on a
    worker thread (``anyio.to_thread``: under asyncio or trio, as the SDK runs), so the
    event loop never blocks on the database.

    Args:
        store: any agentsessions store that keeps runs (every store this library ships;
            an :class:`agentsessions.RunStore`).
        prefix: the start of every session id this adapter writes, so several
            deployments (or other sessions) share one store without meeting.
        replica: this process's name in a session's record while it appends (default
            ``"<hostname>:<pid>"``).
        lease: seconds a writer that died in the middle of an append keeps the session
            from the others.
        patience: seconds an append waits for other writers before it raises
            :class:`agentsessions.SessionBusyError`.

    Raises:
        TypeError: ``store`` keeps no run records (it has only the seed's four methods).
        ValueError: ``prefix`` is empty, or ``lease`` or ``patience`` is not a positive
            number of seconds.
    """

    def __init__(
        self,
        store: object,
        *,
        prefix: str = "claude:",
        replica: str | None = None,
        lease: float = 10.0,
        patience: float = 60.0,
    ) -> None:
        self.store = require_run_store(store, "agentsessions.integrations.claude.SessionStore")
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"prefix is a non-empty str, got {prefix!r:.80}")
        self.prefix = prefix
        self.replica = replica if replica is not None else default_replica()
        self.lease = check_wait("lease", lease)
        self.patience = check_wait("patience", patience)

    def __repr__(self) -> str:
        return f"SessionStore({type(self.store).__name__}, prefix={self.prefix!r})"

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Add a batch of entries to the transcript ``key`` names, in one fenced step; fold the summary."""
        if entries:
            await anyio.to_thread.run_sync(self._append, key, list(entries))

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """The transcript's entries in the order they were appended; ``None`` when it has none."""
        session_id = _store_id(self.prefix, key, key.get("subpath"))
        messages = await anyio.to_thread.run_sync(self.store.messages, session_id)
        return items(PROVIDER, session_id, messages) or None

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The project's main transcripts, with their last change in Unix epoch milliseconds."""
        return await anyio.to_thread.run_sync(self._list_sessions, project_key)

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The summaries the SDK folded into each append of the project's main transcripts."""
        return await anyio.to_thread.run_sync(self._list_summaries, project_key)

    async def delete(self, key: SessionKey) -> None:
        """Delete one transcript; a main one takes its subagents' transcripts and its summary along."""
        await anyio.to_thread.run_sync(self._delete, key)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths stored under a session (its subagents' transcripts)."""
        prefix = _store_id(self.prefix, key) + ":"
        return await anyio.to_thread.run_sync(functools.partial(self._subkeys, prefix))

    # --- The blocking side, on a worker thread ------------------------------------------------

    def _append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        subpath = key.get("subpath")
        session_id = _store_id(self.prefix, key, subpath)
        role = {True: Role.ASSISTANT, False: Role.USER}
        batch = [item_message(PROVIDER, entry, role[entry.get("type") == "assistant"]) for entry in entries]

        def add(messages: list[Message]) -> tuple[list[Message], list[SessionStoreEntry]]:
            # A uuid names an entry: one already stored (a retried batch that had landed) is skipped.
            seen = {entry.get("uuid") for entry in items(PROVIDER, session_id, messages)} - {None}
            added: list[Message] = []
            kept: list[SessionStoreEntry] = []
            for entry, message in zip(entries, batch, strict=True):
                uuid = entry.get("uuid")
                if uuid is not None and uuid in seen:
                    continue
                seen.add(uuid)
                added.append(message)
                kept.append(entry)
            return messages + added, kept

        kept = self._change(session_id, add)
        if subpath is None and kept:
            self._change(_store_id(self.prefix + _SUMMARIES, key), lambda stored: self._fold(key, stored, kept))

    def _fold(
        self, key: SessionKey, stored: list[Message], entries: list[SessionStoreEntry]
    ) -> tuple[list[Message], None]:
        previous: SessionSummaryEntry | None = items(PROVIDER, key["session_id"], stored)[-1] if stored else None
        folded = fold_session_summary(previous, key, entries)
        return [item_message(PROVIDER, folded, Role.USER)], None

    def _change(self, session_id: str, edit: Any) -> Any:
        return change(self.store, session_id, edit, replica=self.replica, lease=self.lease, patience=self.patience)

    def _under(self, prefix: str) -> Iterator[tuple[str, datetime.datetime | None]]:
        """``(rest of the id, updated_at)`` of every session whose id starts with ``prefix``."""
        for info in self.store.sessions():
            if info.id.startswith(prefix):
                yield info.id[len(prefix) :], info.updated_at

    def _subkeys(self, prefix: str) -> list[str]:
        return [unquote(rest) for rest, _ in self._under(prefix)]

    def _list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        prefix = self.prefix + _project(project_key) + ":"
        return [
            {"session_id": unquote(rest), "mtime": _milliseconds(updated)}
            for rest, updated in self._under(prefix)
            if ":" not in rest and updated is not None  # a subagent's transcript has a third part
        ]

    def _list_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        prefix = self.prefix + _SUMMARIES + _project(project_key) + ":"
        summaries: list[SessionSummaryEntry] = []
        for rest, updated in list(self._under(prefix)):
            stored = items(PROVIDER, prefix + rest, self.store.messages(prefix + rest))
            if stored and updated is not None:
                summary: SessionSummaryEntry = stored[-1]
                summaries.append({**summary, "session_id": unquote(rest), "mtime": _milliseconds(updated)})
        return summaries

    def _delete(self, key: SessionKey) -> None:
        subpath = key.get("subpath")
        if subpath:
            self.store.delete(_store_id(self.prefix, key, subpath))
            return
        main = _store_id(self.prefix, key)
        for rest, _ in list(self._under(main + ":")):
            self.store.delete(main + ":" + rest)
        self.store.delete(main)
        self.store.delete(_store_id(self.prefix + _SUMMARIES, key))
