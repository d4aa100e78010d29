"""The OTLP protobuf encoder (observe/otlp.py) against opentelemetry-proto's own decoder, for arbitrary
spans; and the sampler's decisions (observe/tracing.py)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from gateway.observe.otlp import KIND_CLIENT, KIND_SERVER, SpanRecord, encode_request, resource_scope
from gateway.observe.tracing import Sampler

_text = st.text(max_size=40)
_value = st.one_of(_text, st.booleans(), st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
                   st.floats(allow_nan=False))
_attrs = st.dictionaries(st.sampled_from(["gateway.request_id", "gateway.model", "k", "gen_ai.usage.input_tokens",
                                          "x" * 200]) | _text, _value, max_size=12)
_u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


@st.composite
def spans(draw: st.DrawFn) -> SpanRecord:
    s = SpanRecord(draw(st.integers(min_value=1, max_value=(1 << 128) - 1)), draw(_u64.filter(bool)),
                   draw(_u64), draw(st.text(max_size=300)), draw(st.sampled_from([KIND_SERVER, KIND_CLIENT])),
                   draw(_u64), draw(_attrs), draw(_text), draw(st.integers(min_value=0, max_value=(1 << 32) - 1)))
    s.end_ns = draw(_u64)
    s.events = draw(st.lists(st.tuples(st.sampled_from(["first_token", "commit"]) | _text, _u64), max_size=4))
    s.error = draw(st.booleans())
    return s


def _plain(v: AnyValue) -> object:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@settings(max_examples=300, deadline=None)
@given(st.lists(spans(), max_size=6), st.dictionaries(_text, _text, max_size=4))
def test_what_is_encoded_decodes_to_the_same_spans_with_opentelemetry_proto(records: list[SpanRecord],
                                                                           resource: dict[str, str]) -> None:
    body = encode_request(resource_scope(resource, "llm-gateway", "1.2.3"), records)
    for _ in range(2):  # a second encoding (from the attribute tables) is the same bytes
        assert encode_request(resource_scope(resource, "llm-gateway", "1.2.3"), records) == body
    req = ExportTraceServiceRequest.FromString(body)
    (rs,) = req.resource_spans
    assert {a.key: _plain(a.value) for a in rs.resource.attributes} == resource
    (ss,) = rs.scope_spans
    assert (ss.scope.name, ss.scope.version) == ("llm-gateway", "1.2.3")
    assert len(ss.spans) == len(records)
    for got, want in zip(ss.spans, records, strict=True):
        assert int.from_bytes(got.trace_id, "big") == want.trace_id and len(got.trace_id) == 16
        assert int.from_bytes(got.span_id, "big") == want.span_id and len(got.span_id) == 8
        assert got.parent_span_id == (want.parent_id.to_bytes(8, "big") if want.parent_id else b"")
        assert (got.name, got.kind, got.trace_state) == (want.name, want.kind, want.trace_state)
        assert (got.start_time_unix_nano, got.end_time_unix_nano) == (want.start_ns, want.end_ns)
        assert got.flags == want.flags
        decoded = {a.key: _plain(a.value) for a in got.attributes}
        assert decoded.keys() == want.attributes.keys()
        for k, v in want.attributes.items():
            assert type(decoded[k]) is type(v) and (decoded[k] == v or struct.pack("<d", v) == struct.pack(
                "<d", decoded[k])), k
        assert [(e.name, e.time_unix_nano) for e in got.events] == want.events
        assert got.status.code == (2 if want.error else 0)


def test_the_ratio_sampler_decides_on_the_trace_ids_low_64_bits_and_parent_based_follows_the_client() -> None:
    half = Sampler("traceidratio", 0.5)
    assert half.sampled((7 << 64) | (1 << 63) - 1, None) and not half.sampled(1 << 63, None)
    assert not half.sampled(1 << 63, True)  # not parent-based: the client's flag does not decide
    parent = Sampler("parentbased_traceidratio", 0.0)
    assert parent.sampled(1, True) and not parent.sampled(1, False) and not parent.sampled(1, None)
    assert Sampler("always_on", 0.0).sampled((1 << 128) - 1, None)
    assert not Sampler("parentbased_always_off", 1.0).sampled(1, None)
    assert Sampler("traceidratio", 1.0).sampled((1 << 64) - 1, None)
