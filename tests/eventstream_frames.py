"""Writing AWS event-stream frames, for the scripted Bedrock upstream, the tests and the benchmark: the
gateway only reads them (`gateway.core.eventstream`). Cross-checked against botocore's own reader in
tests/unit/test_eventstream.py."""

from __future__ import annotations

import base64
import binascii
import struct
import uuid
from typing import Any

import orjson

PRELUDE_BYTES = 12
def _encode_header(name: str, value: Any) -> bytes:
    raw = name.encode()
    if isinstance(value, bool):
        return bytes([len(raw)]) + raw + bytes([0 if value else 1])
    if isinstance(value, str):
        data = value.encode()
        return bytes([len(raw)]) + raw + b"\x07" + struct.pack(">H", len(data)) + data
    if isinstance(value, bytes):
        return bytes([len(raw)]) + raw + b"\x06" + struct.pack(">H", len(value)) + value
    if isinstance(value, uuid.UUID):
        return bytes([len(raw)]) + raw + b"\x09" + value.bytes
    return bytes([len(raw)]) + raw + b"\x05" + struct.pack(">q", value)


def encode_message(headers: dict[str, Any], payload: bytes) -> bytes:
    """One frame (bool, str, bytes, UUID and int (as long) header values). The gateway only reads
    frames; this writes the ones its tests and benchmarks replay."""
    head = b"".join(_encode_header(k, v) for k, v in headers.items())
    total = PRELUDE_BYTES + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack(">I", binascii.crc32(body))


def event(event_type: str, payload: Any) -> bytes:
    """A Bedrock `event` frame (ConverseStream's events), its payload JSON."""
    return encode_message({":event-type": event_type, ":content-type": "application/json",
                           ":message-type": "event"}, orjson.dumps(payload))


def chunk(inner: Any) -> bytes:
    """An InvokeModelWithResponseStream `chunk`: the model's own event, base64 inside `{"bytes": ...}`."""
    raw = inner if isinstance(inner, bytes) else orjson.dumps(inner)
    return event("chunk", {"bytes": base64.b64encode(raw).decode()})


def exception(name: str, message: str = "try again") -> bytes:
    return encode_message({":exception-type": name, ":content-type": "application/json",
                           ":message-type": "exception"}, orjson.dumps({"message": message}))
