"""A streamed Messages request up to its first output token: one attempt of the attempt loop.

Everything before the first token — `message_start`, `ping`, `content_block_start`, unknown events — is
the preamble, held by the stream core (`core.messages.stream.MessagesStream`) and thrown away with the
attempt if it fails, so a 529, a 5xx or an in-band `overloaded_error` before any text is retried or falls
back invisibly and the client sees one lifecycle (CONTRACT §4.1-§4.2). After it, the relay
(`pipeline.messages_relay`) ends the stream with one `event: error` on a failure (§4.3).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from gateway.config.types import Deployment
from gateway.core.messages.stream import MessagesStream
from gateway.observe.context import RequestContext
from gateway.pipeline.attempt_io import FirstTokenDeadline, Opened, raise_for_status, raise_inband
from gateway.pipeline.first_token import until_first_token
from gateway.pipeline.runtime import Runtime
from gateway.pipeline.timeouts import LoopTimeout
from gateway.providers.messages_anthropic import MessagesTranslator

OpenedMessages = Opened[MessagesStream]


async def open_messages(rt: Runtime, ctx: RequestContext, d: Deployment,
                        client_headers: Mapping[str, str]) -> OpenedMessages:
    """One attempt: open the stream and read until the first output token, under `first_token_s`."""
    provider, tr = rt.provider(d), rt.messages_translator(d)
    assert tr is not None, "the handler only routes to deployments that serve the Messages API"
    t_sent = time.perf_counter()
    with FirstTokenDeadline(d) as deadline:
        async with LoopTimeout(rt.upstream.loop, provider.timeouts.first_token_s):
            req = tr.messages_request(ctx.body, d.model, stream=True, client_headers=client_headers,
                                      send_stream_options=d.provider not in rt.learned.no_stream_options)
            resp = await rt.upstream.open(provider, req, d.label)
            opened = deadline.track(Opened(d, resp, MessagesStream(tr.messages_stream_parser(), d.label), t_sent))
            await raise_for_status(resp, tr.classify_http_error, d.label)
            if not resp.is_event_stream:  # a server that ignores `stream`: its body, re-emitted
                _replay(opened, tr, await resp.read_body())
                return opened
            await until_first_token(resp, opened.stream, d.label)
            opened.t_first = time.perf_counter()
            return opened


def _replay(opened: OpenedMessages, tr: MessagesTranslator, body: bytes) -> None:
    """A whole answer as a body: checked like one, then held as the stream it would have been."""
    parsed = tr.parse_messages_body(body)
    raise_inband(parsed.events)
    opened.stream.hold_message(parsed.obj)
    opened.t_first = time.perf_counter()
