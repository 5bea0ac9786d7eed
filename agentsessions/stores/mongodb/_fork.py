"""How :meth:`agentsessions.stores.mongodb.MongoStore.fork` copies messages; private to it.

The server copies them: one aggregation per run of the source's segments, ``$match`` on
the run, ``$set`` of the new session id and epoch, ``$merge`` back into the messages
collection (``$merge`` into the collection it reads needs MongoDB 4.4). No message body
passes through this process but those the new session's preview is taken from: the copies
are read back from the last until one has text. The copies go under a fresh epoch of the
new session, where no reader looks until the new session document names it; that insert is
the commit, and the caller's.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from contextlib import suppress
from typing import Any

import attrs
from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from agentsessions.codec import load_message
from agentsessions.errors import ConflictError
from agentsessions.session import check_fork_at
from agentsessions.stores.kit.incremental import new_revision
from agentsessions.stores.mongodb._layout import STATE_FIELDS, State, in_run, parse_state, preview_of, sort_key

Documents = Collection[dict[str, Any]]
_PIECE_FIELDS = {"_id": 0, "position": 1, "chunk": 1, "body": 1}
_WINDOW = 8  # positions read back per query for the preview: mostly the last message has text


def copy_pipeline(collection: str, source: object, run: tuple[int, int, int], target: object, epoch: int) -> list[Any]:
    """The aggregation that copies one run of ``source``'s messages, every chunk, to ``target`` under ``epoch``.

    Each copy gets a fresh ``_id``, so ``$merge`` only inserts. The copies have another
    session id, so the ``$match`` never reads what the same ``$merge`` wrote.
    """
    return [
        {"$match": in_run(source, *run)},
        {"$set": {"session_id": {"$literal": target}, "epoch": {"$literal": epoch}}},
        {"$project": {"_id": 0}},
        {"$merge": {"into": collection, "whenMatched": "fail", "whenNotMatched": "insert"}},
    ]


def forked(key: object, session_id: str, length: int, epoch: int, now: int, preview: object) -> dict[str, Any]:
    """The session document a fork commits: ``length`` messages, all under ``epoch``; idle, no steers, no usage."""
    state = State(new_revision(), length, ((epoch, 0),))
    return {"_id": key, "sort": sort_key(session_id), **state.document(now), "preview": preview}


def taken(new_id: str) -> ConflictError:
    """The error of a fork into an id that has a session document."""
    return ConflictError(f"cannot fork into session {new_id!r:.80}: it exists")


@attrs.frozen
class PrefixCopy:
    """The copies that a fork of ``source`` into ``target`` has the server make."""

    sessions: Documents
    messages: Documents
    source: object
    target: object

    def make(self, state: State | None, at: int | None, tries: Iterable[object]) -> tuple[int, int] | None:
        """Copy the source's first ``at`` messages (all when ``None``) under a fresh epoch: (epoch, how many).

        ``state`` is the source's transcript as just read. After copying, it reads the
        source's session document again, as a reader does (a stale writer may re-insert a
        deleted key, so a complete copy proves nothing by itself). If a save deleted some
        of what it copied meanwhile, the copies still right stay, and the rest are deleted
        and copied again from the transcript now stored, so that a run's saves, which
        mostly change only the end, do not starve a fork. ``None``, with every copy
        removed, when saves kept changing it through all ``tries``.
        """
        epoch, kept, written = new_revision(), 0, 0  # copies below `kept` are right; none from `written` on
        try:
            for _ in tries:
                length = check_fork_at(at, state.length if state else 0)
                if written > kept:
                    self.messages.delete_many({"session_id": self.target, "epoch": epoch, "position": {"$gte": kept}})
                if state is None or not length:
                    return epoch, 0
                wanted = state.prefix(length)
                for run, start, end in wanted.runs():
                    if end > max(start, kept):
                        self._copy((run, max(start, kept), end), epoch)
                written = length
                state = parse_state(self.sessions.find_one({"_id": self.source}, STATE_FIELDS))
                if state is not None and state.covers(wanted):
                    return epoch, length
                kept = state.agrees(wanted) if state is not None else 0
        except BaseException:
            self.drop(epoch)
            raise
        self.drop(epoch)
        return None

    def preview(self, epoch: int, length: int) -> object:
        """The preview of the ``length`` copies under ``epoch`` (:func:`~._layout.preview_of`), read from the last back.

        A window of positions at a time, each one indexed range query (a sort of the whole
        epoch backwards is a scan and a sort on some servers). Only this fork writes under its
        fresh epoch, so what is read is what it copied.
        """
        for end in range(length, 0, -_WINDOW):
            docs = list(self.messages.find(in_run(self.target, epoch, max(end - _WINDOW, 0), end), _PIECE_FIELDS))
            docs.sort(key=lambda doc: (doc["position"], doc.get("chunk", 0)))
            for _, pieces in itertools.groupby(reversed(docs), key=lambda doc: doc["position"]):
                parts = [piece["body"] for piece in reversed(list(pieces))]  # first piece first
                message = load_message(parts[0] if len(parts) == 1 else b"".join(bytes(part) for part in parts))
                if message.text:
                    return preview_of([message])
        return preview_of([])

    def _copy(self, run: tuple[int, int, int], epoch: int) -> None:
        self.messages.aggregate(copy_pipeline(self.messages.name, self.source, run, self.target, epoch))

    def drop(self, epoch: int) -> None:
        """Remove the copies under ``epoch``, which no session document names, as far as the server lets it."""
        # Tidying only: a failure here leaves them behind rather than hide why the fork stopped.
        with suppress(PyMongoError):
            self.messages.delete_many({"session_id": self.target, "epoch": epoch})
