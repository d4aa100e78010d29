"""Response owners shared through Redis (redis.py; docs/responses-bridge.md, Ownership): every replica
reads who created an id, bounded per tenant (`base.tenant_of`) as the memory backend is.

A record lives under its id (`keys.owner_key`: a lookup knows the id, not its owner, and a key that moved
to another team still finds its own ids), so reading one is a single GET. The bound is a sorted set per
tenant (`keys.owned_key`, lua.OWN_RESPONSE): each write counts its id there, and the ids past
`MAX_RESPONSE_OWNERS_PER_TENANT` (the tenant's oldest) have their records deleted after it. In a Redis
Cluster the set and the records are in different slots, so this is three steps, not one transaction: a
write cut between them leaves an id counted without a record (dropped in its turn), or the records it
dropped until their TTL. Writes run in the background (redis_writes.py), as the answer ends.

The response's output item ids are counted in the same script call, in a sorted set of the tenant's beside
its ids (`keys.owned_items_key`, the same tag), scored by their expiry and bounded by
`MAX_OWNED_ITEMS_PER_TENANT`: a request that names items (`item_reference`) knows its own tenant, so one
script call reads them all there (lua.OWNED_ITEMS), after this replica's writes of that tenant in flight."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import orjson

from gateway.state.base import (
    MAX_OWNED_ITEMS_PER_TENANT,
    MAX_PENDING_OWNER_WRITES,
    MAX_RESPONSE_OWNERS_PER_TENANT,
    ResponseOwner,
    tenant_of,
)
from gateway.state.keys import owned_items_key, owned_key, owner_key
from gateway.state.memory import MemoryBackend
from gateway.state.redis_names import Run
from gateway.state.redis_values import owner_of
from gateway.state.redis_writes import BackgroundWrites

# item ids one script call reads at most: a request naming thousands is read in several calls, so no one
# call holds Redis (single-threaded: every tenant's operations wait behind it) for long
ITEMS_PER_READ = 256


class SharedOwners:
    """The response-owner operations of one Redis backend: `redis` its client, `own` the registered
    `lua.OWN_RESPONSE`, `owned` the registered `lua.OWNED_ITEMS`, `local` its fallback memory, `run` its
    way of running an operation, `deadline_s` the longest a read waits (a write in flight included)."""

    def __init__(self, redis: Any, own: Any, owned: Any, local: MemoryBackend, run: Run, deadline_s: float) -> None:
        self._redis, self._own, self._owned, self._local, self._run = redis, own, owned, local, run
        self._deadline_s = deadline_s
        self._writes = BackgroundWrites("response_owner_not_recorded")  # by response id
        self._tenant_writes: dict[str, set[asyncio.Task[None]]] = {}  # those with items in flight, by tenant

    def record(self, response_id: str, owner: ResponseOwner, ttl_s: float, items: Sequence[str] = ()) -> None:
        items = tuple(items[-MAX_OWNED_ITEMS_PER_TENANT:])  # more would be dropped by the bound at once
        task = self._writes.start(response_id, lambda: self._write(response_id, owner, ttl_s, items),
                                  MAX_PENDING_OWNER_WRITES)
        if task is not None and items:
            tenant = tenant_of(owner.key, owner.team)
            self._tenant_writes.setdefault(tenant, set()).add(task)
            task.add_done_callback(lambda done: self._written(tenant, done))

    def _written(self, tenant: str, task: asyncio.Task[None]) -> None:
        tasks = self._tenant_writes.get(tenant)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self._tenant_writes[tenant]

    async def _write(self, response_id: str, owner: ResponseOwner, ttl_s: float, items: tuple[str, ...]) -> None:
        value, ttl_ms = orjson.dumps([owner.key, owner.team]), max(1, round(ttl_s * 1000))
        tenant = tenant_of(owner.key, owner.team)
        keys = [owned_key(tenant), owned_items_key(tenant)]
        args = [response_id, ttl_ms, MAX_RESPONSE_OWNERS_PER_TENANT, MAX_OWNED_ITEMS_PER_TENANT, *items]

        async def remote() -> None:
            # counted first: cut after this, the id is counted without a record, never a record uncounted
            dropped = await self._own(keys=keys, args=args)  # its items too, in the same call (same slot)
            await self._redis.set(owner_key(response_id), value, px=ttl_ms)
            if dropped:  # in a cluster, redis-py splits the DEL by slot
                await self._redis.delete(*(owner_key(_text(d)) for d in dropped))

        async def local() -> None:
            self._local.record_response_owner(response_id, owner, ttl_s, items)

        await self._run(remote, local)

    async def unowned_item(self, tenant: str, item_ids: Sequence[str]) -> str | None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        pending = self._tenant_writes.get(tenant)
        if pending:  # the tenant's answers recorded from this replica a moment ago: read after their writes
            await asyncio.wait(tuple(pending), timeout=self._deadline_s)  # each has its own deadline too
        index = owned_items_key(tenant)

        async def remote() -> str | None:
            for start in range(0, len(item_ids), ITEMS_PER_READ):
                batch = list(item_ids[start:start + ITEMS_PER_READ])
                at = int(await self._owned(keys=[index], args=batch))
                if at:
                    return batch[at - 1]
            return None

        async def local() -> str | None:
            return await self._local.unowned_item(tenant, item_ids)

        return await self._run(remote, local, within_s=self._deadline_s - (loop.time() - started))

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
