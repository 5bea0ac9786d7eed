"""What a failed MySQL/MariaDB call says: the driver's error in words that say what to do.

Only :mod:`agentsessions.stores.mysql` uses this module; it keeps the store's own module to
its SQL, its transactions and its row mapping.
"""

from __future__ import annotations

import pymysql

# What went wrong, in words that say what to do: the driver's own message is often only
# "server has gone away" (a statement over max_allowed_packet) or empty (a connection the
# server or network dropped before the call began).
_CONNECT_ERRORS = (2003, 2005)  # CR_CONN_HOST_ERROR, CR_UNKNOWN_HOST
# The server answered and refused: it is running, so saying "check that it runs" misleads.
_UNKNOWN_DATABASE = 1049  # ER_BAD_DB_ERROR
_ACCESS_DENIED = (1044, 1045, 1698)  # ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR, ..._NO_PASSWORD_ERROR
_DROPPED = (2006, 2013)  # CR_SERVER_GONE_ERROR, CR_SERVER_LOST
_PACKET_TOO_LARGE = 1153
_LOCK_WAIT_TIMEOUT, _DEADLOCK, _BINLOG_STATEMENT = 1205, 1213, 1665
_LARGE = 1 << 20  # a statement this big may well be what the server refused


def explain(error: BaseException, *, connecting: bool = False, payload: int = 0) -> str:
    """What ``error`` means and what to do, for a call that sent statements of ``payload`` bytes at most."""
    code = error.args[0] if error.args and isinstance(error.args[0], int) else None
    said, where = describe(error), _address(error)
    if code == _PACKET_TOO_LARGE or (code in _DROPPED and payload >= _LARGE and not _timed_out(error)):
        return (
            f"the server at {where} dropped the connection while receiving a statement carrying "
            f"{payload / (1 << 20):.1f} MiB ({said}): that is most likely more than the server's max_allowed_packet; "
            "raise max_allowed_packet on the server (SET GLOBAL and its configuration file), or send smaller messages"
        )
    if _timed_out(error):
        return (
            f"the server at {where} did not answer within the connection's timeout ({said}); the connection was "
            "dropped and the server rolls back what it had not committed: check the server and the network, then retry"
        )
    if code == _UNKNOWN_DATABASE:
        return (
            f"the server at {where} has no such database ({said}): create it (CREATE DATABASE, then the store's "
            "SCHEMA) or name an existing one as connect()'s database"
        )
    if code in _ACCESS_DENIED:
        return (
            f"the server at {where} refused the login ({said}): check the user and password connect() passes, "
            "and that the user is granted access from this host to this database"
        )
    if connecting or code in _CONNECT_ERRORS:
        return (
            f"could not connect to the server at {where} ({said}): check that MySQL/MariaDB is running and "
            "reachable there, and that connect() names the right host and port"
        )
    if lost(error):
        return (
            f"the connection to the server at {where} was lost or already closed ({said}): the server restarted, "
            "stopped answering or is unreachable, or the connection was killed or idle past wait_timeout; nothing "
            "uncommitted was kept. Retry; a DBUtils pool (as stores.from_url makes it) replaces a dropped connection"
        )
    if code == _LOCK_WAIT_TIMEOUT:
        return f"another transaction held the session's rows past innodb_lock_wait_timeout ({said}); retry later"
    if code == _DEADLOCK:
        return f"the server chose this transaction as a deadlock's victim and rolled it back ({said}); retry"
    if code == _BINLOG_STATEMENT:
        return f"READ COMMITTED writes cannot be logged as statements ({said}): set binlog_format to ROW or MIXED"
    return said


def lost(error: BaseException) -> bool:
    """Whether ``error`` means the connection is gone (PyMySQL has closed it)."""
    code = error.args[0] if isinstance(error, pymysql.err.Error) and error.args else None
    return code in _DROPPED or (isinstance(error, pymysql.err.InterfaceError) and code == 0)


def describe(error: BaseException) -> str:
    """The driver's own words for ``error``: its code and message."""
    if len(error.args) == 2 and isinstance(error.args[0], int):  # PyMySQL's (code, message)
        return f"({error.args[0]}) {error.args[1] or type(error).__name__}"
    return str(error) or type(error).__name__


def _address(error: BaseException) -> str:
    # connect() hides host and port (a partial, a pool) and PyMySQL's messages name the host
    # at most, but the connection object that raised is in one of the traceback's frames.
    trace = error.__traceback__
    while trace is not None:
        conn = trace.tb_frame.f_locals.get("self")
        if isinstance(conn, pymysql.connections.Connection):
            return f"{conn.host}:{conn.port}"
        trace = trace.tb_next
    return "the host and port connect() names"


def _timed_out(error: BaseException | None) -> bool:
    while error is not None and not isinstance(error, TimeoutError):
        error = error.__cause__ or error.__context__
    return error is not None


_ER_BAD_FIELD, _ER_NO_SUCH_TABLE = 1054, 1146
_ER_DUP_ENTRY = 1062


def schema_missing(error: BaseException) -> bool:
    """Whether ``error`` means the store's tables (or their newer columns) are not there."""
    return bool(error.args) and error.args[0] in (_ER_NO_SUCH_TABLE, _ER_BAD_FIELD)


def duplicate_key(error: BaseException) -> bool:
    """Whether ``error`` is an INSERT refused because its primary key is taken."""
    return isinstance(error, pymysql.err.IntegrityError) and bool(error.args) and error.args[0] == _ER_DUP_ENTRY
