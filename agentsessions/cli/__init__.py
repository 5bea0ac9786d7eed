"""The ``agentsessions`` command: look at, steer, stop, fork, delete, prune, export and import sessions.

    agentsessions [--store URL] [--keys FILE] COMMAND ...        (or: python -m agentsessions ...)

    list [--state STATE]... [--metadata K=V]... [--older-than 7d] [--limit N] [--json]
    show ID [--json]               the record, the steers waiting, the transcript
    steer ID TEXT [--key K]        prints the state the steer met: running, or what waits for a run;
                                   with --key, run again it stores nothing more (a retry)
    cancel ID                      asks the run holding ID to stop, or ends its wait for approval
    approvals ID [--json]          the tool calls ID waits for, decided or not
    approve ID CALL_ID [--by WHO] [--input JSON]
                                   lets a waiting call run (the run after the decision runs it);
                                   with --input, with that input instead (checked against the
                                   tool's schema; the transcript's call shows it)
    reject ID CALL_ID [--reason TEXT] [--by WHO]
                                   refuses a waiting call: the model reads the reason
    fork ID NEW [--at N]           NEW gets ID's first N messages (all without --at)
    delete ID...                   transcript, steers and record, for each ID
    prune --older-than 30d [--state STATE]... [--metadata K=V]... [--dry-run] [--batch N]
                                   deletes the sessions last saved before then (by default the
                                   ended ones: idle, finished, failed, cancelled; waiting only
                                   when --state names it; never one a live run holds), a batch
                                   at a time, the running count on stderr; --dry-run counts them
    export ID                      the transcript in the agentsessions.dumps form, on stdout
    import ID FILE [--replace]     a transcript in that form from FILE (- for stdin)
    console [--bind HOST:PORT]     a web console over the store (default 127.0.0.1:8700); prints
                                   the address to open, carrying a one-time token
    migrate [--plan] [--sql] [--wait SECONDS]
                                   brings the store's schema to this release's version, under a
                                   lock; --plan prints the steps, --sql only their statements
    rekey --keys FILE [--allow-plaintext] [--batch N] [--lease SECONDS]
                                   re-encrypt every session with the keyring's current key,
                                   each under a claim, in batches, printing progress; run it
                                   again after an interruption, or when sessions were busy

``list --json`` writes JSON Lines: one object per session, newest update first, with
``id``, ``state``, ``length``, ``updated_at``, ``holder``, ``lease_expires_at`` (ISO 8601,
UTC, or null), ``pending_steers``, ``cancel_requested``, ``metadata``,
``pending_approvals``, ``approval_deadline``, ``usage`` (its four token counts) and
``preview``. ``show --json`` writes one object: the same fields, ``steers``
(``seq`` and ``text`` of each one waiting) and ``transcript`` (the ``dumps`` form, parsed).

Store URLs (--store, else the AGENTSESSIONS_STORE environment variable):
  sqlite:///absolute/path.db  sqlite:relative/path.db
      the file must exist, except for import (which creates it, with its tables)
  postgresql://user:password@host:5432/db   (or postgres://; any libpq URI parameter,
      e.g. ?options=-csearch_path%3Dmyschema)          needs: pip install agentsessions[postgres]
  mysql://user:password@host:3306/db                   needs: pip install agentsessions[mysql]
  mongodb://user:password@host:27017/db (or mongodb+srv://; the database is the path)
                                                       needs: pip install agentsessions[mongodb]
  redis://user:password@host:6379/0 (or rediss://; ?prefix=myapp: for the key prefix,
      default agentsessions:)                          needs: pip install agentsessions[redis]
  The command opens its own connections and closes them before it exits. A password in
  the URL never appears in any output: URLs are shown as postgresql://user:***@host/db.

Encrypted stores (agentsessions.crypto): --keys FILE (else the AGENTSESSIONS_KEYS_FILE
  environment variable) names a keyring file, {"current": ID, "keys": {ID: BASE64, ...}};
  every command then reads and writes the store through it. --unwrap MODULE:FUNCTION (after
  the command) names a function (key_id, stored_bytes) -> key unwrapping each key (a KMS).
  Needs: pip install agentsessions[crypto]

Exit codes:
  0  done
  1  not found: no such session (show, export, steer, fork's source, cancel, delete: any
     ID missing, after deleting the others); for cancel also: no live run holds it
  2  bad input or usage: arguments, session ids, a transcript that is not the dumps form,
     approve --input that is not a JSON object or does not fit the tool's schema,
     fork --at outside 0..length, fork on a store that cannot fork, prune on one that cannot
     prune or with --state running; a keys file that cannot be read; a row that does not
     decrypt (rekey: sessions that did not, each named)
  3  busy or conflict: import over an existing session without --replace, or over one a
     run holds; fork into an existing id; another run holds the session; rekey left
     sessions that runs held (run it again); steer --key K where the session holds K for
     another text (nothing stored); approve or reject of a call decided the other way (or
     approved with another --input), or not waiting
  4  store error: no driver, unreachable, refused, tables missing, file missing
  5  an unexpected error (a bug): a traceback follows, with passwords masked
migrate has its own: 0 up to date or migrated, 1 failed, 2 bad usage, 3 the schema is newer
than this release's.
Errors are one line on stderr, starting with "agentsessions: ".
"""

from agentsessions.cli._args import duration
from agentsessions.cli._base import (
    ENVIRONMENT,
    KEYS_ENVIRONMENT,
    PROG,
    CliError,
    Exit,
    Streams,
    open_store,
    parse_store_url,
)
from agentsessions.cli._main import main
from agentsessions.cli._parser import parser

__all__ = [
    "ENVIRONMENT",
    "KEYS_ENVIRONMENT",
    "PROG",
    "CliError",
    "Exit",
    "Streams",
    "duration",
    "main",
    "open_store",
    "parse_store_url",
    "parser",
]
