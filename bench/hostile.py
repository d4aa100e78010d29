"""Hostile clients beside a load (issue #34: "a hostile input under load"), for the loop-lag scenarios
S2hb, S2hd, S2hs and S2hn (bench/scenarios.py): one kind of input the gateway must take or refuse within
its limits, sent over and over for a round while S2's clients stream; the loop-lag probe
(bench/loop_lag.py) shows how late the gateway's loop ran meanwhile, the load generator what the other
streams saw.

Kinds (`--kind`):

* `bigstring`: a chat request whose one message is one JSON string, the body just under
  `server.max_body_bytes` (10 MiB), answered with a short stream;
* `deep`: a body of the same size made of arrays nested 120 deep (the gateway refuses past 128): some
  five million small JSON values to parse and to walk;
* `slowloris`: 64 connections that send a request head one byte every 0.5 s and never finish it (the
  gateway answers 408 after `server.request_head_timeout_s`; the connection is then opened again);
* `nospace`: stream requests whose answer is 1 MiB without any whitespace in deltas of 64 KiB, through
  the redaction window (`secrets`+`pii` in the bench config): 16 forced cuts per delta.

    python -m bench.hostile --url http://127.0.0.1:PORT/v1/chat/completions --kind deep --duration-s 8 --out F

writes `{"kind": ..., "outcomes": {"200": n, "408": n, "held": n, ...}}` (HTTP status per request; for
slowloris also the connections still held at the end) to F.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import orjson

KINDS = ("bigstring", "deep", "slowloris", "nospace")
BODY_BYTES = 10 * 1024 * 1024 - 4096  # under server.max_body_bytes (10 MiB) with room for the envelope
DEPTH = 120  # within core/json_body.py's MAX_DEPTH (128), counting the body's own object and array
SLOW_CONNECTIONS = 64
SLOW_BYTE_EVERY_S = 0.5
_MESSAGES = [{"role": "user", "content": "hi"}]


def body_of(kind: str) -> bytes:
    """The request body a client of `kind` sends (none for slowloris)."""
    if kind == "bigstring":
        envelope = {"model": "m", "stream": True, "bench": {"chunks": 5},
                    "messages": [{"role": "user", "content": ""}]}
        room = BODY_BYTES - len(orjson.dumps(envelope))
        envelope["messages"] = [{"role": "user", "content": "a" * room}]
        return orjson.dumps(envelope)
    if kind == "deep":
        nested = b"[" * DEPTH + b"1" + b"]" * DEPTH
        head = b'{"model":"m","stream":true,"bench":{"chunks":5},"messages":%s,"x":[' % orjson.dumps(_MESSAGES)
        count = (BODY_BYTES - len(head) - 2) // (len(nested) + 1)
        return head + b",".join([nested] * count) + b"]}"
    if kind == "nospace":
        return orjson.dumps({"model": "m", "stream": True, "messages": _MESSAGES,
                             "bench": {"nospace": True, "chunks": 16, "chunk_chars": 65536}})
    raise ValueError(f"no body for kind {kind!r}")


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    path: str

    @classmethod
    def of(cls, url: str) -> Target:
        parts = urlsplit(url)
        return cls(parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/")


async def exchange(target: Target, body: bytes) -> str:
    """One request on its own connection, the whole answer read; its status, or what went wrong."""
    reader, writer = await asyncio.open_connection(target.host, target.port)
    try:
        writer.write(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n" % (target.path.encode(), target.host.encode(), len(body)))
        writer.write(body)
        await writer.drain()
        status = (await reader.readline()).split(b" ", 2)
        if len(status) < 2:
            return "closed"
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        await _read_body(reader, headers)
        return status[1].decode()
    except ConnectionError:
        return "reset"
    finally:
        writer.close()


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> None:
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        while size := int((await reader.readline()).split(b";")[0] or b"0", 16):
            await reader.readexactly(size + 2)
        await reader.readline()  # the blank line after the last chunk
    else:
        await reader.read()


async def _requests(target: Target, body: bytes, until: float, outcomes: Counter[str]) -> None:
    while time.monotonic() < until:
        outcomes[await exchange(target, body)] += 1


async def _slow_head(target: Target, until: float, outcomes: Counter[str]) -> None:
    """A request head that never ends: a byte every SLOW_BYTE_EVERY_S until the server answers or closes."""
    while time.monotonic() < until:
        reader, writer = await asyncio.open_connection(target.host, target.port)
        try:
            writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\nX-Slow: " % target.path.encode())
            while time.monotonic() < until:
                try:
                    answer = await asyncio.wait_for(reader.read(4096), SLOW_BYTE_EVERY_S)
                except TimeoutError:
                    writer.write(b"a")
                    continue
                outcomes[answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "closed"] += 1
                break
            else:
                outcomes["held"] += 1
        except ConnectionError:
            outcomes["reset"] += 1
        finally:
            writer.close()


async def run(url: str, kind: str, duration_s: float) -> Counter[str]:
    target, until = Target.of(url), time.monotonic() + duration_s
    outcomes: Counter[str] = Counter()
    if kind == "slowloris":
        await asyncio.gather(*(_slow_head(target, until, outcomes) for _ in range(SLOW_CONNECTIONS)))
    else:
        await _requests(target, body_of(kind), until, outcomes)
    return outcomes


def start(url: str, kind: str, duration_s: float) -> tuple[subprocess.Popen[bytes], Path]:
    """This module as a process of its own (the load generator keeps its CPU), writing to a temp file."""
    out = Path(tempfile.mkstemp(prefix="hostile-", suffix=".json")[1])
    argv = [sys.executable, "-m", "bench.hostile", "--url", url, "--kind", kind, "--duration-s", str(duration_s),
            "--out", str(out)]
    return subprocess.Popen(argv, cwd=Path(__file__).resolve().parent.parent), out


def finish(proc: subprocess.Popen[bytes], out: Path) -> dict[str, int]:
    """Wait for a process of `start` (it stops on its own after its duration) and read its outcomes."""
    try:
        proc.wait(timeout=120)
        text = out.read_text()
        outcomes: dict[str, int] = json.loads(text)["outcomes"] if text else {"no result": 1}
        return outcomes
    finally:
        out.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--kind", choices=KINDS, required=True)
    p.add_argument("--duration-s", type=float, default=8.0)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    outcomes = asyncio.run(run(args.url, args.kind, args.duration_s))
    args.out.write_text(json.dumps({"kind": args.kind, "outcomes": dict(outcomes)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
