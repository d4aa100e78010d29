"""`state.redis_mode`, `sentinel`, `redis_ca_file`, `timeout_ms`, `replicas` (docs/reference.md, Config file)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ConfigError, parse_config
from gateway.config.types import SentinelConfig

BASE: dict[str, Any] = {"auth": {"allow_unauthenticated": True},
                        "providers": {"up": {"type": "openai", "base_url": "http://127.0.0.1:1/v1"}},
                        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x"}]}]}


def state(raw: dict[str, Any]) -> Any:
    return parse_config({**BASE, "state": raw}, env={}).state


def errors(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, "state": raw}, env={})
    return "\n".join(info.value.errors)


def test_defaults_single_node_50_ms_one_replica() -> None:
    st = state({"backend": "redis"})
    assert (st.redis_mode, st.timeout_ms, st.replicas, st.redis_ca_file, st.sentinel, st.workers) == \
        ("single", 50, 1, None, None, 1)


def test_cluster_and_sentinel_modes_parse() -> None:
    st = state({"backend": "redis", "redis_mode": "cluster", "redis_url": "rediss://u:p@h:6379/0",
                "redis_ca_file": "/etc/ca.pem", "timeout_ms": 80, "replicas": 3})
    assert (st.redis_mode, st.redis_ca_file, st.timeout_ms, st.replicas) == ("cluster", "/etc/ca.pem", 80, 3)
    st = state({"backend": "redis", "redis_mode": "sentinel",
                "sentinel": {"master": "mymaster", "urls": ["rediss://s1:26379", "rediss://s2:26379"]}})
    assert st.sentinel == SentinelConfig(master="mymaster", urls=("rediss://s1:26379", "rediss://s2:26379"))


@pytest.mark.parametrize(("raw", "expected"), [
    ({"redis_mode": "sharded"}, "state.redis_mode: must be one of single, cluster, sentinel"),
    ({"redis_mode": "sentinel"}, "state.sentinel: required with redis_mode sentinel"),
    ({"redis_mode": "sentinel", "sentinel": {"urls": ["redis://s:26379"]}}, "state.sentinel.master: required"),
    ({"redis_mode": "sentinel", "sentinel": {"master": "m", "urls": ["http://s"]}},
     "state.sentinel.urls[0]: must be a redis:// or rediss:// URL"),
    ({"redis_mode": "cluster", "redis_url": "unix:///tmp/r.sock"}, "state.redis_url: redis_mode cluster needs"),
    ({"redis_mode": "sentinel", "sentinel": {"master": "m", "urls": ["redis://a:1", "rediss://b:1"]}},
     "state.sentinel.urls: all redis:// or all rediss://"),
    ({"timeout_ms": 0}, "state.timeout_ms: must be >= 1"),
    ({"replicas": 0}, "state.replicas: must be >= 1"),
    ({"sentinel": {"master": "m", "urls": ["redis://s:1"], "extra": 1}}, "state.sentinel.extra: unknown key"),
])
def test_bad_state_settings_name_their_key(raw: dict[str, Any], expected: str) -> None:
    assert expected in errors({"backend": "redis", **raw})


def test_the_sentinel_password_never_shows_in_the_config_repr() -> None:
    st = state({"backend": "redis", "redis_mode": "sentinel",
                "sentinel": {"master": "m", "urls": ["redis://:s3cret@s1:26379"]}})
    assert "s3cret" not in repr(st)
