"""The `state` section (docs/reference.md, Config file; docs/scale-out.md): the shared-state backend,
and how to reach Redis as a single node, a Redis Cluster or through Sentinel."""

from __future__ import annotations

from typing import cast
from urllib.parse import urlsplit

from gateway.config.reader import Section
from gateway.config.types import RedisMode, SentinelConfig, StateConfig

STATE_KEYS = ("backend", "redis_url", "response_owner_ttl_s", "redis_mode", "redis_ca_file", "timeout_ms",
              "replicas", "sentinel")
REDIS_MODES: tuple[RedisMode, ...] = ("single", "cluster", "sentinel")
_SCHEMES = ("redis", "rediss")


def state_config(st: Section) -> StateConfig:
    backend = st.choice("backend", ("memory", "redis"), "memory")
    mode = cast(RedisMode, st.choice("redis_mode", REDIS_MODES, "single"))
    url = st.get("redis_url", str, "redis://127.0.0.1:6379/0")
    sentinel = _sentinel(Section(st.raw.get("sentinel"), st.at("sentinel"), st.errs, ("master", "urls"))) \
        if st.has("sentinel") else None
    if backend == "redis":
        _check_mode(st, mode, url, sentinel)
    ca_file = st.get("redis_ca_file", str, "") or None
    return StateConfig(backend=backend,  # type: ignore[arg-type]
                       redis_url=url,
                       response_owner_ttl_s=st.number("response_owner_ttl_s", 30 * 86_400.0, 1.0),
                       redis_mode=mode, redis_ca_file=ca_file,
                       timeout_ms=st.integer("timeout_ms", 50, 1),
                       replicas=st.integer("replicas", 1, 1),
                       sentinel=sentinel)


def _check_mode(st: Section, mode: RedisMode, url: str, sentinel: SentinelConfig | None) -> None:
    if mode == "sentinel":
        if sentinel is None:
            st.errs.add(st.at("sentinel"), "required with redis_mode sentinel: {master, urls}")
        return
    if mode == "cluster" and not _is_redis_url(url):
        st.errs.add(st.at("redis_url"), "redis_mode cluster needs a redis:// or rediss:// URL of one node")


def _sentinel(s: Section) -> SentinelConfig:
    master = s.get("master", str, "")
    if not master:
        s.errs.add(s.at("master"), "required: the name the Sentinels monitor the master under")
    urls = s.strings("urls")
    if not urls:
        s.errs.add(s.at("urls"), "required: at least one Sentinel, redis://host:26379")
    for i, url in enumerate(urls):
        if not _is_redis_url(url):
            s.errs.add(f"{s.at('urls')}[{i}]", "must be a redis:// or rediss:// URL")
    if len({urlsplit(u).scheme for u in urls if _is_redis_url(u)}) > 1:
        # one client configuration serves every Sentinel (its TLS and password: the first URL's)
        s.errs.add(s.at("urls"), "all redis:// or all rediss://: the Sentinels share one TLS setting")
    return SentinelConfig(master=master, urls=urls)


def _is_redis_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return parts.scheme in _SCHEMES and bool(parts.hostname)
    except ValueError:
        return False
