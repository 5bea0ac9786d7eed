"""A web console for the sessions of a store: look at them, watch a run, steer, cancel, fork, delete.

    from agentsessions import console
    wsgi_app = console.app(store, token=secrets.token_urlsafe())

:func:`app` is a plain WSGI application (no framework): serve it with any WSGI server, or
mount it in a Flask or Django project under a prefix (it follows ``SCRIPT_NAME``).
``agentsessions console --store URL`` serves one with waitress and prints the address that
carries the token. Every request needs the token; see :mod:`agentsessions.console._guard`.
"""

from __future__ import annotations

from agentsessions.console._app import Console
from agentsessions.session import RunStore


def app(store: RunStore, *, token: str) -> Console:
    """The console over ``store`` as a WSGI callable; ``token`` (16 characters or more) lets a request in."""
    return Console(store, token=token)


__all__ = ["Console", "app"]
