"""AWS `application/vnd.amazon.eventstream` frames, sans I/O, and their transcoding to SSE (docs/cloud-providers.md).

A frame (message) is: a 12-byte prelude (total length, headers length, both big-endian uint32, then
the CRC32 of those 8 bytes), the headers, the payload, and the CRC32 of everything before it. A header is
a 1-byte name length, the name (UTF-8), a 1-byte value type and the value: 0/1 bool true/false, 2 byte,
3 short, 4 int, 5 long (signed, big-endian), 6 byte array and 7 string (2-byte length first),
8 timestamp (ms since the epoch, int64), 9 UUID (16 bytes, read as bytes).

`EventStreamDecoder.feed` takes bytes at any split and returns the frames they complete. The prelude's
CRC is checked as soon as its 12 bytes are in, so a corrupt length never makes us wait for (or buffer)
bytes that were never meant to come; a frame over `MAX_FRAME_BYTES` fails before it is buffered.

Bedrock Runtime's two stream shapes are transcoded into the SSE the gateway's parsers read
(`core.framing.Transcoder`), by one transcoder (a provider serves both kinds of model):
- InvokeModelWithResponseStream: events `chunk` whose payload is `{"bytes": base64(<event JSON>)}`, the
  model's own stream (for Claude, Anthropic Messages events) -> `event: <type>` + the decoded JSON;
- ConverseStream: events `messageStart`, `contentBlockStart/Delta/Stop`, `messageStop`, `metadata`
  -> `event: <event type>` + the payload JSON.
An `exception` frame (`:exception-type`) or an `error` frame (`:error-code`) becomes one Anthropic-shaped
`error` event (`{"type": "error", "error": {"type", "message"}}`), its type from `ERROR_TYPES`, so the
parsers classify it into the retry rules like Anthropic's own in-band errors (throttling, unavailable,
internal and stream errors retry or fall back before the first token; validation passes through;
access denied moves on; quota is quota). Unknown message types are skipped, unknown events pass by
their name to the parser, which skips what it does not know (forward compatibility, as the AWS SDKs).
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass

import orjson

from gateway.core.events import Failure, FailureKind, StreamFailed
from gateway.core.sse import encode_event

PRELUDE_BYTES = 12
MIN_FRAME_BYTES = 16  # a prelude and a message CRC: no headers, no payload
MAX_FRAME_BYTES = 16 * 1024 * 1024  # docs/cloud-providers.md: a frame over 16 MiB is a malformed answer
MAX_HEADERS_BYTES = 128 * 1024  # the service's own limit on a frame's headers
HEADER_CACHE_ENTRIES = 16  # distinct header blocks remembered per stream (see `EventStreamDecoder`)

HeaderValue = bool | int | bytes | str  # a UUID is its 16 bytes (as botocore reads it)

# Bedrock exception name, lower-cased and without its `Exception` suffix (HTTP errors spell it
# `ThrottlingException`, frames `throttlingException`, AWS's common errors `IncompleteSignature` or
# `IncompleteSignatureException`) -> the Anthropic error type that carries its meaning into the retry rules
ERROR_TYPES: dict[str, str] = {
    "throttling": "rate_limit_error",
    "servicequotaexceeded": "billing_error",
    "serviceunavailable": "overloaded_error",
    "modelnotready": "overloaded_error",
    "internalserver": "api_error",
    "internalfailure": "api_error",
    "modelstreamerror": "api_error",
    "modelerror": "api_error",
    "modeltimeout": "timeout_error",
    "validation": "invalid_request_error",
    "resourcenotfound": "not_found_error",
    "accessdenied": "permission_error",
    "unrecognizedclient": "authentication_error",
    "invalidsignature": "authentication_error",
    "expiredtoken": "authentication_error",
    # the errors every AWS service shares that name our signature, credentials or clock, never the
    # client's request, though AWS answers several of them with HTTP 400 (docs/cloud-providers.md)
    "incompletesignature": "authentication_error",
    "invalidclienttokenid": "authentication_error",
    "missingauthenticationtoken": "authentication_error",
    "requestexpired": "authentication_error",
    "notauthorized": "permission_error",
    "optinrequired": "permission_error",
}


def exception_type(exception: str) -> str | None:
    """The Anthropic error type for a Bedrock exception name (`ThrottlingException`, or the
    `x-amzn-ErrorType` form `ThrottlingException:http://...`); None for one we don't know."""
    name = exception.partition(":")[0].strip().lower()
    return ERROR_TYPES.get(name.removesuffix("exception"))


def error_type(exception: str) -> str:
    """`exception_type`, `api_error` for one we don't know (an in-stream exception: retried before the first
    token)."""
    return exception_type(exception) or "api_error"


@dataclass(frozen=True, slots=True)
class EventMessage:
    headers: dict[str, HeaderValue]
    payload: bytes

    def __init__(self, headers: dict[str, HeaderValue], payload: bytes) -> None:
        object.__setattr__(self, "headers", headers)  # frozen, compiled (docs/compiled.md)
        object.__setattr__(self, "payload", payload)

    def header(self, name: str) -> str:
        value = self.headers.get(name)
        return value if isinstance(value, str) else ""


def _malformed(why: str) -> StreamFailed:
    return StreamFailed(Failure(FailureKind.MALFORMED, f"upstream event stream: {why}"))


class EventStreamDecoder:
    """Bytes in at any split, whole frames out. Linear in its input: a partial frame is kept in one
    buffer that only grows at its end; nothing buffered is scanned twice."""

    __slots__ = ("_buf", "_headers", "_need", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._need = 0  # the total length of the frame being read, once its prelude checked out
        self.max_frame_bytes = max_frame_bytes
        # headers already read, by their bytes: a stream repeats the same few (`:event-type: chunk`, ...),
        # and reading them was most of a frame's cost; bounded, and never mutated by a reader
        self._headers: dict[bytes, dict[str, HeaderValue]] = {}

    @property
    def pending(self) -> int:
        """Bytes of a frame not yet complete."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[EventMessage]:
        self._buf += data
        out: list[EventMessage] = []
        start = 0
        buf = self._buf
        while True:
            if not self._need:
                if len(buf) - start < PRELUDE_BYTES:
                    break
                self._need = self._prelude(buf, start)
            if len(buf) - start < self._need:
                break
            out.append(self._message(bytes(buf[start:start + self._need])))
            start += self._need
            self._need = 0
        if start:
            del buf[:start]
        return out

    def _prelude(self, buf: bytearray, start: int) -> int:
        total, headers_len, crc = struct.unpack_from(">III", buf, start)
        if binascii.crc32(buf[start:start + 8]) != crc:
            raise _malformed("prelude checksum mismatch")
        if total > self.max_frame_bytes:
            raise _malformed(f"a frame of {total} bytes is over the {self.max_frame_bytes}-byte limit")
        if total < MIN_FRAME_BYTES or headers_len > total - MIN_FRAME_BYTES or headers_len > MAX_HEADERS_BYTES:
            raise _malformed("frame lengths are inconsistent")
        return int(total)

    def end(self) -> None:
        """The bytes have ended: a frame cut in the middle is a malformed answer."""
        if self._buf:
            raise _malformed("the stream ended inside a frame")

    def _message(self, frame: bytes) -> EventMessage:
        (crc,) = struct.unpack_from(">I", frame, len(frame) - 4)
        if binascii.crc32(memoryview(frame)[:-4]) != crc:
            raise _malformed("message checksum mismatch")
        (headers_len,) = struct.unpack_from(">I", frame, 4)
        end = PRELUDE_BYTES + headers_len
        raw = frame[PRELUDE_BYTES:end]
        headers = self._headers.get(raw)
        if headers is None:
            headers = _headers(frame, PRELUDE_BYTES, end)
            if len(self._headers) < HEADER_CACHE_ENTRIES and headers_len <= 256:
                self._headers[raw] = headers
        return EventMessage(headers, frame[end:-4])


_FIXED = {2: ">b", 3: ">h", 4: ">i", 5: ">q", 8: ">q"}  # value type -> its struct format


def _headers(frame: bytes, pos: int, end: int) -> dict[str, HeaderValue]:
    headers: dict[str, HeaderValue] = {}
    try:
        while pos < end:
            name_len = frame[pos]
            name = frame[pos + 1:pos + 1 + name_len].decode()
            pos += 1 + name_len
            vtype = frame[pos]
            pos += 1
            value, pos = _value(frame, pos, vtype)
            if pos > end:
                raise _malformed("a header runs past the headers")
            headers[name] = value
    except (IndexError, UnicodeDecodeError, struct.error):
        raise _malformed("unreadable headers") from None
    return headers


def _value(frame: bytes, pos: int, vtype: int) -> tuple[HeaderValue, int]:
    if vtype in (0, 1):
        return vtype == 0, pos
    fmt = _FIXED.get(vtype)
    if fmt is not None:
        size = struct.calcsize(fmt)
        return int(struct.unpack_from(fmt, frame, pos)[0]), pos + size
    if vtype in (6, 7):
        (length,) = struct.unpack_from(">H", frame, pos)
        raw = frame[pos + 2:pos + 2 + length]
        if len(raw) != length:
            raise IndexError
        return (raw.decode() if vtype == 7 else raw), pos + 2 + length
    if vtype == 9:
        raw = frame[pos:pos + 16]
        if len(raw) != 16:
            raise IndexError
        return raw, pos + 16
    raise _malformed(f"unknown header value type {vtype}")


def error_event(etype: str, message: str) -> bytes:
    """An Anthropic-shaped in-band error as an SSE event."""
    data = orjson.dumps({"type": "error", "error": {"type": etype, "message": message}})
    return encode_event("error", data)


def _exception_event(msg: EventMessage) -> bytes:
    """An `exception` frame: its name in `:exception-type`, its payload `{"message": ...}`."""
    name = msg.header(":exception-type") or "exception"
    message = _payload_message(msg.payload) or name
    return error_event(error_type(name), f"{name}: {message}")


def _error_frame_event(msg: EventMessage) -> bytes:
    """An `error` frame: `:error-code` and `:error-message` headers."""
    code = msg.header(":error-code") or "error"
    return error_event(error_type(code), f"{code}: {msg.header(':error-message') or code}")


def _payload_message(payload: bytes) -> str:
    try:
        obj = orjson.loads(payload) if payload else None
    except orjson.JSONDecodeError:
        return ""
    message = obj.get("message", obj.get("Message")) if isinstance(obj, dict) else None
    return message if isinstance(message, str) else ""


class BedrockStreamTranscoder:
    """Frames -> SSE bytes, for both of Bedrock's stream shapes (a translator serves Claude and Converse
    models alike, so one transcoder reads either): a `chunk` event is InvokeModelWithResponseStream's,
    any other event name ConverseStream's."""

    __slots__ = ("decoder",)

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.decoder = EventStreamDecoder(max_frame_bytes)

    def feed(self, data: bytes) -> bytes:
        out = b""
        for msg in self.decoder.feed(data):
            mtype = msg.header(":message-type")
            if mtype == "event":
                out += _event(msg)
            elif mtype == "exception":
                out += _exception_event(msg)
            elif mtype == "error":
                out += _error_frame_event(msg)
        return out

    def end(self) -> bytes:
        self.decoder.end()
        return b""


def _event(msg: EventMessage) -> bytes:
    name = msg.header(":event-type")
    if name == "chunk":
        return _chunk(msg.payload)
    return encode_event(name, msg.payload) if name else b""


def _chunk(payload: bytes) -> bytes:
    """InvokeModelWithResponseStream: `{"bytes": base64(<one of the model's own stream events>)}`."""
    try:
        inner = base64.b64decode(orjson.loads(payload)["bytes"], validate=True)
        etype = _event_type(inner)
    except (orjson.JSONDecodeError, binascii.Error, KeyError, TypeError, AttributeError, ValueError):
        raise _malformed("a chunk that is not base64 of a JSON object") from None
    return encode_event(etype, inner)


_TYPE_PREFIX = b'{"type":"'


def _event_type(inner: bytes) -> str:
    """The event's `type`: read from its first bytes when it leads compactly (Anthropic's always do),
    else from the parsed object; the parser reads the JSON itself, so this avoids a second full parse."""
    if inner.startswith(_TYPE_PREFIX):
        end = inner.find(b'"', len(_TYPE_PREFIX))
        name = inner[len(_TYPE_PREFIX):end]
        if end > 0 and name.find(b"\\") < 0:  # not `in`: see `core.sse`
            return name.decode()
    obj = orjson.loads(inner)
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    etype = obj.get("type")
    return etype if isinstance(etype, str) else "message"
