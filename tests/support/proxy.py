"""A TCP proxy between a client and a test server that the test can make misbehave.

The store tests use it to play what a network or a server does to a client, on the real
server and without disturbing anyone else's connections to it:

- ``stall()``: a server (or network) that stops answering. Nothing is forwarded any more
  on the connections open then, which stay open, so the client waits for its timeout;
  new connections are accepted and black-holed alike until ``resume()``. Connections
  stalled once stay stalled (what they dropped would garble their protocol).
- ``lose_next_reply()``: the next bytes the server sends are dropped and that connection
  is cut, as a network cut after the server ran a command: the client never hears.
- ``drop()``: every open connection is cut, as a server restart looks to its clients;
  new connections go through (the restarted server).
- ``close()``: everything is shut and the port refuses connections.

``connections`` counts the connections it accepted, ``lost`` the replies it lost.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


class Proxy:
    """A proxy on 127.0.0.1 (``port``) to ``target``, forwarding both ways until told otherwise."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.connections = self.lost = 0
        self._lock = threading.Lock()
        self._epoch, self._stalled = 0, False  # a connection forwards while its epoch is current
        self._lose = threading.Event()
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._accept, name="test-proxy", daemon=True).start()

    def stall(self) -> None:
        """Stop forwarding on every connection, open or new, until :meth:`resume`."""
        with self._lock:
            self._stalled, self._epoch = True, self._epoch + 1

    def resume(self) -> None:
        """Forward new connections again (those stalled stay stalled)."""
        with self._lock:
            self._stalled = False

    def lose_next_reply(self) -> None:
        """Drop the next bytes the server sends, and cut that connection."""
        self._lose.set()

    def drop(self) -> None:
        """Cut every open connection, both sides, as a server restart would."""
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            _shut(sock)

    def close(self) -> None:
        """Shut everything down: the port refuses connections from now on."""
        self.stall()
        _shut(self.listener)
        self.listener.close()
        self.drop()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                self.connections += 1
                epoch, stalled = self._epoch, self._stalled
            try:
                upstream = None if stalled else socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            if upstream is not None:
                upstream.settimeout(None)
            with self._lock:
                self._open.update(sock for sock in (client, upstream) if sock is not None)
            threading.Thread(target=self._pump, args=(client, upstream, epoch, False), daemon=True).start()
            if upstream is not None:
                threading.Thread(target=self._pump, args=(upstream, client, epoch, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket | None, epoch: int, replies: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if sink is None or epoch != self._epoch:
                    continue  # stalled: read and drop, keeping the connection open
                if replies and self._lose.is_set():
                    self._lose.clear()
                    with self._lock:
                        self.lost += 1
                    break
                sink.sendall(data)
        for sock in (source, sink):
            if sock is not None:
                _shut(sock)


@contextlib.contextmanager
def proxied(target: tuple[str, int]) -> Iterator[Proxy]:
    """A :class:`Proxy` to ``target`` for the block, closed after it."""
    proxy = Proxy(target)
    try:
        yield proxy
    finally:
        proxy.close()


def _shut(sock: socket.socket) -> None:
    # shutdown(), not close(): it wakes a thread blocked reading the socket, close() does not.
    # The descriptor is closed when the last thread using the socket lets go of it.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
