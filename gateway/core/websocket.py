"""WebSocket (RFC 6455) for the server side of an upgraded connection, over the sans-I/O protocol of
`websockets` (never a frame parser of ours; its C speedups unmask, ~3.5 us a message where `wsproto`
took ~11, bench/README.md): the handshake's answer, and a connection's frames as whole text messages,
with the bounds the gateway holds every client to (docs/reference.md, WebSocket mode).

- A message is gathered up to `max_message` bytes; a bigger one closes the connection with 1009.
- A binary message closes it with 1003 (the Responses API's messages are JSON text); text that is not
  UTF-8 with 1007.
- A message over `stepped` bytes (1 MiB) is given as its bytes, not a `str`, its UTF-8 checked a slice
  per call (`core.utf8_check`), the messages after it waiting: decoding 10 MiB whole held the loop
  10-25 ms, and such a message is parsed from its bytes a step at a time (`core.json_split`).
- A malformed frame closes it with 1002 (protocol error), as the protocol fails it.
- Pings are answered with pongs at once; the peer's close is answered with a close.
- permessage-deflate is declined (no extension is accepted): a zlib window per connection costs up to
  ~300 KiB, against ~a few KiB for a connection without it, so many idle agent sessions stay cheap.
"""

from __future__ import annotations

from typing import Any, cast

from websockets.frames import Frame, Opcode
from websockets.protocol import Event, Protocol, Side, State
from websockets.typing import BytesLike
from websockets.utils import accept_key

from gateway.core.utf8_check import CHECK_BYTES, Utf8Check

NORMAL, GOING_AWAY, PROTOCOL_ERROR, UNSUPPORTED_DATA, NO_STATUS = 1000, 1001, 1002, 1003, 1005
INVALID_DATA, POLICY_VIOLATION, TOO_BIG = 1007, 1008, 1009
# bytes given to the parser at a time: a read full of tiny frames (6 bytes each, masked) is parsed ~700
# frames a step (~1 ms), so a flood cannot hold the loop for a whole 256 KiB read
SLICE = 4096
# frames parsed a call at most: a slice of the tiniest. Frames that are no message (pings, pongs, empty
# fragments) do not end a call as a batch of messages does, and a 256 KiB read of them, parsed whole, held
# the loop 160-300 ms; a call now stops after them, and the rest waits for the next as messages do
FRAMES_PER_CALL = SLICE // 6
STEPPED_BYTES = 1024 * 1024  # a bigger text message is given as bytes, checked a slice per call


class _Unlogged:
    """The protocol's logger: none. At debug it would log every frame (model output, keys); what it logs
    otherwise (a parser's own failure, answered 1011) shows in the connection's `websocket_closed` line."""

    def isEnabledFor(self, level: int) -> bool:  # logging's name
        return False

    def debug(self, *args: Any, **kwargs: Any) -> None:
        pass

    def info(self, *args: Any, **kwargs: Any) -> None:
        pass

    def warning(self, *args: Any, **kwargs: Any) -> None:
        pass

    def error(self, *args: Any, **kwargs: Any) -> None:
        pass


_QUIET = cast(Any, _Unlogged())


def text_frame(payload: bytes) -> bytes:
    """One unfragmented, unmasked text frame (a server's, RFC 6455 §5.2) of UTF-8 `payload`: the header
    alone is written here, as a library writes it; a stream's events are the hot path (wsproto's
    `send` costs ~8 us an event, this ~0.3), and tests check the bytes equal wsproto's and websockets'.
    Reading frames is the library's alone."""
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
    token = accept_key(key).encode("ascii")
    return (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + token + b"\r\n\r\n")


class Fed:
    """What some bytes from the client came to: whole text messages in order, bytes to write now
    (pongs, a close frame) and, when the connection is to end after writing them, the close code.
    A plain slots class: one is made per read (a dataclass's field factories cost ~1 us more)."""

    __slots__ = ("close", "more", "reply", "texts")

    def __init__(self) -> None:
        self.texts: list[str | bytes] = []  # the whole text messages (a big one as its UTF-8 bytes)
        self.reply = b""
        self.close: int | None = None
        self.more = False  # stopped at `max_messages`: `feed(b"")` takes the next ones


class ServerSocket:
    """One connection's frames, after the handshake (the protocol's state machine is websockets'
    sans-I/O `Protocol`, opened past its handshake: ours is `accept_head`)."""

    __slots__ = ("_at", "_check", "_check_bytes", "_frames", "_later", "_parts", "_pending", "_proto", "_ready",
                 "_stepped", "max_message")

    def __init__(self, max_message: int, stepped: int = STEPPED_BYTES, check_bytes: int = CHECK_BYTES):
        """`stepped`, `check_bytes`: a message's size past which it is checked in slices, and the slices'
        (tests pass small ones)."""
        self.max_message = max_message
        self._proto = Protocol(Side.SERVER, state=State.OPEN, max_size=max_message, logger=_QUIET)
        # the text message being received, its fragments' bytes joined as they come: a list of them held an
        # object and a slot a fragment (~42 bytes for a 1-byte one, 6 on the wire), 40 times `max_message`
        self._parts: bytearray | None = None
        self._ready: list[str | bytes] = []  # whole messages past `max_messages`, for the next call
        self._pending = b""  # bytes not yet given to the parser: a flood is parsed a slice at a time
        self._at = 0
        self._stepped, self._check_bytes = stepped, check_bytes
        self._check: Utf8Check | None = None  # a whole message over `stepped` bytes, its UTF-8 being checked
        self._later: list[Event] = []  # the frames parsed after it, taken once it is
        self._frames = 0  # frames parsed in this call to `feed` (FRAMES_PER_CALL)

    @property
    def open(self) -> bool:
        return self._proto.state is State.OPEN

    @property
    def closed_by_peer(self) -> bool:
        """The peer sent its close frame (and it was answered, or it answered ours): the closing handshake
        is done, and a peer sends nothing after it (RFC 6455 §5.5.1)."""
        return self._proto.close_rcvd is not None

    def feed(self, data: bytes, max_messages: int = 1 << 30) -> Fed:
        """Take `data`; stop after `max_messages` whole messages (the rest of the bytes are kept, unparsed,
        for the next call), so a flood of small messages is taken a batch at a time."""
        fed = Fed()
        proto = self._proto
        # (a peer's close parsed with a big message waits in `_later`: the protocol answered it already)
        if proto.state is not State.OPEN and not (self._checking() or self._later):
            return fed
        if data:
            self._pending = self._pending[self._at:] + data if self._at < len(self._pending) else data
            self._at = 0
        ready = self._ready
        self._frames = 0
        while len(ready) < max_messages and self._next(ready, fed):
            pass
        writes = proto.data_to_send()
        if writes:
            fed.reply += b"".join(writes)
        if fed.close is not None:
            self._pending, self._at, ready[:] = b"", 0, []
            self._check, self._later = None, []
            return fed
        if self._at >= len(self._pending):
            self._pending, self._at = b"", 0
        fed.texts = ready[:max_messages]
        del ready[:max_messages]
        fed.more = bool(ready) or bool(self._pending) or self._checking() or bool(self._later)
        return fed

    def _next(self, ready: list[str | bytes], fed: Fed) -> bool:
        """One piece of work toward the next messages: a slice of a big message's check, the frames parsed
        after it, or a slice of the bytes parsed. False when this call is to stop: nothing left, a big
        message's check begins or goes on (a slice per call), or the connection ends."""
        if self._checking():
            return self._checked(ready, fed)
        if self._later:
            events, self._later = self._later, []
            return not self._take(events, ready, fed) and not self._checking()
        if self._at >= len(self._pending):
            return False
        proto, at = self._proto, self._at
        self._at = at + SLICE
        proto.receive_data(self._pending[at:at + SLICE] if len(self._pending) > SLICE else self._pending)
        events = proto.events_received()
        self._frames += len(events)
        if self._take(events, ready, fed):
            return False
        if proto.parser_exc is not None:  # the parser failed the connection: its close frame is written
            fed.close = int(proto.close_sent.code) if proto.close_sent is not None else PROTOCOL_ERROR
            return False
        return not self._checking() and self._frames < FRAMES_PER_CALL

    def _checking(self) -> bool:
        """A big message is being checked (a call, not the attribute: mypy would keep the attribute's
        narrowing across the calls that set it, and compiled code trusts it)."""
        return self._check is not None

    def _checked(self, ready: list[str | bytes], fed: Fed) -> bool:
        """A slice of the big message's UTF-8 checked; True when it is taken whole (False: more to check,
        or it is not UTF-8 and the connection ends)."""
        check = self._check
        assert check is not None
        if not check.step():
            return False
        self._check = None
        if not check.valid:
            return not self._failing(fed, INVALID_DATA, "a text message that is not UTF-8")
        ready.append(check.data)
        return True

    def _take(self, frames: list[Event], ready: list[str | bytes], fed: Fed) -> bool:
        """Gather the frames' whole text messages into `ready`; True when the connection is to end (a
        close from the peer, a binary message, text that is not UTF-8). A big message stops the
        gathering: its check starts, the frames after it are kept for after it (`_later`)."""
        for i, frame in enumerate(frames):
            if not isinstance(frame, Frame):  # handshake events: the handshake was ours
                continue
            op = frame.opcode
            payload: BytesLike
            if op is Opcode.TEXT and frame.fin:  # a whole message in one frame: the usual
                payload = frame.data
            elif op is Opcode.TEXT:
                self._parts = bytearray(frame.data)
                continue
            elif op is Opcode.CONT and self._parts is not None:  # (a binary first frame ended the connection)
                self._parts += frame.data
                if not frame.fin:
                    continue
                payload, self._parts = bytes(self._parts), None
            elif op is Opcode.BINARY:
                return self._failing(fed, UNSUPPORTED_DATA, "binary messages are not supported")
            elif op is Opcode.CLOSE:
                got = self._proto.close_rcvd  # the protocol echoed it already
                fed.close = int(got.code) if got is not None and got.code != NO_STATUS else NORMAL
                return True
            else:  # pings are answered by the protocol (a pong among its writes); pongs need nothing
                continue
            if len(payload) > self._stepped:
                self._check = Utf8Check(bytes(payload), self._check_bytes)
                self._later = frames[i + 1:]
                return False
            try:
                ready.append(str(payload, "utf-8"))
            except UnicodeDecodeError:
                return self._failing(fed, INVALID_DATA, "a text message that is not UTF-8")
        return False

    def _failing(self, fed: Fed, code: int, reason: str) -> bool:
        self._proto.fail(code, reason)
        fed.close = code
        return True

    def text(self, data: str | bytes) -> bytes:
        """One text message (empty once the connection is closing); bytes are UTF-8 already."""
        if self._proto.state is not State.OPEN:
            return b""
        return text_frame(data.encode() if isinstance(data, str) else data)

    def release(self) -> None:
        """The connection ended: end the protocol's parser, a generator holding the protocol that holds
        it (a cycle the cyclic collector would otherwise free, once per connection); and its failure,
        whose traceback holds the parser's frames. Nothing is fed after."""
        proto = self._proto
        proto.state = State.CLOSED  # `feed`, `text` and `close` then do nothing
        proto.parser.close()
        proto.parser_exc = None
        self._pending, self._at = b"", 0
        self._check, self._later = None, []

    def close(self, code: int, reason: str = "") -> bytes:
        """The close frame (once: empty when one was sent or the peer's was answered)."""
        proto = self._proto
        if proto.state is not State.OPEN:
            return b""
        # a control frame carries 125 bytes at most: the code's 2, and the reason cut on a character
        proto.send_close(code, reason.encode()[:120].decode(errors="ignore"))
        return b"".join(proto.data_to_send())
