"""The exceptions agentsessions raises, one small tree.

Errors the model caused (a tool that raised, a tool it invented, arguments that are not
JSON or do not fit the tool's schema) are never raised: they become error results the
model reads. What is raised is what the caller must see: bad input, a failing store,
network or provider.

    AgentSessionsError
    ├── InvalidSessionIdError (ValueError)   an id that is not a non-empty str of <= 255 chars
    ├── FormatError (ValueError)             text that dumps() did not write, or a newer format
    │   └── DecryptionError                  a stored ciphertext that does not decrypt; names session and key
    ├── InvalidArgumentsError (ValueError)   a tool call's input that does not fit the tool's schema
    ├── StoreError                           a store or its database failed; chained from the driver
    │   ├── SchemaMissingError               the tables are missing or older: names the schema or migration to run
    │   ├── SchemaTooNewError                the schema is two or more versions newer than this release
    │   └── ConflictError                    a session held or taken over; a steer key reused; a call decided
    │       ├── SessionBusyError             a claim, or a send with if_busy="reject", refused: a run's lease is live
    │       └── ApprovalPendingError         a claim refused: the session waits for a decision on a call
    ├── EndpointError                        the model provider gave no answer this library can use
    │   ├── EndpointTransportError (ConnectionError)   no answer: refused, reset, dropped, cut short
    │   │   └── EndpointTimeoutError (TimeoutError)    no answer in time, connecting or reading
    │   ├── EndpointStatusError              the provider answered with an error: status, type, request_id
    │   └── EndpointDecodingError            an answer that is not the provider's format
    ├── RunError                             a run failed; carries the partial Result
    ├── RunFinishedError (RuntimeError)      a steer for a run that has finished (or is finishing)
    └── RunnerClosedError (RuntimeError)     run() or start() on a runner that was shut down
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentsessions.spec import Result


class AgentSessionsError(Exception):
    """Base of every exception this library raises on purpose."""


class InvalidSessionIdError(AgentSessionsError, ValueError):
    """A session id that is not a non-empty ``str`` of at most 255 characters."""


class FormatError(AgentSessionsError, ValueError):
    """Text that is not a transcript :func:`agentsessions.dumps` wrote, or one from a newer version."""


class DecryptionError(FormatError):
    """A row of an encrypted store (:func:`agentsessions.crypto.encrypted`) that cannot be read.

    Its key is not in the keyring; or it was written for another session, position or
    role (copied there), or altered; or it is plaintext and plaintext was not allowed.
    Nothing is ever skipped or read as empty instead. ``session_id`` names the session and
    ``key_id`` the key the row names (``""`` for a plaintext or unreadable one).
    """

    def __init__(self, message: str, *, session_id: str = "", key_id: str = "") -> None:
        super().__init__(message)
        self.session_id = session_id
        self.key_id = key_id

    def __reduce__(self) -> tuple[type[DecryptionError], tuple[str], dict[str, str]]:
        # Keyword arguments do not survive pickling on their own (a worker process raising it).
        return type(self), (str(self),), {"session_id": self.session_id, "key_id": self.key_id}


class InvalidArgumentsError(AgentSessionsError, ValueError):
    """A tool call's input that does not fit the tool's schema (:meth:`agentsessions.Tool.parse_input`).

    ``field`` is where, as ``items[2].name`` (``""`` for the input as a whole), and
    ``problem`` what is wrong there; the message joins them.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(field, problem)
        self.field = field
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}" if self.field else self.problem


class StoreError(AgentSessionsError):
    """A store could not do what was asked; ``__cause__`` is the driver's error."""


class SchemaMissingError(StoreError):
    """The store's tables (or indexes) do not exist, or are an older version than this release's.

    The message names what to run: the store's ``SCHEMA`` for a database with none of its
    tables; for an older version, the version found, the version wanted, and the command
    ``agentsessions migrate --store URL``.
    """


class SchemaTooNewError(StoreError):
    """The database's schema is two or more versions newer than this release's: upgrade agentsessions.

    A schema one version newer is accepted (a migration only adds, so a replica not yet
    upgraded keeps working after it); two newer may have removed what this release uses.
    """


class ConflictError(StoreError):
    """A write refused because the session is, or has come to be, held by another run.

    Also a decision refused: the call was decided the other way, or is not waiting.

    A run whose claim was superseded (taken over after its lease lapsed, or its session
    deleted) gets this from its next save, and fails with it as the cause. A steer whose
    ``key`` the session already holds for another text gets it too, having stored nothing
    (``session.steer(text, key=...)``: the same key with the same text is a retry, and
    stores nothing more).
    """


class SessionBusyError(ConflictError):
    """A run was refused its session, or a text sent with ``if_busy="reject"``: a run holds it, its lease live."""


class ApprovalPendingError(ConflictError):
    """A run was refused its session: it waits for a decision on a tool call nobody has decided yet."""


class EndpointError(AgentSessionsError):
    """The model provider gave no answer this library can use; the subclasses say why.

    ``status`` is the HTTP status (0 when no response arrived), ``type`` the provider's
    error type, ``message`` its message and ``request_id`` the id the provider gave the
    request (``""`` when it gave none). Neither keys nor request bodies are included.
    """

    def __init__(self, message: str, *, status: int = 0, type: str = "", request_id: str = "") -> None:
        super().__init__(f"{status} {type}: {message}" if status else message)
        self.status = status
        self.type = type
        self.message = message
        self.request_id = request_id


class EndpointTransportError(EndpointError, ConnectionError):
    """No complete answer arrived: refused, reset, dropped, or a stream cut short.

    ``status`` is 0 and ``__cause__`` is the HTTP library's error. Whether the provider
    did (and billed) the work is unknown.
    """


class EndpointTimeoutError(EndpointTransportError, TimeoutError):
    """No answer in time: the connect timeout passed, or the server was silent for the read timeout."""


class EndpointStatusError(EndpointError):
    """The provider answered with an error: a status of 300 or more, or an error event in a stream.

    ``type`` and ``message`` are the provider's words; ``request_id`` is the one to quote
    to its support. For an error event inside a stream ``status`` is the stream's own (200).
    """


class EndpointDecodingError(EndpointError):
    """An answer arrived that is not the provider's format (not JSON, fields missing); ``status`` is its own."""


class RunError(AgentSessionsError):
    """A run failed. ``result`` is what it had done; ``__cause__`` is why it stopped."""

    def __init__(self, message: str, result: Result) -> None:
        super().__init__(message)
        self.result = result


class RunFinishedError(AgentSessionsError, RuntimeError):
    """``Run.steer`` after the run finished: the steer was not delivered (steer the session)."""


class RunnerClosedError(AgentSessionsError, RuntimeError):
    """``run()`` or ``start()`` on a runner that was shut down."""
