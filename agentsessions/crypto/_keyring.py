"""The keys: AES-256-GCM keys by id, one of them current, read from the caller, a file or the environment."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
"""An AES-256 key is 32 bytes."""

ENVIRONMENT = "AGENTSESSIONS_KEYS"
"""The environment variable :meth:`Keyring.from_env` reads by default."""

# Ids are written into every ciphertext and parsed back from it: kept to characters no
# envelope uses as a separator, and short.
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")

Unwrap = Callable[[str, bytes], bytes]
"""``unwrap(key_id, stored) -> key``: turns a key as the file keeps it into the key (a KMS decrypt call)."""


def check_key_id(key_id: object) -> str:
    """``key_id`` if it is 1 to 64 of ``A-Z a-z 0-9 . _ -``, else ``ValueError`` (``TypeError`` for a non-str)."""
    if not isinstance(key_id, str):
        raise TypeError(f"a key id is a str, got {type(key_id).__name__}: {key_id!r:.80}")
    if not _KEY_ID.fullmatch(key_id):
        raise ValueError(f"a key id is 1 to 64 of A-Z a-z 0-9 . _ -, got {key_id!r:.80}")
    return key_id


def _check_key(key_id: str, key: object) -> bytes:
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"key {key_id!r} must be bytes, got {type(key).__name__}")
    if len(key) != KEY_BYTES:
        raise ValueError(f"key {key_id!r} must be {KEY_BYTES} bytes (AES-256), got {len(key)}")
    return bytes(key)


class Keyring:
    """AES-256-GCM keys by id: ``current`` encrypts everything written, every key decrypts.

    ``keys`` maps each id (1 to 64 of ``A-Z a-z 0-9 . _ -``) to its 32 bytes. Each
    ciphertext carries the id of the key that made it, so rotating is giving a new key
    and making it ``current``; the old ones stay in ``keys`` until ``agentsessions rekey``
    has moved every session off them. A keyring is immutable, and its ``repr`` shows ids,
    never keys.

        keyring = Keyring({"2025-06": Keyring.new_key()}, current="2025-06")
    """

    __slots__ = ("_aeads", "_current", "_keys")

    def __init__(self, keys: Mapping[str, bytes], current: str) -> None:
        if not isinstance(keys, Mapping):
            raise TypeError(f"keys is a mapping from key id to 32 bytes, got {type(keys).__name__}")
        checked = {check_key_id(key_id): _check_key(key_id, key) for key_id, key in keys.items()}
        if check_key_id(current) not in checked:
            held = ", ".join(map(repr, checked)) or "none"
            raise ValueError(f"the current key {current!r} is not among the keys (it holds {held})")
        self._keys = checked
        self._aeads = {key_id: AESGCM(key) for key_id, key in checked.items()}
        self._current = current

    @property
    def current(self) -> str:
        """The id of the key that encrypts."""
        return self._current

    @property
    def ids(self) -> tuple[str, ...]:
        """The ids of every key held, in the order given."""
        return tuple(self._aeads)

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._aeads

    def __iter__(self) -> Iterator[str]:
        return iter(self._aeads)

    def __repr__(self) -> str:
        return f"Keyring(ids={list(self._aeads)!r}, current={self._current!r})"

    def _derived(self, key_id: str, label: bytes) -> bytes | None:
        """A 32-byte secret for another use than AES-GCM, derived from key ``key_id`` (HMAC-SHA256 over ``label``)."""
        key = self._keys.get(key_id)
        return None if key is None else hmac.new(key, label, hashlib.sha256).digest()

    def aead(self, key_id: str) -> AESGCM | None:
        """The cipher of ``key_id``, or ``None`` when the keyring does not hold it."""
        return self._aeads.get(key_id)

    @staticmethod
    def new_key() -> bytes:
        """32 random bytes from the operating system: a new key."""
        return os.urandom(KEY_BYTES)

    @classmethod
    def from_json(cls, text: str | bytes, *, unwrap: Unwrap | None = None) -> Keyring:
        """A keyring from ``{"current": ID, "keys": {ID: BASE64, ...}}``.

        ``unwrap(key_id, stored)``, when given, turns each stored value (base64-decoded)
        into the key: a KMS's decrypt call, so that the text holds only wrapped keys.
        """
        try:
            obj = json.loads(text)
        except ValueError as error:
            raise ValueError(f"a keyring is JSON: {{'current': ID, 'keys': {{ID: BASE64}}}}; {error}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("keys"), dict) or "current" not in obj:
            raise ValueError('a keyring is a JSON object {"current": ID, "keys": {ID: BASE64, ...}}')
        keys = {}
        for key_id, stored in obj["keys"].items():
            try:
                raw = base64.b64decode(stored, validate=True)
            except (TypeError, binascii.Error):
                raise ValueError(f"key {key_id!r} is not base64 text") from None
            keys[key_id] = unwrap(key_id, raw) if unwrap is not None else raw
        return cls(keys, obj["current"])

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, unwrap: Unwrap | None = None) -> Keyring:
        """A keyring from a file holding :meth:`to_json`'s form (see :meth:`from_json` for ``unwrap``)."""
        return cls.from_json(Path(path).read_bytes(), unwrap=unwrap)

    @classmethod
    def from_env(cls, name: str = ENVIRONMENT, *, unwrap: Unwrap | None = None) -> Keyring:
        """A keyring from the environment variable ``name``, holding :meth:`to_json`'s form."""
        text = os.environ.get(name)
        if not text:
            raise ValueError(f"the environment variable {name} holding the keyring is not set")
        return cls.from_json(text, unwrap=unwrap)

    def with_key(self, key_id: str, key: bytes | None = None) -> Keyring:
        """This keyring with ``key`` (a new random one when ``None``) added as ``key_id``; ``current`` unchanged.

        The first step of a rotation: every replica learns to read the new key before any writes with it.
        """
        if check_key_id(key_id) in self._keys:
            raise ValueError(f"the keyring already holds a key {key_id!r}: a new key needs a new id")
        return Keyring({**self._keys, key_id: self.new_key() if key is None else key}, self._current)

    def using(self, key_id: str) -> Keyring:
        """This keyring with ``key_id`` (one it holds) as the current key."""
        return Keyring(self._keys, key_id)

    def rotated(self, key_id: str, key: bytes | None = None) -> Keyring:
        """This keyring with ``key`` added as ``key_id`` and made current: ``with_key`` then ``using``."""
        return self.with_key(key_id, key).using(key_id)

    def without(self, key_id: str) -> Keyring:
        """This keyring without ``key_id`` (retired once ``agentsessions rekey`` moved every session off it)."""
        if key_id == self._current:
            raise ValueError(f"{key_id!r} is the current key: rotate to another before retiring it")
        if key_id not in self._keys:
            raise ValueError(f"the keyring holds no key {key_id!r}")
        return Keyring({i: k for i, k in self._keys.items() if i != key_id}, self._current)

    def to_json(self) -> str:
        """The keyring as :meth:`from_json` reads it. It holds the keys themselves: keep it secret."""
        keys = {key_id: base64.b64encode(key).decode("ascii") for key_id, key in self._keys.items()}
        return json.dumps({"current": self._current, "keys": keys}, indent=2)
