"""Response owners shared through Redis (redis.py; docs/responses-bridge.md, Ownership): every replica
reads who created an id, bounded per tenant (`base.tenant_of`) as the memory backend is.

A record lives under its id (`keys.owner_key`: a lookup knows the id, not its owner, and a key that moved
to another team still finds its own ids), so reading one is a single GET. The bound is a sorted set per
tenant (`keys.owned_key`, lua.OWN_RESPONSE): each write counts its id there, and the ids past
`MAX_RESPONSE_OWNERS_PER_TENANT` (the tenant's oldest) have their records deleted after it. In a Redis
Cluster the set and the records are in different slots, so this is three steps, not one transaction: a
write cut between them leaves an id counted without a record (dropped in its turn), or the records it
dropped until their TTL. Writes run in the background (redis_writes.py), after the first token."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson

from gateway.state.base import MAX_PENDING_OWNER_WRITES, MAX_RESPONSE_OWNERS_PER_TENANT, ResponseOwner, tenant_of
from gateway.state.keys import owned_key, owner_key
from gateway.state.memory import MemoryBackend
from gateway.state.redis_names import Run
from gateway.state.redis_values import owner_of
from gateway.state.redis_writes import BackgroundWrites


class SharedOwners:
    """The response-owner operations of one Redis backend: `redis` its client, `own` the registered
    `lua.OWN_RESPONSE`, `local` its fallback memory, `run` its way of running an operation, `deadline_s`
    the longest a read waits (a write in flight included)."""

    def __init__(self, redis: Any, own: Any, local: MemoryBackend, run: Run, deadline_s: float) -> None:
        self._redis, self._own, self._local, self._run = redis, own, local, run
        self._deadline_s = deadline_s
        self._writes = BackgroundWrites("response_owner_not_recorded")  # by response id

    def record(self, response_id: str, owner: ResponseOwner, ttl_s: float) -> None:
        self._writes.start(response_id, lambda: self._write(response_id, owner, ttl_s), MAX_PENDING_OWNER_WRITES)

    async def _write(self, response_id: str, owner: ResponseOwner, ttl_s: float) -> None:
        value, ttl_ms = orjson.dumps([owner.key, owner.team]), max(1, round(ttl_s * 1000))
        index = owned_key(tenant_of(owner.key, owner.team))

        async def remote() -> None:
            # counted first: cut after this, the id is counted without a record, never a record uncounted
            dropped = await self._own(keys=[index], args=[response_id, ttl_ms, MAX_RESPONSE_OWNERS_PER_TENANT])
            await self._redis.set(owner_key(response_id), value, px=ttl_ms)
            if dropped:  # in a cluster, redis-py splits the DEL by slot
                await self._redis.delete(*(owner_key(_text(d)) for d in dropped))

        async def local() -> None:
            self._local.record_response_owner(response_id, owner, ttl_s)

        await self._run(remote, local)

    async def read(self, response_id: str) -> ResponseOwner | None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        pending = self._writes.pending(response_id)
        if pending is not None:  # written from this replica a moment ago: read it after the write
            with contextlib.suppress(Exception):
                await asyncio.shield(pending)  # bounded: the write has its own deadline

        async def remote() -> ResponseOwner | None:
            return owner_of(await self._redis.get(owner_key(response_id)))

        async def local() -> ResponseOwner | None:
            return await self._local.response_owner(response_id)

        # One deadline for the wait on the write and the read: the request waits `state.timeout_ms` at most
        return await self._run(remote, local, within_s=self._deadline_s - (loop.time() - started))

    def cancel(self) -> None:
        self._writes.cancel()


def _text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
