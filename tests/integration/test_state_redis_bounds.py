"""What the Redis backend holds for one tenant is bounded, as the memory backend's is (docs/scale-out.md):
response owners at MAX_RESPONSE_OWNERS_PER_TENANT, cached answers at `cache.max_entries` and
`cache.max_bytes`; and two principals whose names differ only in braces never share a key. Against a real
redis-server; the same scenarios run on a Redis Cluster in test_state_cluster.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from gateway.config.types import CacheConfig
from gateway.state import redis_owners
from gateway.state.redis import RedisBackend
from tests.redis_server import RedisServer
from tests.state_bounds import (
    MAX_BYTES,
    MAX_ENTRIES,
    OWNERS_PER_TENANT,
    answers_are_bounded_per_tenant,
    names_differing_in_braces_count_apart,
    owners_are_bounded_per_tenant,
)


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as running:
        yield running


@pytest.fixture
async def raw(server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(server.url)
    yield client
    await client.aclose()


@pytest.fixture
async def replicas(server: RedisServer) -> AsyncIterator[tuple[RedisBackend, RedisBackend]]:
    """Two replicas; a deadline no busy test machine overruns (a timeout would count locally)."""
    cache = CacheConfig(max_entries=MAX_ENTRIES, max_bytes=MAX_BYTES)
    pair = (RedisBackend(server.url, cache, op_timeout_s=5.0), RedisBackend(server.url, cache, op_timeout_s=5.0))
    yield pair
    for backend in pair:
        assert not backend.degraded, "every operation went to Redis"
        await backend.close()


async def test_response_owners_are_bounded_per_tenant(replicas: tuple[RedisBackend, RedisBackend], raw: Redis,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_owners, "MAX_RESPONSE_OWNERS_PER_TENANT", OWNERS_PER_TENANT)
    await owners_are_bounded_per_tenant(*replicas, raw)


async def test_cached_answers_are_bounded_per_tenant(replicas: tuple[RedisBackend, RedisBackend], raw: Redis) -> None:
    await answers_are_bounded_per_tenant(*replicas, raw)


async def test_names_differing_only_in_braces_count_apart(replicas: tuple[RedisBackend, RedisBackend]) -> None:
    await names_differing_in_braces_count_apart(replicas[0])
