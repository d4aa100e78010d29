"""The response cache in Redis (redis.py; docs/scale-out.md): bounded per tenant (`base.tenant_of`) by
`cache.max_entries` and `cache.max_bytes`, so one tenant's answers never fill Redis for everyone (until
`maxmemory` evicted every tenant's keys alike, or writes failed).

A tenant's answers, their index by time written and their sizes share its hash tag (`keys.cache_keys`),
so one script (lua.CACHE_SET) stores an answer and drops the tenant's oldest in one step, in a Redis
Cluster too. A hit stays one GET: the index orders answers by time written, not by last read (a read
that moved an answer up would be a write on every hit); with one ttl for every answer, the oldest
written is also the first to expire. An answer larger than `cache.max_bytes` is not cached, without a
round trip."""

from __future__ import annotations

from typing import Any

from gateway.config.types import CacheConfig
from gateway.state.keys import cache_keys, cache_prefix, cache_redis_key
from gateway.state.memory import MemoryBackend
from gateway.state.redis_names import Run


class SharedCache:
    """The cache operations of one Redis backend: `redis` its client, `put` the registered
    `lua.CACHE_SET`, `local` its fallback memory, `run` its way of running an operation."""

    def __init__(self, redis: Any, put: Any, local: MemoryBackend, run: Run, cache: CacheConfig) -> None:
        self._redis, self._put, self._local, self._run = redis, put, local, run
        self._max_entries, self._max_bytes = cache.max_entries, cache.max_bytes

    async def get(self, cache_key: str, tenant: str) -> bytes | None:
        async def remote() -> bytes | None:
            value = await self._redis.get(cache_redis_key(tenant, cache_key))
            return value if isinstance(value, bytes) else None  # raw bytes: no decode_responses

        async def local() -> bytes | None:
            return await self._local.cache_get(cache_key, tenant=tenant)

        return await self._run(remote, local)

    async def set(self, cache_key: str, value: bytes, ttl_s: float, tenant: str) -> None:
        if ttl_s <= 0 or self._max_entries <= 0 or len(value) > self._max_bytes:
            return
        ttl_ms = max(1, round(ttl_s * 1000))

        async def remote() -> None:
            args = [cache_key, value, ttl_ms, self._max_entries, self._max_bytes, cache_prefix(tenant)]
            await self._put(keys=cache_keys(tenant, cache_key), args=args)

        async def local() -> None:
            await self._local.cache_set(cache_key, value, ttl_s, tenant=tenant)

        await self._run(remote, local)
