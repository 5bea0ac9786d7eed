"""A small lease service: the code the example's agent reads with its tools. Data, not library code."""

from __future__ import annotations

import time


class TokenError(Exception):
    """The token was refused."""


def renew_lease(lease: dict[str, float] | None, now: float | None = None) -> dict[str, float] | None:
    now = time.time() if now is None else now
    if lease is None:
        raise TokenError("no lease to renew")
    if lease["expires_at"] <= now:
        return None
    return {**lease, "expires_at": now + lease["ttl"]}


def check_token(token: str, lease: dict[str, float] | None) -> str:
    if renew_lease(lease) is None:
        raise TokenError("token refused: the lease has expired")
    return token
