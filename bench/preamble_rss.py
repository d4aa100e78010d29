"""Memory of a hostile preamble: `python -m bench.preamble_rss [--baseline DIR] [--pings N] [--roles N]`.

An upstream that sends a long preamble and only then its first output token: N `ping` events on a native
Messages stream, N role-only chunks on a chat stream. The gateway holds the preamble until the first token
(CONTRACT §4.1), so without a bound its memory grew with N; now past `PREAMBLE_MAX_BYTES` or
`PREAMBLE_MAX_EVENTS` the attempt fails as malformed (retried or fallen back like any failure before the
first token, a 502 in the end). Each target is a fresh `gateway serve` process: after a warm-up request,
its peak is reset (`/proc/<pid>/clear_refs`, so start-up's peak is not counted) and its VmRSS read, the
hostile request is sent, and its peak (VmHWM) is read when the answer has ended.
The fake upstream runs in this process, on a thread of its own.

`--baseline DIR` runs the gateway of another checkout too (`git worktree add DIR <commit>`), in the same
run. Not a test: nothing here asserts. Figures go in bench/README.md ("Hostile preamble").
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import tempfile
import threading
import time
from pathlib import Path

import orjson

from bench.procstat import usage
from bench.servers import ROOT, free_port, start_gateway

PING = b"event: ping\ndata: {\"type\": \"ping\"}\n\n"
ROLE = b"data: " + orjson.dumps({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1,
                                 "model": "up-model", "choices": [{"index": 0, "delta": {"role": "assistant"},
                                                                   "finish_reason": None}]}) + b"\n\n"
PIECE = 64 * 1024
_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
FAT = 64 * 1024  # bytes of one fat role-only chunk: few events, many bytes


def _anthropic(event: str, obj: dict[str, object]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def messages_answer(pings: int) -> tuple[bytes, bytes]:
    start = _anthropic("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "up-model",
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}})
    end = b"".join([
        _anthropic("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}}),
        _anthropic("content_block_delta", {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": "finally"}}),
        _anthropic("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _anthropic("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                     "usage": {"output_tokens": 1}}),
        _anthropic("message_stop", {"type": "message_stop"})])
    return start + PING * pings, end


def chat_answer(roles: int, pad: int = 0) -> tuple[bytes, bytes]:
    role = ROLE if not pad else b"data: " + orjson.dumps({**orjson.loads(ROLE[6:]), "system_fingerprint": "x" * pad}) \
        + b"\n\n"
    token = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "up-model",
             "choices": [{"index": 0, "delta": {"content": "finally"}, "finish_reason": "stop"}]}
    return role * roles, b"data: " + orjson.dumps(token) + b"\n\ndata: [DONE]\n\n"


class HostileUpstream:
    """Answers every POST with the preamble of its path's scenario, then the token and the end."""

    def __init__(self, pings: int, roles: int, fat: int) -> None:
        self.answers = {"messages": messages_answer(pings), "chat": chat_answer(roles), "fat": chat_answer(fat, FAT)}
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self.ready.set()
        self.loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = await reader.readexactly(length)
                path = head.split(b" ")[1].decode()
                scenario = "messages" if path.endswith("/messages") else "fat" if b'"fat-model"' in body else "chat"
                pre, end = self.answers[scenario]
                if b'"bench_warm"' in body:  # the warm-up: the same answer without its long preamble
                    pre = pre[:pre.find(PING)] if path.endswith("/messages") else b""
                writer.write(_HEAD)
                for i in range(0, len(pre), PIECE):
                    piece = pre[i:i + PIECE]
                    writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    await writer.drain()
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(end), end))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()


def config(upstream_port: int) -> str:
    base = f"http://127.0.0.1:{upstream_port}"
    timeouts = "timeouts: {connect_s: 5, first_token_s: 600, idle_s: 600, total_s: 1200}"
    return "\n".join([
        "server: {host: 127.0.0.1, keepalive_after_s: 600}",
        "auth: {allow_unauthenticated: true}",
        f'providers: {{up: {{type: openai, base_url: "{base}/v1", api_key: x, {timeouts}}},',
        f'            anth: {{type: anthropic, base_url: "{base}", api_key: x, {timeouts}}}}}',
        "models: [{name: m, deployments: [{provider: up, model: up-model}]},",
        "         {name: fat, deployments: [{provider: up, model: fat-model}]},",
        "         {name: ma, deployments: [{provider: anth, model: up-model}]}]",
        "logging: {level: warning}",
    ]) + "\n"


def ask(port: int, api: str, warm: bool = False) -> tuple[int, int, float]:
    """(status, bytes of the answer, seconds)."""
    body: dict[str, object]
    path, body = ("/v1/messages", {"model": "ma", "max_tokens": 16, "stream": True,
                                   "messages": [{"role": "user", "content": "hi"}]}) if api == "messages" else \
        ("/v1/chat/completions", {"model": "fat" if api == "fat" else "m", "stream": True,
                                  "messages": [{"role": "user", "content": "hi"}]})
    if warm:
        body["bench_warm"] = True  # passed through to the upstream untouched
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1200)
    conn.request("POST", path, orjson.dumps(body), {"content-type": "application/json"})
    resp = conn.getresponse()
    size = len(resp.read())
    conn.close()
    return resp.status, size, time.monotonic() - t0


def measure(name: str, source: Path, cfg: Path, api: str, workdir: Path) -> str:
    gw = start_gateway(name, workdir, cfg, source=source)
    try:
        for warm_api in ("chat", "messages"):  # warm-up: imports, pools; the peak below counts from here
            ask(gw.port, warm_api, warm=True)
        Path(f"/proc/{gw.pid}/clear_refs").write_text("5")  # VmHWM from now on (Linux >= 4.0; start-up peaks)
        before = usage(gw.pid)
        status, size, seconds = ask(gw.port, api)
        after = usage(gw.pid)
    finally:
        gw.stop()
    return (f"| {name} | {before.rss_kib / 1024:.0f} MiB | {after.hwm_kib / 1024:.0f} MiB | "
            f"{(after.hwm_kib - before.rss_kib) / 1024:+.0f} MiB | {status}, {size / 1e6:.1f} MB | {seconds:.1f} s |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pings", type=int, default=1_000_000)
    ap.add_argument("--roles", type=int, default=300_000)
    ap.add_argument("--fat", type=int, default=400, help="role-only chunks of 64 KiB each")
    ap.add_argument("--baseline", type=Path, help="another checkout's root, measured in the same run")
    args = ap.parse_args()
    up = HostileUpstream(args.pings, args.roles, args.fat)
    targets = [("gateway", ROOT)] + ([("gateway-base", args.baseline.resolve())] if args.baseline else [])
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        cfg = workdir / "gateway.yaml"
        cfg.write_text(config(up.port))
        for api, label in (("messages", f"Messages, {args.pings:,} pings"),
                           ("chat", f"chat, {args.roles:,} role-only chunks"),
                           ("fat", f"chat, {args.fat:,} role-only chunks of 64 KiB")):
            print(f"\n{label} before the first token\n")
            print("| target | RSS before | peak | grew | answer | time |\n| --- | --- | --- | --- | --- | --- |")
            for name, source in targets:
                print(measure(name, source, cfg, api, workdir), flush=True)


if __name__ == "__main__":
    main()
