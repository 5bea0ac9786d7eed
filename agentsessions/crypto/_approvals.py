"""Approvals kept encrypted: a call's input and a decision's reason are the conversation's words.

Each is stored as ``agentsessions.crypto/1:ID:BASE64``, as a steer is, over the text alone;
the associated data names the session, the call's id and the field, so an input copied to
another call, field or session does not decrypt. Call ids, tool names, decisions, who
decided and the times stay in clear: they are what a console lists and a decision is
checked against.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import attrs

from agentsessions.approvals import Approval, Decision, edited_message
from agentsessions.codec import decode_text, encode_text
from agentsessions.crypto._sealing import STEER_PREFIX, Sealer, _aad
from agentsessions.messages import Message
from agentsessions.stores.kit.approvals import Rewrite

PREFIX = STEER_PREFIX  # one envelope form for every sealed text; the associated data tells them apart


def _where(call_id: str, field: str) -> bytes:
    call = encode_text(call_id)
    return b"approval\x00" + field.encode() + b"\x00" + len(call).to_bytes(4, "big") + call


def _seal(sealer: Sealer, session_id: str, call_id: str, field: str, text: str) -> str:
    sealed = sealer._seal(_aad(_where(call_id, field), session_id), encode_text(text))
    return f"{PREFIX}{sealer.keyring.current}:{sealed}"


def _open(sealer: Sealer, session_id: str, call_id: str, field: str, stored: str) -> str:
    if not stored.startswith(PREFIX):
        sealer._refuse_plaintext(session_id, f"the {field} of call {call_id!r:.80}")
        return stored
    key_id, _, sealed = stored[len(PREFIX) :].partition(":")
    where = f"the {field} of call {call_id!r:.80}"
    return decode_text(sealer._open(key_id, _aad(_where(call_id, field), session_id), sealed, session_id, where))


def sealed(sealer: Sealer, session_id: str, approvals: Sequence[Approval]) -> list[Approval]:
    """The approvals as the wrapped store keeps them: input and reason encrypted."""
    return _each(approvals, functools.partial(_seal, sealer, session_id))


def opened(sealer: Sealer, session_id: str, approvals: Sequence[Approval]) -> list[Approval]:
    """What :func:`sealed` stored, decrypted; a :class:`~agentsessions.DecryptionError` naming the session otherwise."""
    return _each(approvals, functools.partial(_open, sealer, session_id))


def _each(approvals: Sequence[Approval], change: Callable[[str, str, str], str]) -> list[Approval]:
    """The approvals with ``change(call_id, field, text)`` applied to each input and reason."""
    return [
        attrs.evolve(
            a,
            input=change(a.call_id, "input", a.input),
            reason=change(a.call_id, "reason", a.reason),
            # What the model asked for was the call's input when sealed: it opens as one.
            original_input=None if a.original_input is None else change(a.call_id, "input", a.original_input),
        )
        for a in approvals
    ]


def sealed_decisions(
    sealer: Sealer, session_id: str, decisions: Mapping[str, Decision], stored: Sequence[Approval] = ()
) -> dict[str, Decision]:
    """The decisions with each reason, and each edited input, encrypted for its call.

    An edited input equal to one the call holds in ``stored`` (the wait as the wrapped store
    keeps it) is passed as that very ciphertext, so that the wrapped store sees a retry, or
    the model's own input, as equal; any other is sealed afresh.
    """
    kept = {a.call_id: a for a in stored}
    plain = {a.call_id: a for a in opened(sealer, session_id, stored)} if stored else {}
    sealed = {}
    for call_id, decision in decisions.items():
        reason = _seal(sealer, session_id, call_id, "reason", decision.reason)
        edit = decision.input
        if edit is not None:
            same = _same(kept.get(call_id), plain.get(call_id), edit)
            edit = same if same is not None else _seal(sealer, session_id, call_id, "input", edit)
        sealed[call_id] = attrs.evolve(decision, reason=reason, input=edit)
    return sealed


def _same(kept: Approval | None, plain: Approval | None, edit: str) -> str | None:
    """The stored ciphertext of ``edit`` when the call holds it (as its input or the model's), else ``None``."""
    if kept is None or plain is None:
        return None
    if plain.input == edit:
        return kept.input
    return kept.original_input if plain.original_input == edit else None


def rewrite(sealer: Sealer, session_id: str, inputs: Mapping[str, str]) -> Rewrite:
    """The wrapped store's rewrite of the wait's sealed message: opened, ``inputs`` (plain) put in, sealed again."""

    def rewritten(position: int, stored: Message, edited: Mapping[str, str]) -> Message:
        message = sealer.open_message(session_id, position, stored)
        return sealer.seal_message(session_id, position, edited_message(message, {c: inputs[c] for c in edited}))

    return rewritten
