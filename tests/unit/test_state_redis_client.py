"""The Redis client each `state.redis_mode` builds carries TLS (`rediss://` + `state.redis_ca_file`), the
ACL user and password, and `state.timeout_ms` as its socket timeout: redis-py's own objects, read back
without a server (the live paths: tests/integration/test_state_tls.py, test_state_cluster.py,
test_state_sentinel.py)."""

from __future__ import annotations

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import SSLConnection
from redis.asyncio.sentinel import SentinelConnectionPool, SentinelManagedSSLConnection

from gateway.config.types import SentinelConfig, StateConfig
from gateway.state.redis_client import connect


def test_cluster_mode_takes_tls_acl_and_the_timeout() -> None:
    link = connect(StateConfig(backend="redis", redis_mode="cluster", redis_url="rediss://gw:pw@10.0.0.1:7000/0",
                               redis_ca_file="/etc/ca.pem"), 0.05, 8)
    assert isinstance(link.client, RedisCluster)
    kw = link.client.connection_kwargs
    assert kw["connection_class"] is SSLConnection
    assert (kw["username"], kw["password"], kw["ssl_ca_certs"]) == ("gw", "pw", "/etc/ca.pem")
    assert kw["socket_timeout"] == kw["socket_connect_timeout"] == 0.05
    assert link.where == "10.0.0.1:7000/0"


def test_sentinel_mode_finds_the_master_with_its_own_and_the_sentinels_credentials() -> None:
    sentinel = SentinelConfig("mymaster", ("rediss://:sentinel-pw@s1:26379", "rediss://:sentinel-pw@s2:26380"))
    link = connect(StateConfig(backend="redis", redis_mode="sentinel", redis_url="rediss://gw:pw@unused/2",
                               redis_ca_file="/etc/ca.pem", sentinel=sentinel), 0.05, 8)
    pool = link.client.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.connection_class is SentinelManagedSSLConnection
    kw = pool.connection_kwargs
    assert (kw["username"], kw["password"], kw["db"], kw["ssl_ca_certs"]) == ("gw", "pw", 2, "/etc/ca.pem")
    sentinels = pool.sentinel_manager.sentinels
    assert [s.connection_pool.connection_kwargs["password"] for s in sentinels] == ["sentinel-pw"] * 2
    assert [s.connection_pool.connection_kwargs["port"] for s in sentinels] == [26379, 26380]
    assert all(s.connection_pool.connection_class is SSLConnection for s in sentinels)
    assert "pw" not in link.where


def test_plain_redis_takes_no_tls_settings() -> None:
    link = connect(StateConfig(backend="redis", redis_url="redis://127.0.0.1:6379/0", redis_ca_file="/etc/ca.pem"),
                   0.05, 8)
    assert "ssl_ca_certs" not in link.client.connection_pool.connection_kwargs
