"""One deadline for everything a request waits on Redis (`state.timeout_ms`, docs/scale-out.md, While Redis
is away): reading a response's owner right after this replica wrote it waits for the write first, and
that wait counts against the read's deadline, not beside it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from gateway.config.types import CacheConfig, StateConfig
from gateway.state.base import ResponseOwner, create_backend
from tests.redis_server import RedisServer

# times the state backend's deadline: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

TIMEOUT_MS = 2000
FIRST_SLEEP_S, SECOND_SLEEP_S = 1.4, 1.2  # the write takes ~1.4 s; then the read would take 1.2 s more


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with RedisServer(extra_args=("--enable-debug-command", "yes")) as server:
        yield server


def busy_for(port: int, seconds: float) -> socket.socket:
    """Keep the server busy (DEBUG SLEEP) from a connection of its own; returns once it is asleep."""
    sleeper = socket.create_connection(("127.0.0.1", port))
    sleeper.sendall(f"DEBUG SLEEP {seconds}\r\n".encode())
    with socket.create_connection(("127.0.0.1", port)) as probe:
        probe.settimeout(0.2)
        probe.sendall(b"PING\r\n")
        with pytest.raises(TimeoutError):
            probe.recv(16)  # no PONG: the server is asleep
    return sleeper


async def test_reading_an_owner_just_written_waits_one_deadline_in_all(redis_server: RedisServer) -> None:
    """The write takes most of the deadline; the read would take longer than what is left. It is served
    locally when the deadline ends (the backend goes degraded), instead of the read getting a deadline of
    its own after the write's (then it answered from Redis, the request having waited 2.6 s of a 2 s
    budget)."""
    modes: list[bool] = []
    state = StateConfig(backend="redis", redis_url=redis_server.url, timeout_ms=TIMEOUT_MS)
    backend = create_backend(state, CacheConfig(), lambda _reason: None, modes.append)
    sockets: list[socket.socket] = []
    try:
        assert await backend.response_owner("resp_warm") is None  # connected
        sockets.append(busy_for(redis_server.port, FIRST_SLEEP_S))
        before = asyncio.all_tasks()
        backend.record_response_owner("resp_1", ResponseOwner(key="k", team=None), 60)
        (write,) = asyncio.all_tasks() - before
        # once the write is answered, and before the read is sent (done callbacks run in order, the
        # reader's wake-up after them), the server is made busy again
        write.add_done_callback(lambda _t: sockets.append(busy_for(redis_server.port, SECOND_SLEEP_S)))
        owner = await backend.response_owner("resp_1")
        assert write.done() and write.exception() is None, "the write itself was within its deadline"
        assert modes == [True] and owner is None, "the read was cut at the request's deadline, served locally"
    finally:
        for s in sockets:
            s.close()
        await backend.close()
