"""A non-stream chat request to a deployment that only streams (it rejected `stream: false`, a 400 that
names `stream`; learned per deployment, CONTRACT §4.6): streamed, and assembled into the body the client
asked for. Nothing reaches the client before the whole answer, so a failure anywhere in the stream is
still an attempt's failure, retried or fallen back like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config.types import Deployment
from gateway.core.chat.filter import ChatOutputFilter
from gateway.core.chat.stream import ChatStream
from gateway.core.events import Failure, FailureKind, StreamFailed
from gateway.pipeline.attempt_io import raise_for_status
from gateway.pipeline.runtime import Runtime
from gateway.providers.base import ChatTranslator, ParsedBody
from gateway.upstream import UpstreamError


async def fetch_streamed(rt: Runtime, d: Deployment, tr: ChatTranslator, body: dict[str, Any],
                         client_headers: Mapping[str, str]) -> ParsedBody:
    req = tr.chat_request(body, d.model, stream=True, send_stream_options=True)
    resp = await rt.upstream.open(rt.provider(d), req, d.label, client_headers)
    meta: dict[str, Any] = {}
    try:
        await raise_for_status(resp, tr.classify_http_error, d.label)
        stream = ChatStream(tr.stream_parser(), d.label)
        try:
            while not stream.done:
                data = await resp.next_chunk()
                if not data:
                    stream.end_of_input()
                    break
                if stream.filt is None:
                    stream.feed(data)
                    if stream.committable:
                        meta = next((ch.obj for ch in stream.preamble if ch.obj), {})
                        stream.commit(ChatOutputFilter(None, False))  # what it returns is for no client
                else:
                    stream.feed(data)
        except StreamFailed as exc:
            raise UpstreamError(exc.failure) from None
    finally:
        resp.close()
    if stream.error is not None:
        raise UpstreamError(stream.error)
    if stream.filt is None or stream.ended_early:
        raise UpstreamError(Failure(FailureKind.EARLY_EOF, f"{d.label}: stream ended before the answer did"))
    asm = stream.assembler
    obj = asm.completion(id=str(meta.get("id", "")), model=str(meta.get("model", "")),
                         created=int(meta.get("created", 0) or 0))
    return ParsedBody(obj, [asm.usage] if asm.usage is not None else [])
