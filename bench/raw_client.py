"""The independent clients of `bench.ttft_probe` (issue #34, point 4): they share no code with
`bench/loadgen.py` (no asyncio, no aiohttp): blocking sockets, a thread per connection, or a process per
connection (`Habits.procs`).

- `raw`: a raw-socket reader with its own chunked-transfer and SSE decoding. TTFT = from just before the
  request's first write to the arrival of the read that completes the first event carrying content
  (`delta.content` not empty); it also notes the first response byte. Its habits (`Habits`) are what an
  independent load generator may do differently: a connection per request, Nagle's algorithm left on,
  the head and body in two writes (as h11/httpcore and many clients write them).
- `sdk`: the official `openai` SDK (sync client, streaming): from just before `create()` to the first
  chunk with content, as a user of the SDK would time it.
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized

TTFT_MS, CHUNKS, CHUNK_CHARS, GAP_MS, CONCURRENCY = 50.0, 20, 8, 5.0, 8  # S1 (bench/scenarios.py)

@dataclass(frozen=True, slots=True)
class Habits:
    """How a client talks HTTP: what an independent generator may do differently from ours."""

    new_conn: bool = False  # a connection per request (else one keep-alive connection per worker)
    nodelay: bool = True  # TCP_NODELAY on the client's socket
    split: bool = False  # the head and the body in two writes
    # each connection in its own process: no interpreter lock shared between connections, so a client
    # thread that holds it while the OS runs another process cannot delay another connection's reads
    procs: bool = False
    # a pause after each request: with a pause of a second or more, a worker's requests each fall in a
    # second of their own, as on a gateway serving a few requests a second (what is done once a second,
    # every request of such a gateway pays)
    pause_s: float = 0.0


@dataclass(slots=True)
class Sample:
    ttft_s: float  # request's first write -> the read completing the first content event
    ttfb_s: float  # request's first write -> the first response byte


@dataclass(slots=True)
class Samples:
    ttft_ms: list[float] = field(default_factory=list)
    ttfb_ms: list[float] = field(default_factory=list)
    errors: int = 0
    cpu_s: float = 0.0  # the worker processes' CPU (`Habits.procs`; threads are the caller's own CPU)


def request_parts(host: str, port: int, path: str, seed: int, keep_alive: bool) -> tuple[bytes, bytes]:
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "benchmark"}],
                       "bench": {"ttft_ms": TTFT_MS, "chunks": CHUNKS, "chunk_chars": CHUNK_CHARS,
                                 "gap_ms": GAP_MS, "seed": seed}}).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n").encode()
    return head, body


class ChunkedSSE:
    """Just enough of an HTTP/1.1 response for these streams: the head, then chunked framing, then SSE
    events; `feed` returns True once an event with content has arrived, `ended` at the last chunk."""

    def __init__(self) -> None:
        self.raw = bytearray()  # undecoded bytes
        self.head_done = False
        self.status = 0
        self.body = bytearray()  # decoded, not yet split into events
        self.content_seen = False
        self.ended = False

    def feed(self, data: bytes) -> bool:
        self.raw += data
        if not self.head_done:
            end = self.raw.find(b"\r\n\r\n")
            if end < 0:
                return False
            self.status = int(self.raw[9:12])
            del self.raw[:end + 4]
            self.head_done = True
        self._dechunk()
        while not self.content_seen and (end := self.body.find(b"\n\n")) >= 0:
            event = bytes(self.body[:end])
            del self.body[:end + 2]
            self.content_seen = _has_content(event)
        return self.content_seen

    def _dechunk(self) -> None:
        while not self.ended:
            line_end = self.raw.find(b"\r\n")
            if line_end < 0:
                return
            size = int(bytes(self.raw[:line_end]).split(b";")[0], 16)
            if len(self.raw) < line_end + 2 + size + 2:
                return
            self.body += self.raw[line_end + 2:line_end + 2 + size]
            del self.raw[:line_end + 2 + size + 2]
            self.ended = size == 0


def _has_content(event: bytes) -> bool:
    for line in event.split(b"\n"):
        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
            delta = (json.loads(line[5:]).get("choices") or [{}])[0].get("delta") or {}
            if delta.get("content"):
                return True
    return False


def connect(host: str, port: int, habits: Habits) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if habits.nodelay else 0)
    return sock


def raw_exchange(sock: socket.socket, head: bytes, body: bytes, habits: Habits) -> Sample:
    """One request on `sock`, read to the end of its answer."""
    t0 = time.perf_counter()
    if habits.split:
        sock.sendall(head)
        sock.sendall(body)
    else:
        sock.sendall(head + body)
    parser = ChunkedSSE()
    t_byte = t_first = 0.0
    while not parser.ended:
        data = sock.recv(65536)
        now = time.perf_counter()
        if not data:
            raise ConnectionError("closed before the end of the answer")
        t_byte = t_byte or now
        if parser.feed(data) and not t_first:
            t_first = now
    if parser.status != 200 or not t_first:
        raise ConnectionError(f"status {parser.status}, content {parser.content_seen}")
    return Sample(t_first - t0, t_byte - t0)


def raw_worker(url: str, habits: Habits, seeds: Callable[[], int | None], out: Samples) -> None:
    host, port, path = _split(url)
    sock: socket.socket | None = None
    while (seed := seeds()) is not None:
        try:
            if sock is None:
                sock = connect(host, port, habits)
            head, body = request_parts(host, port, path, seed, keep_alive=not habits.new_conn)
            sample = raw_exchange(sock, head, body, habits)
        except (OSError, ValueError):
            out.errors += 1
            sample = None
        if habits.new_conn or sample is None:
            if sock is not None:
                sock.close()
            sock = None
        if sample is not None:
            out.ttft_ms.append(sample.ttft_s * 1000)
            out.ttfb_ms.append(sample.ttfb_s * 1000)
        _pause(habits)
    if sock is not None:
        sock.close()


def sdk_worker(url: str, habits: Habits, seeds: Callable[[], int | None], out: Samples) -> None:
    import openai  # the official SDK (test extra); only this client needs it

    base = url.rsplit("/chat/completions", 1)[0]
    client = openai.OpenAI(base_url=base, api_key="x", max_retries=0, timeout=30)
    while (seed := seeds()) is not None:
        bench = {"ttft_ms": TTFT_MS, "chunks": CHUNKS, "chunk_chars": CHUNK_CHARS, "gap_ms": GAP_MS, "seed": seed}
        t0 = time.perf_counter()
        t_first = 0.0
        try:
            stream = client.chat.completions.create(model="m", stream=True, extra_body={"bench": bench},
                                                    messages=[{"role": "user", "content": "benchmark"}])
            for chunk in stream:
                if not t_first and chunk.choices and chunk.choices[0].delta.content:
                    t_first = time.perf_counter()
        except openai.OpenAIError:
            out.errors += 1
            continue
        if t_first:
            out.ttft_ms.append((t_first - t0) * 1000)
        else:
            out.errors += 1
        _pause(habits)
    client.close()


WORKERS: dict[str, Callable[[str, Habits, Callable[[], int | None], Samples], None]] = {
    "raw": raw_worker, "sdk": sdk_worker}


def run_clients(kind: str, url: str, habits: Habits, requests: int, concurrency: int = CONCURRENCY,
                ramp_s: float = 0.0) -> Samples:
    """`concurrency` closed-loop workers; worker i starts `ramp_s * i / concurrency` after the first (0:
    all at once, so their requests, and the upstream's first tokens, come in bursts)."""
    if habits.procs:
        return _run_processes(kind, url, habits, requests, concurrency, ramp_s)
    out = Samples()
    lock = threading.Lock()
    count = iter(range(requests))

    def seeds() -> int | None:
        with lock:
            return next(count, None)

    threads = [threading.Thread(target=WORKERS[kind], args=(url, habits, seeds, out)) for _ in range(concurrency)]
    t_start = time.perf_counter()
    for i, t in enumerate(threads):
        _pace(t_start, ramp_s * i / concurrency)
        t.start()
    for t in threads:
        t.join()
    return out


def _run_processes(kind: str, url: str, habits: Habits, requests: int, concurrency: int,
                   ramp_s: float) -> Samples:
    """As `run_clients`, a forked process per worker; the seeds come from a shared counter, each worker's
    samples and CPU back through a pipe when it ends."""
    mp = multiprocessing.get_context("fork")
    counter = mp.Value("i", 0)
    pipes, procs = [], []
    t_start = time.perf_counter()
    for i in range(concurrency):
        _pace(t_start, ramp_s * i / concurrency)
        recv, send = mp.Pipe(duplex=False)
        proc = mp.Process(target=_process_worker, args=(kind, url, habits, requests, counter, send))
        proc.start()
        send.close()
        pipes.append(recv)
        procs.append(proc)
    out = Samples()
    for recv, proc in zip(pipes, procs, strict=True):
        got: Samples = recv.recv()
        out.ttft_ms += got.ttft_ms
        out.ttfb_ms += got.ttfb_ms
        out.errors += got.errors
        out.cpu_s += got.cpu_s
        proc.join()
    return out


def _process_worker(kind: str, url: str, habits: Habits, requests: int, counter: Synchronized[int],
                    send: Connection) -> None:
    def seeds() -> int | None:
        with counter.get_lock():
            seed = counter.value
            counter.value = seed + 1
        return seed if seed < requests else None

    out = Samples()
    WORKERS[kind](url, habits, seeds, out)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.cpu_s = usage.ru_utime + usage.ru_stime
    send.send(out)
    send.close()


def _pause(habits: Habits) -> None:
    if habits.pause_s:
        time.sleep(habits.pause_s)  # a client's think time, not a synchronisation


def _pace(t_start: float, offset_s: float) -> None:
    """Start the next worker `offset_s` after the first: pacing, not syncing."""
    time.sleep(max(0.0, t_start + offset_s - time.perf_counter()))


def _split(url: str) -> tuple[str, int, str]:
    rest = url.split("://", 1)[1]
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    return host, int(port), "/" + path
