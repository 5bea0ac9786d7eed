"""What a store keeps instead of the text: envelopes, each bound to its session and its place.

A message is stored as a message of the same role holding one ``RAW`` block of provider
``agentsessions.crypto``, whose data is ``{"v":1,"key":ID,"sealed":BASE64}``: the key's id
in clear, then AES-256-GCM's nonce, ciphertext and tag over the message in the form
:func:`~agentsessions.codec.dump_message` writes. A raw block of a provider no endpoint
speaks, so a transcript read without the keyring is never sent to a model by mistake.

A steer is stored as the text ``agentsessions.crypto/1:ID:BASE64`` over a random 16-byte
steer id followed by the steer's text (the id tells a copy that ``rekey`` made apart from
a steer sent twice). A keyed steer (``add_steer(..., key=K)``) is sealed deterministically
instead: its steer id and nonce are HMACs, under a secret derived from the key, of its
session, its key and (for the nonce) its text. So a retry of the same text under the same
key is the very same ciphertext, and the wrapped store, which compares digests of what it
stores, finds it a retry; another text under that key is another ciphertext, and a
conflict. Nothing more is revealed than that the two calls were one retry, which the key
already says; two texts never share a nonce.

The associated data of every ciphertext names its kind, its session id and, for a
message, its position and role: a row copied into another session, another place or
another role does not decrypt, and raises :class:`~agentsessions.errors.DecryptionError`
naming the session and the key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os

from cryptography.exceptions import InvalidTag

from agentsessions.codec import decode_text, dump_message, encode_text, load_message
from agentsessions.crypto._keyring import Keyring
from agentsessions.errors import DecryptionError, FormatError
from agentsessions.messages import Content, ContentType, Message

PROVIDER = "agentsessions.crypto"
"""The provider name of the raw block an encrypted message is stored as."""

STEER_PREFIX = "agentsessions.crypto/1:"
"""How an encrypted steer's stored text begins."""

_VERSION = 1
_NONCE = 12
_STEER_ID = 16
_DOMAIN = b"agentsessions.crypto/1\x00"


def _aad(kind: bytes, session_id: str, position: int = 0, role: str = "") -> bytes:
    # Lengths before variable parts, so no two (session, position, role) can spell the same bytes.
    sid = encode_text(session_id)
    return b"".join((_DOMAIN, kind, len(sid).to_bytes(2, "big"), sid, position.to_bytes(8, "big"), role.encode()))


class Sealer:
    """Encrypts and decrypts messages and steers with a keyring, for one store wrapper or ``rekey``."""

    def __init__(self, keyring: Keyring, *, allow_plaintext: bool = False) -> None:
        if not isinstance(keyring, Keyring):
            raise TypeError(f"keyring must be an agentsessions.crypto.Keyring, got {type(keyring).__name__}")
        self.keyring = keyring
        self.allow_plaintext = bool(allow_plaintext)

    # --- Messages ----------------------------------------------------------------------------

    def seal_message(self, session_id: str, position: int, message: Message) -> Message:
        """``message`` as the store keeps it: one raw block holding it encrypted with the current key."""
        aad = _aad(b"message", session_id, position, message.role.value)
        sealed = self._seal(aad, dump_message(message).encode())
        data = f'{{"v":{_VERSION},"key":"{self.keyring.current}","sealed":"{sealed}"}}'
        return Message(message.role, (Content(ContentType.RAW, name=PROVIDER, data=data),))

    def open_message(self, session_id: str, position: int, stored: Message) -> Message:
        """The message ``stored`` holds, checked to belong at ``position`` of ``session_id``."""
        envelope = _envelope(stored)
        if envelope is None:
            self._refuse_plaintext(session_id, f"message {position}")
            return stored
        key_id, sealed = _parse_envelope(envelope, session_id, position)
        aad = _aad(b"message", session_id, position, stored.role.value)
        plain = self._open(key_id, aad, sealed, session_id, f"message {position}")
        try:
            return load_message(plain)
        except FormatError as error:  # authentic, yet unreadable: written by a newer version
            raise DecryptionError(
                f"session {session_id!r:.80} message {position} decrypts with key {key_id!r} but is not "
                f"a message this version reads: {error}",
                session_id=session_id,
                key_id=key_id,
            ) from error

    @staticmethod
    def message_key(stored: Message) -> str | None:
        """The id of the key ``stored`` was encrypted with, without decrypting it; ``None`` for plaintext."""
        envelope = _envelope(stored)
        if envelope is None:
            return None
        try:
            key = json.loads(envelope).get("key")
        except (ValueError, AttributeError):
            return ""
        return key if isinstance(key, str) else ""

    # --- Steers ------------------------------------------------------------------------------

    def seal_steer(self, session_id: str, text: str, steer_id: bytes | None = None) -> str:
        """``text`` as the store keeps it; ``steer_id`` (16 bytes) keeps a copy recognisable, else a new one."""
        steer_id = os.urandom(_STEER_ID) if steer_id is None else steer_id
        sealed = self._seal(_aad(b"steer", session_id), steer_id + encode_text(text))
        return f"{STEER_PREFIX}{self.keyring.current}:{sealed}"

    def seal_keyed_steer(self, session_id: str, key: str, text: str, key_id: str | None = None) -> str:
        """``text`` sealed for steer key ``key``: the same ciphertext each time for the same key id and text.

        ``key_id`` names the keyring's key to use (default: the current one), so that a
        retry can be sealed as it was before a rotation.
        """
        key_id = self.keyring.current if key_id is None else key_id
        secret = self.keyring._derived(key_id, _DOMAIN + b"keyed steer")
        aead = self.keyring.aead(key_id)
        assert secret is not None and aead is not None  # key_id comes from the keyring
        binding = _aad(b"steer", session_id) + _counted(encode_text(key))
        steer_id = hmac.new(secret, b"id\x00" + binding, hashlib.sha256).digest()[:_STEER_ID]
        plain = steer_id + encode_text(text)
        nonce = hmac.new(secret, b"nonce\x00" + binding + plain, hashlib.sha256).digest()[:_NONCE]
        sealed = base64.b64encode(nonce + aead.encrypt(nonce, plain, _aad(b"steer", session_id))).decode("ascii")
        return f"{STEER_PREFIX}{key_id}:{sealed}"

    def open_steer(self, session_id: str, stored: str) -> tuple[bytes, str]:
        """``(steer id, text)`` of a stored steer; the id is ``b""`` for a plaintext one."""
        if not stored.startswith(STEER_PREFIX):
            self._refuse_plaintext(session_id, "a steer")
            return b"", stored
        key_id, _, sealed = stored[len(STEER_PREFIX) :].partition(":")
        plain = self._open(key_id, _aad(b"steer", session_id), sealed, session_id, "a steer")
        return plain[:_STEER_ID], decode_text(plain[_STEER_ID:])

    @staticmethod
    def steer_key(stored: str) -> str | None:
        """The id of the key a stored steer was encrypted with; ``None`` for plaintext."""
        if not stored.startswith(STEER_PREFIX):
            return None
        return stored[len(STEER_PREFIX) :].partition(":")[0]

    # --- AES-256-GCM -------------------------------------------------------------------------

    def _seal(self, aad: bytes, plain: bytes) -> str:
        aead = self.keyring.aead(self.keyring.current)
        assert aead is not None  # the keyring checked that it holds its current key
        nonce = os.urandom(_NONCE)  # random: 2**32 encryptions per key stay far from a repeat
        return base64.b64encode(nonce + aead.encrypt(nonce, plain, aad)).decode("ascii")

    def _open(self, key_id: str, aad: bytes, sealed: str, session_id: str, where: str) -> bytes:
        aead = self.keyring.aead(key_id)
        if aead is None:
            held = ", ".join(map(repr, self.keyring.ids))
            raise DecryptionError(
                f"session {session_id!r:.80} {where} is encrypted with key {key_id!r:.80}, which the keyring "
                f"does not hold (it holds {held}): it cannot be read without that key",
                session_id=session_id,
                key_id=key_id,
            )
        try:
            raw = base64.b64decode(sealed, validate=True)
            return aead.decrypt(raw[:_NONCE], raw[_NONCE:], aad)
        except (binascii.Error, ValueError, InvalidTag) as error:
            raise DecryptionError(
                f"session {session_id!r:.80} {where} does not decrypt with key {key_id!r}: it was written for "
                "another session or place, or altered, or under another key of that id",
                session_id=session_id,
                key_id=key_id,
            ) from error

    def _refuse_plaintext(self, session_id: str, where: str) -> None:
        if not self.allow_plaintext:
            raise DecryptionError(
                f"session {session_id!r:.80} {where} is stored in plaintext, not encrypted: refused "
                "(encrypted(store, keyring, allow_plaintext=True) reads a store being moved over to encryption)",
                session_id=session_id,
                key_id="",
            )


def _counted(data: bytes) -> bytes:
    # The length first, so that no two (session, key) pairs spell the same bytes.
    return len(data).to_bytes(4, "big") + data


def _envelope(stored: Message) -> str | None:
    """The data of the raw block an encrypted message is stored as; ``None`` when it is not one."""
    if len(stored.content) != 1:
        return None
    block = stored.content[0]
    return block.data if block.type is ContentType.RAW and block.name == PROVIDER else None


def _parse_envelope(data: str, session_id: str, position: int) -> tuple[str, str]:
    """``(key id, sealed)`` from an envelope's data."""
    try:
        obj = json.loads(data)
        version, key_id, sealed = obj["v"], obj["key"], obj["sealed"]
    except (ValueError, TypeError, KeyError):
        version = key_id = sealed = None
    if version != _VERSION or not isinstance(key_id, str) or not isinstance(sealed, str):
        newer = isinstance(version, int) and version > _VERSION
        raise DecryptionError(
            f"session {session_id!r:.80} message {position} is "
            + ("an envelope of a newer agentsessions: upgrade to read it" if newer else "a malformed envelope"),
            session_id=session_id,
            key_id=key_id if isinstance(key_id, str) else "",
        )
    return key_id, sealed
