"""WebSocket (RFC 6455) for the server side of an upgraded connection, over `wsproto` (sans-I/O, never a
frame parser of ours): the handshake's answer, and a connection's frames as whole text messages, with
the bounds the gateway holds every client to (docs/reference.md, WebSocket mode).

- A message is gathered up to `max_message` bytes; a bigger one closes the connection with 1009.
- A binary message closes it with 1003 (the Responses API's messages are JSON text).
- A malformed frame closes it with the code wsproto names (1002 protocol error, 1007 bad UTF-8).
- Pings are answered with pongs at once; the peer's close is answered with a close.
- permessage-deflate is declined (no extension is accepted): a zlib window per connection costs up to
  ~300 KiB, against ~a few KiB for a connection without it, so many idle agent sessions stay cheap.
"""

from __future__ import annotations

from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.utilities import generate_accept_token

NORMAL, GOING_AWAY, PROTOCOL_ERROR, UNSUPPORTED_DATA, POLICY_VIOLATION, TOO_BIG = 1000, 1001, 1002, 1003, 1008, 1009


def text_frame(payload: bytes) -> bytes:
    """One unfragmented, unmasked text frame (a server's, RFC 6455 §5.2) of UTF-8 `payload`: the header
    alone is written here, as wsproto writes it; a stream's events are the hot path (wsproto's
    `send` costs ~8 us an event, this ~0.3), and tests check the bytes equal wsproto's. Reading frames
    is wsproto's alone."""
    size = len(payload)
    if size < 126:
        return bytes((0x81, size)) + payload
    if size < 65536:
        return bytes((0x81, 0x7E, size >> 8, size & 0xFF)) + payload
    return b"\x81\x7f" + size.to_bytes(8, "big") + payload


class HandshakeError(ValueError):
    """An upgrade request that is not a valid WebSocket opening handshake (answered 400)."""


def accept_head(headers: dict[str, str]) -> bytes:
    """The `101 Switching Protocols` answer to a client's opening handshake (RFC 6455 §4.2.2); the
    client's extension offers (permessage-deflate) are declined by naming none."""
    key = headers.get("sec-websocket-key", "").strip()
    if headers.get("sec-websocket-version", "").strip() != "13":
        raise HandshakeError("Sec-WebSocket-Version must be 13")
    if len(key) != 24:  # base64 of 16 bytes
        raise HandshakeError("a Sec-WebSocket-Key of 16 base64-encoded bytes is required")
    if "upgrade" not in {t.strip().lower() for t in headers.get("connection", "").split(",")}:
        raise HandshakeError("Connection must include Upgrade")
    token: bytes = generate_accept_token(key.encode("ascii", "replace"))
    return (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + token + b"\r\n\r\n")


class Fed:
    """What some bytes from the client came to: whole text messages in order, bytes to write now
    (pongs, a close frame) and, when the connection is to end after writing them, the close code.
    A plain slots class: one is made per read (a dataclass's field factories cost ~1 us more)."""

    __slots__ = ("close", "more", "reply", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []  # the whole text messages
        self.reply = b""
        self.close: int | None = None
        self.more = False  # stopped at `max_messages`: `feed(b"")` takes the next ones


class ServerSocket:
    """One connection's frames, after the handshake."""

    __slots__ = ("_conn", "_parts", "_size", "max_message")

    def __init__(self, max_message: int):
        self.max_message = max_message
        self._conn = Connection(ConnectionType.SERVER)
        self._parts: list[str] = []  # the fragments of the message being received
        self._size = 0

    @property
    def open(self) -> bool:
        return self._conn.state is ConnectionState.OPEN

    def feed(self, data: bytes, max_messages: int = 1 << 30) -> Fed:
        """Take `data`; stop after `max_messages` whole messages (wsproto keeps the rest of its buffer, and
        its parser's place, for the next call), so a flood of small messages is taken a batch at a time."""
        fed = Fed()
        if self._conn.state is ConnectionState.CLOSED:
            return fed
        if data:
            self._conn.receive_data(data)
        for event in self._conn.events():
            if isinstance(event, TextMessage):
                text = event.data
                if event.message_finished and not self._parts:  # a whole message in one piece: the usual
                    # UTF-8 takes 1-4 bytes a character: the exact size is counted only near the bound
                    if len(text) * 4 > self.max_message and len(text.encode()) > self.max_message:
                        return self._closing(fed, TOO_BIG, "message too big")
                    fed.texts.append(text)
                else:
                    self._size += len(text.encode())
                    if self._size > self.max_message:
                        return self._closing(fed, TOO_BIG, "message too big")
                    self._parts.append(text)
                    if not event.message_finished:
                        continue
                    fed.texts.append("".join(self._parts))
                    self._parts.clear()
                    self._size = 0
                if len(fed.texts) >= max_messages:  # the frames after it stay unparsed in wsproto
                    fed.more = True
                    return fed
            elif isinstance(event, BytesMessage):
                return self._closing(fed, UNSUPPORTED_DATA, "binary messages are not supported")
            elif isinstance(event, Ping):
                fed.reply += self._conn.send(event.response())
            elif isinstance(event, CloseConnection):
                code = int(event.code) if event.code != 1005 else NORMAL  # 1005: the peer sent no code
                return self._closing(fed, code, event.reason or "")
        return fed

    def _closing(self, fed: Fed, code: int, reason: str) -> Fed:
        fed.reply += self.close(code, reason)
        fed.close = code
        self._parts.clear()
        return fed

    def text(self, data: str | bytes) -> bytes:
        """One text message (empty once the connection is closing); bytes are UTF-8 already."""
        if self._conn.state is not ConnectionState.OPEN:
            return b""
        return text_frame(data.encode() if isinstance(data, str) else data)

    def close(self, code: int, reason: str = "") -> bytes:
        """The close frame (once: empty when one was sent)."""
        if self._conn.state not in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            return b""
        return self._conn.send(CloseConnection(code=code, reason=reason[:120]))
