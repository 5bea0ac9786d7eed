"""A Django service over agentsessions: any replica serves any conversation, whoever runs it.

    python examples/django/service.py --dsn "host=127.0.0.1 user=postgres dbname=test" --schema public \\
        --migrate --port 8001 --replica web-1 [--lease 30] [--gates DIR]
    python examples/django/service.py --sqlite conversations.db --migrate --port 8001

The Flask example (``examples/flask``) as a Django project, in one file: the settings, the
URLs and the views are below; the service they serve, with the same routes, answers and
offline model as the Flask example's (see it for what each route does), is
``examples/service/conversations.py``, which both share. The store is the one Django's own
settings name: ``agentsessions.contrib.django.store()`` over ``DATABASES["default"]``, with
a pool of its own; ``--migrate`` runs ``manage.py migrate`` for the
``agentsessions.contrib.django`` app, which creates the store's tables.

In a project of your own the pieces go where Django puts them: ``"agentsessions.contrib.django"``
in ``INSTALLED_APPS``, the views in ``views.py``, one ``Conversations`` per process (a
module-level object, made on first use), and its runner's ``shutdown`` where the server stops
its workers (gunicorn's ``worker_exit`` hook; see the Flask example). These views take JSON
from any caller, so they are exempt from CSRF; a real one checks who is calling first.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import django
from django.conf import settings
from django.core.management import call_command
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.core.wsgi import get_wsgi_application
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

import agentsessions as agent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "service"))  # the service both web examples share
from conversations import (
    BAD_BODY,
    Answer,
    Conversations,
    EchoModel,
    add_service_arguments,
    body_text,
    cancel,
    new_turn,
    read,
    serve,
    steer,
)

View = Callable[..., JsonResponse]

_service: list[Conversations] = []  # one per process, made in main() once Django is set up


def conversations() -> Conversations:
    """This process's service."""
    return _service[0]


def _json(answer: Answer | dict[str, Any]) -> JsonResponse:
    body, status = answer if isinstance(answer, tuple) else (answer, 200)
    return JsonResponse(body, status=status)


def answers(view: View) -> View:
    """The library's errors as the Flask example answers them: a bad id 400; a closing replica, a failing store 503."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
        try:
            return view(request, *args, **kwargs)
        except agent.InvalidSessionIdError as error:
            return JsonResponse({"error": str(error)}, status=400)
        except agent.RunnerClosedError:
            return JsonResponse({"error": "this replica is shutting down; try another"}, status=503)
        except agent.StoreError as error:
            return JsonResponse({"error": f"the store failed: {error}"}, status=503)

    return wrapped


def _text(request: HttpRequest) -> str | None:
    try:
        return body_text(json.loads(request.body or b"null"))
    except ValueError:
        return None


@csrf_exempt
@require_POST
@answers
def post_message(request: HttpRequest, conversation_id: str) -> JsonResponse:
    """A new user message: a run from the stored transcript plus the text; 409 while a run holds the conversation."""
    text = _text(request)
    if text is None:
        return JsonResponse({"error": BAD_BODY}, status=400)
    return _json(new_turn(conversations(), conversation_id, text))


@csrf_exempt
@require_POST
@answers
def post_steer(request: HttpRequest, conversation_id: str) -> JsonResponse:
    """``Runner.send``: to this process's run, to a run elsewhere through the store, or to a new run."""
    text = _text(request)
    if text is None:
        return JsonResponse({"error": BAD_BODY}, status=400)
    return _json(steer(conversations(), conversation_id, text, request.headers.get("Idempotency-Key")))


@csrf_exempt
@require_POST
@answers
def post_cancel(request: HttpRequest, conversation_id: str) -> JsonResponse:
    """``session.cancel()``, from any replica."""
    return _json(cancel(conversations(), conversation_id))


@require_GET
@answers
def get_conversation(request: HttpRequest, conversation_id: str) -> JsonResponse:
    """The transcript and the session's record (state, holder, lease)."""
    return _json(read(conversations(), conversation_id))


urlpatterns = [
    path("conversations/<str:conversation_id>/messages", post_message),
    path("conversations/<str:conversation_id>/steer", post_steer),
    path("conversations/<str:conversation_id>/cancel", post_cancel),
    path("conversations/<str:conversation_id>", get_conversation),
]


def database(args: argparse.Namespace) -> dict[str, Any]:
    """``DATABASES["default"]`` from the command line: PostgreSQL in ``--schema``, or a SQLite file."""
    if args.sqlite is not None:
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(args.sqlite)}
    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(args.dsn)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": given.pop("dbname", ""),
        "USER": given.pop("user", ""),
        "PASSWORD": given.pop("password", ""),
        "HOST": given.pop("host", ""),
        "PORT": given.pop("port", ""),
        "OPTIONS": {**given, "options": f"-c search_path={args.schema}"},
    }


def configure(args: argparse.Namespace) -> None:
    """The project's settings, as a ``settings.py`` would hold them."""
    settings.configure(
        DEBUG=False,
        SECRET_KEY="an example's key: set your own",
        ALLOWED_HOSTS=["127.0.0.1", "localhost"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=["agentsessions.contrib.django"],
        MIDDLEWARE=["django.middleware.common.CommonMiddleware"],
        DATABASES={"default": database(args)},
        USE_TZ=True,
    )
    django.setup()  # type: ignore[attr-defined,unused-ignore]  # mypy may take this folder for Django (untyped)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--dsn", help="PostgreSQL: a libpq conninfo, 'host=... dbname=...' or postgresql://...")
    where.add_argument("--sqlite", type=Path, help="a SQLite file instead")
    parser.add_argument("--schema", default="public", help="PostgreSQL: the schema holding the tables (search_path)")
    parser.add_argument("--migrate", action="store_true", help="manage.py migrate first: it creates the tables")
    add_service_arguments(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    configure(args)
    if args.migrate:
        call_command("migrate", "agentsessions", verbosity=1)

    from agentsessions.contrib.django import store

    service = Conversations(
        store(), lambda cid: EchoModel(cid, args.gates), agent.Runner(replica=args.replica), args.lease
    )
    _service.append(service)
    server = ThreadedWSGIServer(("127.0.0.1", args.port), WSGIRequestHandler)
    server.set_app(get_wsgi_application())
    serve(server, service.runner, args.port, grace=args.grace)


if __name__ == "__main__":
    main()
