"""One change to a session's transcript under a claim: what keeps two SDK processes from losing each other's items.

A session adapter that reads the items, adds its own and saves the list loses an item
when two processes do it at once: both read the same list, and the second save drops the
first one's item. Here every change claims the session first (a fencing token the store
checks on the save), reads the transcript under that claim, saves the changed one and
releases it in the same write. A second writer meanwhile gets ``SessionBusyError`` and
tries again; a writer whose claim was taken over (its lease lapsed while it hung) gets
``ConflictError`` from its save, having written nothing, and starts over.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from agentsessions.errors import ConflictError, FormatError, SessionBusyError, StoreError
from agentsessions.messages import Content, ContentType, Message, Role
from agentsessions.runs import Claim, RunState
from agentsessions.session import RunStore

T = TypeVar("T")

Edit = Callable[[list[Message]], tuple[list[Message] | None, T]]
"""Given the transcript read under the claim: the transcript to save (``None``: unchanged) and the answer."""


def require_run_store(store: object, who: str) -> RunStore:
    """``store`` if it keeps run records (claims and fencing), else a ``TypeError`` naming ``who``."""
    if not isinstance(store, RunStore):
        raise TypeError(
            f"{who} needs a store that keeps runs (claims and fencing tokens: agentsessions.RunStore), "
            f"got {type(store).__name__}"
        )
    return store


def check_wait(name: str, value: object) -> float:
    """A positive number of seconds, or a ``ValueError`` naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 10**6:
        raise ValueError(f"{name} is a number of seconds above 0, got {value!r:.80}")
    return float(value)


def change(store: RunStore, session_id: str, edit: Edit[T], *, replica: str, lease: float, patience: float) -> T:
    """Apply ``edit`` to the session's transcript as one fenced step, and return its answer.

    Waits (with jittered backoff) while another writer holds the session, at most
    ``patience`` seconds; then raises the ``SessionBusyError``. ``lease`` bounds how long a
    writer that died mid-change keeps the session from the others.
    """
    deadline = time.monotonic() + patience
    pause = 0.002
    while True:
        try:
            claim = store.claim(session_id, replica=replica, lease=lease)
        except SessionBusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(pause * random.uniform(0.5, 1.5))  # jitter: writers that collided do not collide again
            pause = min(pause * 2, 0.025)  # about how long one change holds the session
            continue
        messages = store.messages(session_id)
        try:
            changed, answer = edit(messages)
        except BaseException:
            _release(store, claim, messages)
            raise
        try:
            store.save_run(claim, messages if changed is None else changed, end=RunState.FINISHED)
        except ConflictError:
            # Taken over (our lease lapsed) or deleted meanwhile: nothing was written; start over.
            if time.monotonic() >= deadline:
                raise
            continue
        return answer


def _release(store: RunStore, claim: Claim, messages: list[Message]) -> None:
    """Give the session back unchanged after a failed edit, so nobody waits for the lease."""
    # If this fails too, the lease lapses on its own; the edit's own error is the one to see.
    with contextlib.suppress(StoreError):
        store.save_run(claim, messages, end=RunState.FINISHED)


def item_message(provider: str, item: Mapping[str, Any], role: Role) -> Message:
    """One SDK item as a message of one ``RAW`` block: its JSON text, kept verbatim by every store."""
    if not isinstance(item, Mapping):
        raise TypeError(f"an item is a JSON object (a dict), got {type(item).__name__}: {item!r:.80}")
    return Message(role, [Content.raw(provider, json.dumps(item, ensure_ascii=False, separators=(",", ":")))])


def message_item(provider: str, session_id: str, index: int, message: Message) -> Any:
    """The item that :func:`item_message` stored, or a :class:`FormatError` for a message it did not write."""
    blocks = message.content
    if len(blocks) != 1 or blocks[0].type is not ContentType.RAW or blocks[0].name != provider:
        raise FormatError(
            f"session {session_id!r:.80} holds a message that is not a {provider} item (message {index}): "
            "keep the SDK's sessions apart from the sessions agentsessions runs write"
        )
    return json.loads(blocks[0].data)


def items(provider: str, session_id: str, messages: Sequence[Message]) -> list[Any]:
    """Every stored item, oldest first."""
    return [message_item(provider, session_id, index, message) for index, message in enumerate(messages)]
