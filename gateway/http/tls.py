"""The TLS listener: our own accept, so a connection counts from its accept, its handshake included.

Why not `create_server(ssl=...)`: the listener then runs the handshake before the server hears of the
connection, so sockets that connect and say nothing sat outside `max_connections` and the request-head
timeout until OpenSSL's own 60 s (issue #27: 300 of them exhausted the descriptors, with no 503, log
or metric). And `start_tls` from `connection_made` is no way out: uvloop starts reading after
`connection_made` returns, so a ClientHello can reach the plain protocol first (measured: one handshake
in five stalled). Here the accepted socket is counted at once; past the limit it is closed before any
byte is read (no 503 can be sent before a handshake we will not spend); otherwise it is handed to
`connect_accepted_socket` with the handshake bounded by the request-head timeout, and its shutdown (a
close's linger: TLS has no half-close) by LINGER_S, not the loop's 30 s.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.http.connection import LINGER_S

if TYPE_CHECKING:
    from gateway.http import HttpServer

ACCEPTS_PER_WAKE = 64  # a burst of connections is accepted in slices, so requests keep being served


class TlsListener:
    def __init__(self, server: HttpServer, sock: socket.socket, protocol: Callable[[], asyncio.Protocol]):
        self._server, self._sock, self._protocol = server, sock, protocol
        self.handshakes: set[asyncio.Task[None]] = set()
        server.loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        server = self._server
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EMFILE, ECONNABORTED...: the next wake tries again
                return
            if server.closing or server.open_count() >= server.limits.max_connections:
                conn.close()
                server.refused("max_connections")
                continue
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as create_server sets it: TTFT
            server.handshaking += 1
            task = server.loop.create_task(self._handshake(conn))
            self.handshakes.add(task)
            task.add_done_callback(self.handshakes.discard)

    async def _handshake(self, conn: socket.socket) -> None:
        server = self._server
        tls = server.tls
        assert tls is not None
        try:  # from here the transport owns the socket, and closes it when the handshake fails
            # its shutdown, a close's linger (`HttpConnection._linger`), held to LINGER_S, not the loop's 30 s
            await server.loop.connect_accepted_socket(self._protocol, conn, ssl=tls,
                                                      ssl_handshake_timeout=server.limits.head_timeout_s,
                                                      ssl_shutdown_timeout=LINGER_S)
        except OSError:  # TimeoutError, ssl.SSLError and ConnectionError included
            server.refused("tls_handshake")  # too slow, not TLS, or the client left
        finally:
            server.handshaking -= 1  # counted in `connections` now, if it succeeded

    def close(self) -> None:
        self._server.loop.remove_reader(self._sock.fileno())
        self._sock.close()
        for task in list(self.handshakes):
            task.cancel()


def listening_sockets(host: str, port: int, *, reuse_port: bool, backlog: int) -> list[socket.socket]:
    """Bound, listening, non-blocking TCP sockets, one per address `host` resolves to, as
    `create_server` makes them (IPv6 ones IPv6-only, so `::` and `0.0.0.0` can both be bound)."""
    socks: list[socket.socket] = []
    try:
        for family, _, _, _, address in socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                           flags=socket.AI_PASSIVE):
            sock = socket.socket(family, socket.SOCK_STREAM)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
            port = port or int(sock.getsockname()[1])  # port 0: every address on the one port drawn
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks
