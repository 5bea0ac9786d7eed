"""The OpenAI Agents SDK's session protocol over any agentsessions store.

    from agents import Agent, Runner
    from agentsessions.integrations.openai_agents import Session
    from agentsessions.stores import sqlite

    session = Session("conversation-42", sqlite.open("sessions.db"))
    result = await Runner.run(Agent(name="helper"), "Hello", session=session)

Each of the SDK's items is stored as one message of the session, holding one ``RAW`` block
(provider ``"openai-agents"``) with the item's JSON text, so every store keeps it verbatim.
Every change (``add_items``, ``pop_item``) is one fenced step: it claims the session, reads
its items under the claim, saves the changed list and releases the session in one write,
so two processes adding items at once lose none (a plain read-then-save adapter loses
one). ``clear_session`` deletes the session in one step. Reads take no claim.

Needs the SDK: ``pip install agentsessions[openai-agents]``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "agentsessions.integrations.openai_agents needs the OpenAI Agents SDK: pip install agentsessions[openai-agents]"
    ) from error

from agentsessions.integrations._fenced import Edit, T, change, check_wait, item_message, require_run_store
from agentsessions.integrations._fenced import items as stored_items
from agentsessions.messages import Message, Role
from agentsessions.runner import default_replica
from agentsessions.session import check_session_id

__all__ = ["PROVIDER", "Session"]

PROVIDER = "openai-agents"
"""The provider name of the ``RAW`` blocks that hold the SDK's items."""

# Items the model produced (its messages, calls and reasoning) are the assistant's; the
# rest (user input, tool outputs) the user's. The role only shapes how a console shows them.
_ASSISTANT_TYPES = frozenset({"reasoning", "compaction"})


def _role(item: Mapping[str, Any]) -> Role:
    kind = str(item.get("type", ""))
    if item.get("role") == "assistant" or kind.endswith("_call") or kind in _ASSISTANT_TYPES:
        return Role.ASSISTANT
    return Role.USER


class Session:
    """A conversation of the OpenAI Agents SDK kept in an agentsessions store.

    Implements the SDK's ``Session`` protocol (``get_items``, ``add_items``, ``pop_item``,
    ``clear_session``). The SDK calls these from its event loop; the store's calls run on
    a worker thread, so the loop never blocks on the database.

    Args:
        session_id: the session's id in the store (any non-empty ``str`` of up to 255
            characters).
        store: any agentsessions store that keeps runs (every store this library ships;
            an :class:`agentsessions.RunStore`). Shared by many sessions and threads.
        session_settings: the SDK's ``SessionSettings`` (or a dict of its fields);
            ``limit`` is the number of latest items ``get_items()`` returns by default.
        replica: this process's name in the session's record while it changes it
            (default ``"<hostname>:<pid>"``).
        lease: seconds a writer that died in the middle of a change keeps the session
            from the others.
        patience: seconds a change waits for other writers before it raises
            :class:`agentsessions.SessionBusyError`.

    Raises:
        InvalidSessionIdError: ``session_id`` is not a valid id.
        TypeError: ``store`` keeps no run records (it has only the seed's four methods).
        ValueError: ``lease`` or ``patience`` is not a positive number of seconds.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: object,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        replica: str | None = None,
        lease: float = 10.0,
        patience: float = 60.0,
    ) -> None:
        self.session_id = check_session_id(session_id)
        self.store = require_run_store(store, "agentsessions.integrations.openai_agents.Session")
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        self.replica = replica if replica is not None else default_replica()
        self.lease = check_wait("lease", lease)
        self.patience = check_wait("patience", patience)

    def __repr__(self) -> str:
        return f"Session({self.session_id!r}, {type(self.store).__name__})"

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit`` (or the settings' limit) only the latest ones."""
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None and wanted <= 0:
            return []
        messages = await asyncio.to_thread(self.store.messages, self.session_id)
        if wanted is not None:
            messages = messages[-wanted:]
        return stored_items(PROVIDER, self.session_id, messages)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in one fenced step: a concurrent writer's items are never lost."""
        added = [item_message(PROVIDER, item, _role(item)) for item in items]  # a bad item fails before any I/O
        if added:
            await asyncio.to_thread(self._change, lambda messages: (messages + added, None))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the latest item (``None`` when there is none), in one fenced step."""

        def pop(messages: list[Message]) -> tuple[list[Message] | None, Message | None]:
            return (messages[:-1], messages[-1]) if messages else (None, None)

        info = await asyncio.to_thread(self.store.info, self.session_id)
        if info.length == 0:
            return None  # nothing to pop: no claim, no write
        popped = await asyncio.to_thread(self._change, pop)
        return None if popped is None else stored_items(PROVIDER, self.session_id, [popped])[0]

    async def clear_session(self) -> None:
        """Delete the session: its items and its record, in one step."""
        await asyncio.to_thread(self.store.delete, self.session_id)

    def _change(self, edit: Edit[T]) -> T:
        return change(self.store, self.session_id, edit, replica=self.replica, lease=self.lease, patience=self.patience)
