"""A fast fake OpenAI upstream: `POST .../chat/completions` answers with a paced chat stream (and
`POST .../v1/messages`, as Anthropic, with the same answer as a Messages stream).

A raw asyncio protocol on uvloop (no framework), with every answer's bytes pre-encoded and cached, so it
costs a few microseconds per chunk and is never the bottleneck of a benchmark. The stream's shape comes
from the request body's extra field `bench` (the gateway passes unknown fields through untouched):

    {"bench": {"ttft_ms": 50, "chunks": 20, "chunk_chars": 8, "gap_ms": 5, "seed": 7, "tail_ms": 0,
               "words": false, "nospace": false}}

Headers go out at once; the role chunk and the first content delta after `ttft_ms`; every further delta
`gap_ms` later (with `gap_ms: 0` the rest goes out in one write); finish, usage (if
`stream_options.include_usage`) and `[DONE]` ride with the last delta; the chunked terminator too, or
`tail_ms` later in a write of its own. HTTP/1.1 keep-alive, chunked transfer encoding, as OpenAI
answers. `GET /healthz` answers 200. With `--jwks FILE`, `GET /jwks` answers that file (a JSON Web Key
Set: an IdP's keys for the gateway's `auth.jwt.jwks_url`, bench/variants.py).

Faults on demand (the "failures starting mid-run" scenario): under the path prefix `/fail/` the same
answers are served until `POST /faults/arm`; from then on until `POST /faults/disarm` every request there
gets a 503 with an OpenAI error object, as an overloaded provider answers.

    python -m bench.upstream --port 9000
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from typing import Any, cast

import orjson

from bench.textgen import messages_events, stream_events

_SSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n")
_MAX_HEAD = 64 * 1024
_END = b"0\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Shape:
    ttft_ms: float = 0.0
    chunks: int = 20
    chunk_chars: int = 8
    gap_ms: float = 0.0
    seed: int = 0
    tail_ms: float = 0.0  # >0: the chunked terminator goes out this long after `[DONE]`, on its own
    words: bool = False  # one word per delta, with its leading space (as tokenizers split)
    nospace: bool = False  # the words glued together: no whitespace at all

    @classmethod
    def from_body(cls, body: Any) -> Shape:
        spec = body.get("bench") if isinstance(body, dict) else None
        if not isinstance(spec, dict):
            return cls()
        return cls(float(spec.get("ttft_ms", 0)), max(1, int(spec.get("chunks", 20))),
                   max(1, int(spec.get("chunk_chars", 8))), float(spec.get("gap_ms", 0)), int(spec.get("seed", 0)),
                   float(spec.get("tail_ms", 0)), spec.get("words") is True, spec.get("nospace") is True)


def _http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


FAIL_PREFIX = "/fail/"
_FAULTS = {"armed": False}
_JWKS = {"body": b""}  # `--jwks`: the key set `GET /jwks` serves
_OVERLOADED = orjson.dumps({"error": {"message": "The server is overloaded", "type": "server_error",
                                      "param": None, "code": None}})


def _plain(status: str, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n"
            .encode() + body)


def answer_steps(body: Any, messages: bool = False) -> list[tuple[float, bytes]]:
    """The answer after the headers: (seconds to wait, then bytes to write) per step."""
    shape = Shape.from_body(body)
    opts = body.get("stream_options") if isinstance(body, dict) else None
    usage = isinstance(opts, dict) and opts.get("include_usage") is True
    model = body.get("model") if isinstance(body, dict) and isinstance(body.get("model"), str) else "bench"
    if messages:
        events = messages_events(shape.seed, shape.chunks, shape.chunk_chars, model, shape.words, shape.nospace)
    else:
        events = stream_events(shape.seed, shape.chunks, shape.chunk_chars, model, usage, shape.words,
                               shape.nospace)
    gap, frames = shape.gap_ms / 1000, [_http_chunk(e) for e in events]
    if gap <= 0:
        frames = [b"".join(frames)]
    steps = [(shape.ttft_ms / 1000 if i == 0 else gap, f) for i, f in enumerate(frames)]
    if shape.tail_ms > 0:
        steps.append((shape.tail_ms / 1000, _END))  # as servers that write the terminator on its own
    else:
        steps[-1] = (steps[-1][0], steps[-1][1] + _END)
    return steps


class UpstreamProtocol(asyncio.Protocol):
    """One connection: parse requests (keep-alive, one at a time), play each answer with call_later."""

    def __init__(self) -> None:
        self._buf = b""
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if not self._busy:
            self._next_request()

    def _next_request(self) -> None:
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > _MAX_HEAD and self._transport is not None:
                self._transport.close()
            return
        head = self._buf[:end].decode("latin-1").split("\r\n")
        length = 0
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if len(self._buf) < end + 4 + length:
            return
        body, self._buf = self._buf[end + 4:end + 4 + length], self._buf[end + 4 + length:]
        method, _, rest = head[0].partition(" ")
        self._dispatch(method, rest.partition(" ")[0], body)

    def _dispatch(self, method: str, path: str, body: bytes) -> None:
        t = self._transport
        if t is None:
            return
        if method == "GET" and path.endswith("/healthz"):
            t.write(_plain("200 OK", b"ok"))
        elif method == "GET" and path == "/jwks" and _JWKS["body"]:
            t.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                    + str(len(_JWKS["body"])).encode() + b"\r\n\r\n" + _JWKS["body"])
        elif method == "POST" and path in ("/faults/arm", "/faults/disarm"):
            _FAULTS["armed"] = path == "/faults/arm"
            t.write(_plain("200 OK", b"ok"))
        elif _FAULTS["armed"] and path.startswith(FAIL_PREFIX):
            t.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: "
                    + str(len(_OVERLOADED)).encode() + b"\r\n\r\n" + _OVERLOADED)
        elif method == "POST" and path.endswith(("/chat/completions", "/messages")):
            try:
                parsed = orjson.loads(body)
            except orjson.JSONDecodeError:
                t.write(_plain("400 Bad Request", b"body is not JSON"))
                return self._done()
            steps = answer_steps(parsed, messages=not path.endswith("/chat/completions"))
            t.write(_SSE_HEAD)
            self._busy = True
            self._timer = asyncio.get_running_loop().call_later(steps[0][0], self._play, steps, 0)
            return None
        else:
            t.write(_plain("404 Not Found", b"no such route"))
        return self._done()

    def _play(self, steps: list[tuple[float, bytes]], i: int) -> None:
        self._timer = None
        if self._transport is None:
            return
        self._transport.write(steps[i][1])
        if i + 1 < len(steps):
            self._timer = asyncio.get_running_loop().call_later(steps[i + 1][0], self._play, steps, i + 1)
        else:
            self._busy = False
            self._done()

    def _done(self) -> None:
        if self._buf:
            self._next_request()


async def start_upstream(host: str = "127.0.0.1", port: int = 0) -> asyncio.Server:
    """Serve on the running loop; the bound port is `server.sockets[0].getsockname()[1]`."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(UpstreamProtocol, host, port, backlog=8192, reuse_address=True)


async def _serve(host: str, port: int) -> None:
    server = await start_upstream(host, port)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9000)
    p.add_argument("--jwks", help="a JSON Web Key Set file to serve at GET /jwks")
    args = p.parse_args()
    if args.jwks:
        with open(args.jwks, "rb") as f:
            _JWKS["body"] = f.read()
    try:
        import uvloop
    except ImportError:  # the gateway depends on uvloop; this fallback only keeps the tool usable
        asyncio.run(_serve(args.host, args.port))
    else:
        uvloop.run(_serve(args.host, args.port))


if __name__ == "__main__":
    main()
