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


SECRET = "Xy7Q/Zs3cret"  # a generated password: base64 has "/", as it may have "+" and "="


@pytest.mark.parametrize("mode", ["single", "cluster", "sentinel"])
@pytest.mark.parametrize("url", [
    f"rediss://gw:{SECRET}@redis.internal:6379/0",  # "/" ends the host part: port "Xy7Q", path the rest
    "rediss://gw:Xy7Q#Zs3cret@redis.internal:6379/0",  # "#" starts a fragment
    "rediss://gw:Xy7Q?Zs3cret@redis.internal:6379/0",  # "?" starts a query
    "rediss://gw:1234/Zs3cret@redis.internal:6379/0",  # a port that parses: host "gw", the rest a "database"
    "rediss://gw:1234#Zs3cret@redis.internal:6379/0",
    "rediss://redis.internal:notaport/0",
    "rediss://redis.internal:6379/zero",
])
def test_a_redis_url_that_does_not_parse_as_one_is_a_config_error_naming_no_secret(mode: str, url: str) -> None:
    """A password interpolated unencoded (`${REDIS_PASSWORD}`, docs/scale-out.md) used to pass the check
    and crash `serve` at start with a traceback ending in "Port could not be cast to integer value as
    'Xy7Q'" (the password's start), or connect to a host named after the user with the password's start
    as its port and log it as the location; under Sentinel the password was silently dropped."""
    sentinel = {"master": "m", "urls": ["redis://s1:26379"]} if mode == "sentinel" else None
    got = errors({"backend": "redis", "redis_mode": mode, "redis_url": url,
                  **({"sentinel": sentinel} if sentinel else {})})
    assert "state.redis_url: " in got and "percent-encoded" in got
    assert "Xy7Q" not in got and "Zs3cret" not in got and "1234" not in got


def test_a_sentinel_url_that_does_not_parse_is_a_config_error_naming_no_secret() -> None:
    got = errors({"backend": "redis", "redis_mode": "sentinel",
                  "sentinel": {"master": "m", "urls": ["redis://s1:26379", f"redis://:{SECRET}@s2:26379"]}})
    assert "state.sentinel.urls[1]: " in got and "Xy7Q" not in got and "Zs3cret" not in got


def test_a_percent_encoded_password_and_every_valid_form_pass() -> None:
    for mode, url in [("single", "rediss://gw:Xy7Q%2FZs3cret@redis.internal:6379/0"),
                      ("single", "redis://127.0.0.1:6379"), ("single", "redis://127.0.0.1/"),
                      ("single", "unix:///run/redis.sock?db=1"), ("single", "redis://[::1]:6379/3"),
                      ("cluster", "rediss://gw:Xy7Q%2FZs3cret@10.0.0.1:7000/0"),
                      ("sentinel", "rediss://gw:Xy7Q%2FZs3cret@unused/2")]:
        extra = {"sentinel": {"master": "m", "urls": ["rediss://s1:26379"]}} if mode == "sentinel" else {}
        assert state({"backend": "redis", "redis_mode": mode, "redis_url": url, **extra}).redis_url == url


def test_a_cluster_has_database_0_only() -> None:
    assert "state.redis_url: redis_mode cluster has database 0 only" in \
        errors({"backend": "redis", "redis_mode": "cluster", "redis_url": "redis://10.0.0.1:7000/1"})
