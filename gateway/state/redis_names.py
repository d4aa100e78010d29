"""Names upstreams reported, shared through Redis (redis.py; docs/agents.md, "Names the gateway gave back"):
a process that learns one from an answer records it, so every other replica and worker, and this one after
a restart, resolves the name a client sends back. One set per name (`keys.served_key`) of `[model,
configured upstream name]` members, at most `MAX_MODELS_PER_SERVED_NAME`, expiring `SERVED_NAME_TTL_S`
after the last record. A write runs in the background, bounded (redis_writes.py); a read is made only
for a name the process cannot resolve. Both fall back to local memory while Redis is away."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import orjson

from gateway.state.base import MAX_MODELS_PER_SERVED_NAME, MAX_PENDING_NAME_WRITES, SERVED_NAME_TTL_S, ServedName
from gateway.state.keys import served_key
from gateway.state.memory import MemoryBackend
from gateway.state.redis_writes import BackgroundWrites

T = TypeVar("T")


class Run(Protocol):
    """The backend's `_run`: `remote` against Redis within its deadline (or `within_s`), else `local`."""

    async def __call__(self, remote: Callable[[], Awaitable[T]], local: Callable[[], Awaitable[T]], *,
                       within_s: float | None = None) -> T: ...


class SharedNames:
    """The served-name operations of one Redis backend: `redis` its client, `add` the registered
    `lua.ADD_SERVED_NAME`, `local` its fallback memory, `run` its way of running an operation."""

    def __init__(self, redis: Any, add: Any, local: MemoryBackend, run: Run) -> None:
        self._redis, self._add, self._local, self._run = redis, add, local, run
        self._writes = BackgroundWrites("served_name_not_recorded")

    def record(self, name: str, served: ServedName) -> None:
        async def remote() -> None:
            args = [member(served), SERVED_NAME_TTL_S * 1000, MAX_MODELS_PER_SERVED_NAME]
            await self._add(keys=[served_key(name)], args=args)

        async def local() -> None:
            self._local.record_served_name(name, served)

        self._writes.start(name, lambda: self._run(remote, local), MAX_PENDING_NAME_WRITES)

    async def read(self, name: str) -> tuple[ServedName, ...]:
        async def remote() -> tuple[ServedName, ...]:
            return served_of(await self._redis.smembers(served_key(name)))

        async def local() -> tuple[ServedName, ...]:
            return await self._local.served_names(name)

        return await self._run(remote, local)

    def cancel(self) -> None:
        self._writes.cancel()


def member(served: ServedName) -> bytes:
    return orjson.dumps([served.model, served.upstream])


def served_of(members: object) -> tuple[ServedName, ...]:
    """A set's `[model, upstream]` members in a stable order; an unreadable one is left out, never an error."""
    raws = sorted(m for m in members if isinstance(m, bytes)) if isinstance(members, set | list) else []
    found: list[ServedName] = []
    for raw in raws:
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
            found.append(ServedName(model=value[0], upstream=value[1]))
    return tuple(found[:MAX_MODELS_PER_SERVED_NAME])
