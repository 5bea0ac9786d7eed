"""Encryption at rest: transcripts that a stolen database, dump or backup does not reveal.

    from agentsessions.crypto import Keyring, encrypted

    keyring = Keyring.from_env()                  # {"current": ID, "keys": {ID: BASE64}}
    store = encrypted(PostgresStore(pool), keyring)

Message contents (text, tool calls and their inputs, results, thinking, images), steer
texts and, as they come, approval inputs and reasons are stored as AES-256-GCM
ciphertext naming its key; session ids, states, times, holders and metadata stay in
clear, because listing and claiming need them. Each ciphertext is bound to its session
and place: a row copied elsewhere, altered, under a key the keyring lacks, or in
plaintext raises :class:`~agentsessions.DecryptionError`; nothing is skipped.

Needs the ``cryptography`` package: ``pip install agentsessions[crypto]``. ``import
agentsessions`` never imports it.
"""

from __future__ import annotations

try:
    import cryptography  # noqa: F401  (only to name the extra when it is missing)
except ImportError as error:  # pragma: no cover - the test environment has it
    raise ImportError(
        "agentsessions.crypto needs the cryptography package: pip install agentsessions[crypto]"
    ) from error

from agentsessions.crypto._keyring import ENVIRONMENT, KEY_BYTES, Keyring
from agentsessions.crypto._rekey import RekeyProgress, rekey
from agentsessions.crypto._store import EncryptedStore, encrypted
from agentsessions.errors import DecryptionError

__all__ = [
    "ENVIRONMENT",
    "KEY_BYTES",
    "DecryptionError",
    "EncryptedStore",
    "Keyring",
    "RekeyProgress",
    "encrypted",
    "rekey",
]
