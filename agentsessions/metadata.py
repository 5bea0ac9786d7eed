"""Session metadata: the small ``str`` to ``str`` mapping an application keeps on a session.

An application tags its sessions (``{"user": "42", "app": "support"}``) with
:meth:`StoreSession.set_metadata <agentsessions.session.StoreSession.set_metadata>`, which
replaces the whole mapping in one step, and lists one tag's sessions with
``store.sessions(metadata={"user": "42"})``: every given pair must be held. Stores index the
pairs, so "this user's conversations, newest first" costs what listing by state costs.

The mapping is small and plain so every store can index it: at most :data:`MAX_KEYS` keys,
each key 1 to :data:`MAX_KEY` characters, each value at most :data:`MAX_VALUE` characters,
no NUL and no lone surrogate (neither survives every database's text and JSON types). It is
kept in clear under :func:`agentsessions.crypto.encrypted`: it is what listing reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

__all__ = [
    "MAX_KEY",
    "MAX_KEYS",
    "MAX_VALUE",
    "check_metadata",
    "dump_metadata",
    "from_pair_texts",
    "load_metadata",
    "metadata_filter",
    "pair_texts",
]

MAX_KEYS = 16
"""The most keys a session's metadata holds."""

MAX_KEY = 64
"""The longest key, in characters."""

MAX_VALUE = 256
"""The longest value, in characters."""


def check_metadata(metadata: object, argument: str = "metadata") -> dict[str, str]:
    """``metadata`` as a new ``dict``, if it is a mapping this library stores; else ``TypeError``/``ValueError``."""
    if not isinstance(metadata, Mapping):
        raise TypeError(f"{argument} must be a mapping of str to str, got {type(metadata).__name__}: {metadata!r:.80}")
    if len(metadata) > MAX_KEYS:
        raise ValueError(f"{argument} holds at most {MAX_KEYS} keys, got {len(metadata)}")
    checked: dict[str, str] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"{argument} maps str to str, got {key!r:.40}: {value!r:.40}")
        if not 0 < len(key) <= MAX_KEY:
            raise ValueError(f"a key of {argument} has 1 to {MAX_KEY} characters, got {len(key)}: {key!r:.80}")
        if len(value) > MAX_VALUE:
            raise ValueError(
                f"a value of {argument} has at most {MAX_VALUE} characters, got {len(value)} for {key!r:.40}"
            )
        _plain(key, argument)
        _plain(value, argument)
        checked[key] = value
    return checked


def metadata_filter(metadata: object) -> dict[str, str] | None:
    """The pairs ``sessions(metadata=...)`` asks for; ``None`` (or an empty mapping): no filter."""
    if metadata is None:
        return None
    pairs = check_metadata(metadata)
    return pairs or None


def dump_metadata(metadata: Mapping[str, str]) -> str:
    """The one JSON text every store that keeps metadata as text writes (keys sorted)."""
    return json.dumps(metadata, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def load_metadata(text: str | bytes | None) -> dict[str, str]:
    """What :func:`dump_metadata` wrote; ``None`` (a record that never had metadata) is empty."""
    if not text:
        return {}
    loaded = json.loads(text)
    return {str(key): str(value) for key, value in loaded.items()}


def pair_texts(metadata: Mapping[str, str]) -> list[str]:
    """Each pair as the JSON text of ``[key, value]``, sorted: one exact value per pair, for stores that index
    pairs as single values (MongoDB's multikey index, Redis's per-pair sets). JSON text holds no raw newline."""
    return sorted(
        json.dumps([name, value], ensure_ascii=False, separators=(",", ":")) for name, value in metadata.items()
    )


def from_pair_texts(texts: Iterable[str | bytes]) -> dict[str, str]:
    """The mapping :func:`pair_texts` made the texts of."""
    return {str(name): str(value) for name, value in map(json.loads, texts)}


def _plain(text: str, argument: str) -> None:
    if "\x00" in text:
        raise ValueError(f"{argument} cannot hold NUL characters: {text!r:.80}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{argument} cannot hold lone surrogates: {text!r:.80}") from error
