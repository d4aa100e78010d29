"""Ports for the servers a test starts in another process (a gateway, Redis, PostgreSQL, Prometheus).

A port the kernel hands out for `bind(0)` comes from the ephemeral range, the same range every outgoing
connection's local port comes from. Between the moment a test picks such a port and the moment its child
binds it, an unrelated outgoing connection (a gateway's own connection to Redis, a client's) may take it,
and the child exits with "address already in use": a flake seen on a busy 2-core machine. These ports come
from below the ephemeral range instead, handed out in turn from a random start (no port twice in one run
until the range wraps), each checked free on 127.0.0.1 before it is returned."""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path

_FIRST, _LAST = 20_000, 32_000  # below Linux's default ephemeral range (32768-60999)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _share() -> tuple[int, int]:
    """This process's part of the range: with pytest-xdist's workers (`make test` runs some tests two at a
    time), each has its own, so two workers never hand out the same port."""
    high = min(_LAST, _ephemeral_low())
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 0):
        return _FIRST, high
    size = (high - _FIRST) // int(count)
    low = _FIRST + size * (int(worker[2:]) % int(count))
    return low, low + size


_LOW, HIGH = _share()
_lock = threading.Lock()
_next = random.randrange(_LOW, HIGH)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port below the ephemeral range, free now, not handed out before in this run."""
    global _next
    with _lock:
        for _ in range(HIGH - _LOW):
            port = _next
            _next = _LOW if _next + 1 >= HIGH else _next + 1
            if _bindable(port):
                return port
    raise OSError("no free port below the ephemeral range")
