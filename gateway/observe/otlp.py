"""Finished spans as plain slotted records, and their OTLP/HTTP protobuf encoding in one pass.

The request path only fills `SpanRecord`s (a few attribute stores and a list append per event); the
export thread encodes a whole batch into one `ExportTraceServiceRequest` here. The encoding writes the
protobuf wire format directly (https://protobuf.dev/programming-guides/encoding/) for the few message
types a gateway span uses, from opentelemetry-proto's trace.proto / common.proto / resource.proto
(https://github.com/open-telemetry/opentelemetry-proto): building the generated message objects field
by field cost more CPU than the rest of a request's tracing. tests/unit/test_otlp_encode.py decodes
the output with opentelemetry-proto's own classes, for arbitrary spans.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

AttrValue = str | bool | int | float

KIND_SERVER, KIND_CLIENT = 2, 3  # Span.SpanKind
STATUS_ERROR = 2  # Status.StatusCode
# Span.flags (SpanFlags): the low byte is the W3C trace flags; bit 8 says whether the parent is remote
# is known, bit 9 that it is (as the OpenTelemetry SDK's exporter sets them)
FLAG_HAS_IS_REMOTE, FLAG_IS_REMOTE = 0x100, 0x200
_MASK64 = (1 << 64) - 1


class SpanRecord:
    """One span, as the request path writes it: ids as ints, times in ns since the epoch."""

    __slots__ = ("attributes", "end_ns", "error", "events", "flags", "kind", "name", "parent_id", "span_id",
                 "start_ns", "trace_id", "trace_state")

    def __init__(self, trace_id: int, span_id: int, parent_id: int, name: str, kind: int, start_ns: int,
                 attributes: dict[str, AttrValue], trace_state: str = "", flags: int = 1) -> None:
        self.trace_id, self.span_id, self.parent_id = trace_id, span_id, parent_id
        self.name, self.kind, self.start_ns, self.end_ns = name, kind, start_ns, 0
        self.attributes, self.trace_state, self.flags = attributes, trace_state, flags
        self.events: list[tuple[str, int]] = []
        self.error = False


def _varint(n: int) -> bytes:
    n &= _MASK64  # negative int64 values are ten bytes of two's complement
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = tuple(_varint(i) for i in range(1 << 14))  # every length a span's field can have, precomputed


def _len(n: int) -> bytes:
    return _SMALL[n] if n < 16384 else _varint(n)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2); `tag` is the field's key byte."""
    return bytes((tag,)) + _len(len(payload)) + payload


def _any_value(v: AttrValue) -> bytes:
    if isinstance(v, str):
        return _field(0x0A, v.encode())  # AnyValue.string_value = 1
    if isinstance(v, bool):
        return b"\x10\x01" if v else b"\x10\x00"  # bool_value = 2
    if isinstance(v, int):
        return b"\x18" + _varint(v)  # int_value = 3
    return b"\x21" + struct.pack("<d", v)  # double_value = 4


def _key_value(tag: bytes, key: str, v: AttrValue) -> bytes:
    kv = _field(0x0A, key.encode()) + _field(0x12, _any_value(v))
    return tag + _len(len(kv)) + kv


def key_values(tag: int, attributes: Mapping[str, AttrValue]) -> bytes:
    """Repeated KeyValue field `tag` (one length-delimited field per attribute)."""
    t = bytes((tag,))
    return b"".join(_key_value(t, k, v) for k, v in attributes.items())


# A span attribute encoded whole, by (key, value), one table per value type (True == 1 as a dict key):
# the values are names from config, fixed sets and small counts, so a few thousand entries serve every
# span. Per-request values (the request id, counts past _SMALL_INT) are not kept, and a table is emptied
# if it ever grows past its bound all the same.
_ENTRIES: dict[type, dict[tuple[str, AttrValue], bytes]] = {str: {}, int: {}, bool: {}}
_ENTRIES_MAX = 16384
_SMALL_INT = 4096
_UNCACHED = frozenset({"gateway.request_id"})
_EVENT_NAMES: dict[str, bytes] = {}


def _span_attributes(attributes: Mapping[str, AttrValue]) -> list[bytes]:
    parts = []
    for kv in attributes.items():
        k, v = kv
        entries = _ENTRIES.get(type(v))
        if entries is None or k in _UNCACHED or (type(v) is int and not 0 <= v < _SMALL_INT):
            parts.append(_key_value(b"\x4a", k, v))
            continue
        e = entries.get(kv)
        if e is None:
            if len(entries) >= _ENTRIES_MAX:
                entries.clear()
            e = entries[kv] = _key_value(b"\x4a", k, v)
        parts.append(e)
    return parts


def _event(name: str, at: int) -> bytes:
    """Span.events = 11: Event.time_unix_nano = 1 (fixed64), name = 2 (names are a fixed set)."""
    n = _EVENT_NAMES.get(name)
    if n is None:
        n = _field(0x12, name.encode())
        if len(_EVENT_NAMES) < 256:
            _EVENT_NAMES[name] = n
    ev = b"\x09" + struct.pack("<Q", at) + n
    return b"\x5a" + _len(len(ev)) + ev


def encode_span(s: SpanRecord) -> bytes:
    """One Span message (its fields in field-number order, as protobuf serializers write them)."""
    parts = [b"\x0a\x10", s.trace_id.to_bytes(16, "big"), b"\x12\x08", s.span_id.to_bytes(8, "big")]
    if s.trace_state:
        parts.append(_field(0x1A, s.trace_state.encode()))
    if s.parent_id:
        parts += (b"\x22\x08", s.parent_id.to_bytes(8, "big"))
    parts += (_field(0x2A, s.name.encode()), b"\x30", _SMALL[s.kind],
              b"\x39", struct.pack("<Q", s.start_ns), b"\x41", struct.pack("<Q", s.end_ns))
    parts += _span_attributes(s.attributes)
    parts += [_event(name, at) for name, at in s.events]
    if s.error:
        parts.append(b"\x7a\x02\x18" + _SMALL[STATUS_ERROR])  # status = 15: Status.code = 3
    parts += (b"\x85\x01", struct.pack("<I", s.flags))  # flags = 16, fixed32
    return b"".join(parts)


def resource_scope(resource: Mapping[str, AttrValue], scope_name: str, scope_version: str) -> tuple[bytes, bytes]:
    """The constant parts of every export: ResourceSpans.resource and ScopeSpans.scope, encoded."""
    scope = _field(0x0A, scope_name.encode()) + _field(0x12, scope_version.encode())
    return _field(0x0A, key_values(0x0A, resource)), _field(0x0A, scope)


def encode_request(head: tuple[bytes, bytes], spans: Iterable[SpanRecord]) -> bytes:
    """An ExportTraceServiceRequest: one ResourceSpans with one ScopeSpans holding `spans`."""
    resource, scope = head
    body = [scope]
    for s in spans:
        encoded = encode_span(s)
        body += (b"\x12", _len(len(encoded)), encoded)
    scope_spans = b"".join(body)
    resource_spans = resource + b"\x12" + _len(len(scope_spans)) + scope_spans
    return b"\x0a" + _len(len(resource_spans)) + resource_spans


__all__ = ["KIND_CLIENT", "KIND_SERVER", "SpanRecord", "encode_request", "resource_scope"]
