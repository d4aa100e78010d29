"""The Redis client for each `state.redis_mode` (docs/scale-out.md): one node, a Redis Cluster (redis-py's
cluster client follows MOVED/ASK, resharding and failovers), or the master Sentinel names (re-found
after a failover). `rediss://` with `state.redis_ca_file`, and ACL user:password, work in all three.

Every socket timeout is the operation budget (`state.timeout_ms`), so a stalled node never holds a
request longer than that; the backend bounds the whole operation as well.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from gateway.config.types import SentinelConfig, StateConfig

# The cluster's and Sentinel's pools refuse a connection over their cap instead of queueing for one (the
# single-node pool queues, within the timeout): a burst over the cap would count as Redis being away. A
# cap this high is still a bound; connections are only opened as concurrency needs them.
REFUSING_POOL_CAP = 1024


@dataclass(frozen=True, slots=True)
class RedisLink:
    """A client of one of the three kinds; they share the commands the backend uses (GET, SET, PING,
    EVALSHA through registered scripts)."""

    client: Any  # Redis (single, sentinel) or RedisCluster
    mode: str
    where: str  # for logs: host:port or the Sentinel master's name, never a credential

    async def ping(self) -> None:
        """All of the shared store answers: in a cluster every primary, so a lost slot range counts."""
        if self.mode == "cluster":
            await self.client.ping(target_nodes=RedisCluster.PRIMARIES)
        else:
            await self.client.ping()

    async def prepare(self, scripts: tuple[str, ...], connections: int) -> None:
        """Ready for a burst of operations: every script in the script cache (in a cluster: of every
        primary), since a promoted replica or a restarted node has none and each operation's EVALSHA would
        pay NOSCRIPT, a load and a retry within its deadline; and `connections` connections open (to every
        primary), pinged on at once, so the burst does not open one each."""
        # The loads at once: right after a cluster failover each took ~0.25 s here (redis-py's client waits
        # out the cluster's reconfiguration per command), one after another they overran the probe's
        # budget attempt after attempt and held shared counting back for 10 s and more
        await asyncio.gather(*(self.client.script_load(source) for source in scripts))
        await asyncio.gather(*(self.ping() for _ in range(connections)))

    async def reset(self) -> None:
        """Drop every pooled connection (dead after a restart or failover): the next command reconnects,
        re-reads the cluster's slots or asks the Sentinels for the master again."""
        if self.mode == "cluster":
            await self.client.aclose()
        else:
            await self.client.connection_pool.disconnect()

    async def close(self) -> None:
        await self.client.aclose()
        if self.mode != "cluster":
            await self.client.connection_pool.aclose()


def connect(state: StateConfig, timeout_s: float, max_connections: int) -> RedisLink:
    """Build the client; no I/O happens here (Redis is contacted on first use)."""
    common: dict[str, Any] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    if state.redis_mode == "cluster":
        return _cluster(state, common, max_connections)
    if state.redis_mode == "sentinel" and state.sentinel is not None:
        return _sentinel(state, state.sentinel, common, max_connections)
    # One retry without backoff heals a pooled connection that Redis closed by restarting; the
    # backend's deadline still bounds the whole operation.
    pool = BlockingConnectionPool.from_url(state.redis_url, max_connections=max_connections, timeout=timeout_s,
                                           retry=Retry(NoBackoff(), 1), **common, **_tls(state.redis_url, state))
    return RedisLink(Redis(connection_pool=pool), "single", location(state.redis_url))


def _cluster(state: StateConfig, common: dict[str, Any], max_connections: int) -> RedisLink:
    # Retries (MOVED/ASK, a node lost) are redis-py's; the backend's deadline bounds them all.
    client = RedisCluster.from_url(state.redis_url, max_connections=max(max_connections, REFUSING_POOL_CAP),
                                   retry=Retry(NoBackoff(), 2), require_full_coverage=False,
                                   **common, **_tls(state.redis_url, state))
    return RedisLink(client, "cluster", location(state.redis_url))


def _sentinel(state: StateConfig, sentinel: SentinelConfig, common: dict[str, Any],
              max_connections: int) -> RedisLink:
    # The Sentinels' own credentials and TLS come from their URLs; the master's from state.redis_url
    # (its host is not used: the Sentinels say where the master is).
    nodes = [(urlsplit(u).hostname or "127.0.0.1", urlsplit(u).port or 26379) for u in sentinel.urls]
    first = sentinel.urls[0]
    client_of_sentinels = Sentinel(nodes, sentinel_kwargs={**common, **_auth(first), **_tls(first, state, True)})
    master = urlsplit(state.redis_url)
    db = int(master.path.strip("/") or 0) if master.path.strip("/").isdigit() else 0
    client = client_of_sentinels.master_for(
        sentinel.master, redis_class=Redis, max_connections=max(max_connections, REFUSING_POOL_CAP), db=db,
        retry=Retry(NoBackoff(), 1), **common, **_auth(state.redis_url), **_tls(state.redis_url, state, True))
    return RedisLink(client, "sentinel", f"sentinel master {sentinel.master}")


def _auth(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    out: dict[str, Any] = {}
    if parts.username:
        out["username"] = unquote(parts.username)
    if parts.password:
        out["password"] = unquote(parts.password)
    return out


def _tls(url: str, state: StateConfig, explicit: bool = False) -> dict[str, Any]:
    """TLS settings for a rediss:// URL; nothing for redis:// (a plain connection takes no ssl_* keys).
    `explicit`: the client is not built from the URL, so `ssl=True` must be said."""
    if urlsplit(url).scheme != "rediss":
        return {}
    out: dict[str, Any] = {"ssl": True} if explicit else {}
    if state.redis_ca_file:
        out["ssl_ca_certs"] = state.redis_ca_file
    return out


def location(url: str) -> str:
    """host:port/db of a Redis URL, for logs: never the password or the username."""
    try:
        parts = urlsplit(url)
        if parts.scheme == "unix":
            return parts.path
        return f"{parts.hostname}:{parts.port or 6379}{parts.path}"
    except ValueError:
        return "redis"
