"""``agentsessions console``: the console over one store, served by waitress, and the address to open."""

from __future__ import annotations

import ipaddress
import secrets
from typing import IO, Any

import attrs

from agentsessions.console._app import Console
from agentsessions.session import RunStore

DEFAULT_BIND = "127.0.0.1:8700"


@attrs.frozen
class Bind:
    """Where to listen: a host (an address or a name) and a port (0: any free one)."""

    host: str
    port: int

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach it."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_bind(text: str) -> Bind:
    """``HOST:PORT`` (``[::1]:8700`` for IPv6) as a :class:`Bind`; ``ValueError`` saying what is wrong."""
    host, colon, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--bind is HOST:PORT, such as 127.0.0.1:8700 or [::1]:0, got {text!r}")
    return Bind(host, int(port))


def serve(store: RunStore, bind: Bind, *, shown_store: str, out: IO[str], err: IO[str]) -> None:
    """Serve the console until interrupted; print the address that carries a fresh token first."""
    try:
        from waitress.server import create_server
    except ImportError:
        raise ImportError("agentsessions console needs waitress: pip install agentsessions[console]") from None
    token = secrets.token_urlsafe(32)
    server: Any = create_server(Console(store, token=token), host=bind.host, port=bind.port, ident="agentsessions")
    host = f"[{bind.host}]" if ":" in bind.host else bind.host
    if not bind.loopback:
        err.write(
            f"agentsessions: warning: listening on {bind.host}, beyond this machine, over plain HTTP: "
            "the token crosses the network in clear; put TLS in front\n"
        )
    out.write(f"agentsessions console for {shown_store}\nopen http://{host}:{server.effective_port}/?token={token}\n")
    out.flush()
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
