"""The clients of `tests/integration/test_responses_websocket_load.py`'s flood, each in a process of its
own, so neither shares a GIL with the gateway's loop (a thread waiting for the GIL behind the loop's,
which releases and retakes it around each callback, waits tens of ms, and a probe would count the loop's
CPU meanwhile as its wait). Standard library only: it runs as a script, without the tests' package.

`flood FD FRAME_HEX`: on an upgraded socket, sends the masked frame in rounds and reads everything the
gateway answers, counting what the test waits for. Commands on stdin, each answered with one line:

    send N            N copies of the frame in one write      -> "sent"
    wait NAME N S     until NAME was read N times, S s at most -> "ok" or "short <count>"

`probe PORT PID SAMPLES CPU`: on CPU only, asks /healthz again and again on one keep-alive connection,
noting for each its start, its wait and the CPU time process PID (the test's, where the loop is the only
thread with work) spent meanwhile. Prints "ready" after 5 answers, "enough" once it has SAMPLES since a
"mark" line on stdin, and on a "stop" line the waits as JSON, then ends.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import sys
import threading
import time

WATCHED = {"busy": b'{"type":"error","code":"response_in_progress"',  # once an event
           "delta": b"response.output_text.delta", "completed": b"response.completed"}
_LONGEST = max(len(w) for w in WATCHED.values())


class Counts:
    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.seen = dict.fromkeys(WATCHED, 0)

    def read(self, sock: socket.socket) -> None:
        """Counts each watched string as it comes; a match across two reads is in `data` once."""
        tail = b""
        try:
            while chunk := sock.recv(1 << 20):
                data = tail + chunk
                with self.changed:
                    for name, what in WATCHED.items():
                        self.seen[name] += data.count(what) - tail.count(what)
                    self.changed.notify_all()
                tail = data[-(_LONGEST - 1):]
        except OSError:  # the test closed the connection
            return

    def wait(self, name: str, count: int, seconds: float) -> str:
        with self.changed:
            self.changed.wait_for(lambda: self.seen[name] >= count, seconds)
            return "ok" if self.seen[name] >= count else f"short {self.seen[name]}"


def flood(fd: int, frame: bytes) -> None:
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)  # the test's socket had a timeout: its descriptor came non-blocking
    counts = Counts()
    threading.Thread(target=counts.read, args=(sock,), daemon=True).start()
    for line in sys.stdin:
        command, *args = line.split()
        if command == "send":
            sock.sendall(frame * int(args[0]))
            answer = "sent"
        elif command == "wait":
            answer = counts.wait(args[0], int(args[1]), float(args[2]))
        else:
            answer = f"unknown command {command}"
        _say(answer)


def process_cpu_clock(pid: int) -> int:
    """The CPU-time clock of process `pid` (Linux's encoding of clock_getcpuclockid(3), which Python lacks:
    the scheduler's own runtime of all its threads)."""
    return ((~pid) << 3) | 2


def probe(port: int, pid: int, samples: int, cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})  # the loop's CPU, where the loop gives way to the probe
    clock = process_cpu_clock(pid)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    waits: list[tuple[float, float, float]] = []
    marked: int | None = None
    while True:
        t0, c0 = time.monotonic(), time.clock_gettime(clock)
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200
        waits.append((t0, time.monotonic() - t0, time.clock_gettime(clock) - c0))
        if len(waits) == 5:
            _say("ready")
        if marked is not None and len(waits) - marked == samples:
            _say("enough")
        if select.select([sys.stdin], [], [], 0)[0]:  # a command: no thread of ours reads stdin
            command = sys.stdin.readline().strip()
            if command == "mark":
                marked = len(waits)
            elif command in ("stop", ""):
                _say(json.dumps(waits))
                return


def _say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "flood":
        flood(int(sys.argv[2]), bytes.fromhex(sys.argv[3]))
    else:
        probe(*(int(arg) for arg in sys.argv[2:6]))
