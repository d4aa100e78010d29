"""The seam for a protocol switch (RFC 9110 §7.8): the server knows no WebSocket and no app. An
`Upgrader` is asked about a request carrying `Upgrade: websocket` (before any `101`): it refuses with a
response, or accepts with the `101` head to write and a factory of the `Tunnel` that takes the
connection's bytes from then on. The connection stays one of the server's (counted against
`max_connections`, swept once a second, drained on shutdown), and writes keep their send-stall bound.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.core.http1_request import RequestHead
from gateway.http.messages import Response


class Link(Protocol):
    """What a tunnel writes to: its connection."""

    closing: bool

    def send(self, data: bytes) -> bool: ...  # True: the peer is slow, await `drained()`

    async def drained(self) -> None: ...

    def date(self) -> str: ...

    def hold_reading(self, held: bool) -> None: ...  # True: read nothing more until released


class Tunnel(Protocol):
    """A connection's protocol after the switch. `run` lasts as long as the tunnel (the connection
    closes when it returns: at once when it returns True, the peer having ended the session and being
    done sending; else lingering, what the peer still sends read and dropped); `received` is called with
    each read; `swept` once a second with the loop's time (idle deadlines); `drain` once on shutdown
    (finish what runs, then end `run`)."""

    async def run(self) -> bool: ...

    def received(self, data: bytes) -> None: ...

    def swept(self, now: float) -> None: ...

    def drain(self) -> None: ...

    def lost(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Accepted:
    head: bytes  # the `101 Switching Protocols` answer
    tunnel: Callable[[Link], Tunnel]


class Upgrader(Protocol):
    def upgrade(self, head: RequestHead) -> Awaitable[Response | Accepted]: ...
