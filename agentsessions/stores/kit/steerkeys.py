"""Steer keys: what a store keeps so that a retried steer is stored once.

A steer added with a ``key`` leaves, beside the steer, the pair (key, digest of its text)
for the session, kept while the session lives: taking the steer leaves it, ``delete``
removes it, a fork does not copy it. Adding a steer under a key the session holds stores
nothing: with the same text it is a retry and returns the state as any steer would; with
another text it raises :func:`conflict`'s error. The check and the adding are one atomic
step in every store (two processes retrying one key at once store one steer)::

    session_id, text, key = arguments.add_steer(session_id, text, key)
    ...  # in the step that adds the steer:
    if key is None or fresh(<the digest kept for (session_id, key), or None>, text, session_id, key):
        <keep (session_id, key, digest(text)) when keyed> and <add the steer>
"""

from __future__ import annotations

import hashlib

from agentsessions.codec import encode_text
from agentsessions.errors import ConflictError

__all__ = ["conflict", "digest", "fresh"]


def digest(text: str) -> bytes:
    """SHA-256 of the steer's text as the stores encode it (UTF-8, surrogates passed through): 32 bytes."""
    return hashlib.sha256(encode_text(text)).digest()


def conflict(session_id: str, key: str) -> ConflictError:
    """The error for a key the session holds for another text: one wording for every store."""
    return ConflictError(
        f"session {session_id!r:.80} already has a steer with key {key!r:.80} and another text: "
        "a retry sends the same text; a new message needs a new key"
    )


def fresh(kept: bytes | None, text: str, session_id: str, key: str) -> bool:
    """Whether ``key`` is new to the session, given the digest ``kept`` for it (``None``: none).

    ``True``: keep the key and add the steer. ``False``: a retry of the same text, store
    nothing. Another text raises :func:`conflict`'s error.
    """
    if kept is None:
        return True
    if bytes(kept) != digest(text):
        raise conflict(session_id, key)
    return False
