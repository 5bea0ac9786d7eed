"""``agentsessions console``: the console over one store, served by waitress, and the address to open."""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import socket
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


def hosts_to_open(bind: Bind) -> list[str]:
    """The hosts to print in the address: the one bound, or, for a wildcard (``0.0.0.0``, ``::``),
    this machine's name and its addresses, since nobody can open the wildcard itself."""
    try:
        wildcard = ipaddress.ip_address(bind.host)
    except ValueError:
        return [bind.host]
    if not wildcard.is_unspecified:
        return [bind.host]
    name = socket.gethostname()
    family = socket.AF_INET if wildcard.version == 4 else socket.AF_UNSPEC  # "::" takes IPv4 too, mostly
    found: list[str] = [name]
    # A name that does not resolve leaves the routed addresses below.
    with contextlib.suppress(OSError):
        found += [str(info[4][0]) for info in socket.getaddrinfo(name, None, family, socket.SOCK_STREAM)]
    found += [_routed_address(version) for version in ((4,) if wildcard.version == 4 else (6, 4))]
    usable = [host for host in found if host and not _loopback(host)]
    return list(dict.fromkeys(usable)) or [name]


def _routed_address(version: int) -> str:
    """This machine's address on the way out (a UDP socket's connect sends nothing); ``""`` with no route."""
    target = ("192.0.2.1", 9) if version == 4 else ("2001:db8::1", 9)  # documentation addresses, never reached
    try:
        with socket.socket(socket.AF_INET if version == 4 else socket.AF_INET6, socket.SOCK_DGRAM) as probe:
            probe.connect(target)
            return str(probe.getsockname()[0])
    except OSError:
        return ""


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def parse_bind(text: str) -> Bind:
    """``HOST:PORT`` (``[::1]:8700`` for IPv6) as a :class:`Bind`; ``ValueError`` saying what is wrong."""
    host, colon, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--bind is HOST:PORT, such as 127.0.0.1:8700 or [::1]:0, got {text!r}")
    return Bind(host, int(port))


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def serve(store: RunStore, bind: Bind, *, shown_store: str, out: IO[str], err: IO[str]) -> None:
    """Serve the console until interrupted; print the address that carries a fresh token first.

    The token is made here, at each start, and is good for as long as this process serves.
    """
    try:
        from waitress.server import create_server
    except ImportError:
        raise ImportError("agentsessions console needs waitress: pip install agentsessions[console]") from None
    token = secrets.token_urlsafe(32)
    server: Any = create_server(Console(store, token=token), host=bind.host, port=bind.port, ident="agentsessions")
    if not bind.loopback:
        err.write(
            f"agentsessions: warning: listening on {bind.host}, beyond this machine, over plain HTTP: "
            "the token crosses the network in clear; put TLS in front\n"
        )
    links = [f"http://{_bracketed(host)}:{server.effective_port}/?token={token}" for host in hosts_to_open(bind)]
    out.write(f"agentsessions console for {shown_store}\nopen {links[0]}\n")
    out.writelines(f"  or {link}\n" for link in links[1:])
    out.flush()
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
