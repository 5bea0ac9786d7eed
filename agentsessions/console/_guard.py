"""Who may use the console: the token, its cookie, the CSRF token, the origin check, the headers.

Every request carries the token, as ``Authorization: Bearer TOKEN`` or as the cookie that
opening ``/?token=TOKEN`` once sets. The cookie and the forms' CSRF token are HMACs of the
token, so two consoles given the same token (replicas behind one address) accept each
other's cookies and forms, and neither value gives the token back. Comparisons are
constant-time (:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from http.cookies import CookieError, SimpleCookie
from typing import Any

COOKIE = "agentsessions_console"

SECURITY_HEADERS = (
    (
        "Content-Security-Policy",
        # connect-src: the page's script polls the transcript; base-uri: no <base> may move links.
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    # same-origin, not no-referrer: under no-referrer browsers send `Origin: null` with the
    # console's own forms, and the origin check could no longer tell them from a sandboxed
    # attacker's; links out of the console (a URL in a transcript) still carry no referrer.
    ("Referrer-Policy", "same-origin"),
    ("X-Frame-Options", "DENY"),
    ("Cache-Control", "no-store"),
)
"""Sent with every response, a refusal included."""


def _mac(token: str, purpose: str) -> str:
    return hmac.new(token.encode(), f"agentsessions console {purpose}".encode(), hashlib.sha256).hexdigest()


class Guard:
    """The checks for one console, made from its token."""

    def __init__(self, token: str) -> None:
        if not isinstance(token, str) or len(token) < 16:
            raise ValueError("the console's token is a str of at least 16 characters (secrets.token_urlsafe())")
        self._token = token.encode()
        self._cookie = _mac(token, "cookie")
        self.csrf = _mac(token, "csrf")

    def token_matches(self, candidate: str) -> bool:
        """Whether ``candidate`` is the token."""
        return hmac.compare_digest(candidate.encode("utf-8", "surrogatepass"), self._token)

    def allowed(self, environ: Mapping[str, Any]) -> bool:
        """Whether the request carries the token (header) or its cookie."""
        header = str(environ.get("HTTP_AUTHORIZATION", ""))
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and self.token_matches(value.strip()):
            return True
        return hmac.compare_digest(_cookie_value(environ).encode(), self._cookie.encode())

    def csrf_matches(self, candidate: str) -> bool:
        """Whether a form's ``csrf`` field is this console's."""
        return hmac.compare_digest(candidate.encode("utf-8", "surrogatepass"), self.csrf.encode())

    def set_cookie(self, environ: Mapping[str, Any]) -> tuple[str, str]:
        """The ``Set-Cookie`` header that lets this browser in from now on."""
        path = str(environ.get("SCRIPT_NAME", "")) or "/"
        secure = "; Secure" if environ.get("wsgi.url_scheme") == "https" else ""
        return "Set-Cookie", f"{COOKIE}={self._cookie}; Path={path}; HttpOnly; SameSite=Strict{secure}"


def _cookie_value(environ: Mapping[str, Any]) -> str:
    jar = SimpleCookie()
    try:
        jar.load(str(environ.get("HTTP_COOKIE", "")))
    except CookieError:
        return ""
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None else ""


def same_origin(environ: Mapping[str, Any]) -> bool:
    """Whether a POST comes from the console's own pages: refuses what browsers mark cross-site.

    ``Sec-Fetch-Site`` (sent by current browsers) must be ``same-origin`` or ``none``; an
    ``Origin`` header, when present, must be this server's own. A client that sends
    neither (curl, a script holding the token) passes: the CSRF token still guards forms.
    """
    site = environ.get("HTTP_SEC_FETCH_SITE")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = environ.get("HTTP_ORIGIN")
    if origin is None:
        return True
    host = environ.get("HTTP_HOST") or f"{environ.get('SERVER_NAME', '')}:{environ.get('SERVER_PORT', '')}"
    return bool(origin == f"{environ.get('wsgi.url_scheme', 'http')}://{host}")
