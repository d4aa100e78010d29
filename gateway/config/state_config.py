"""The `state` section (docs/reference.md, Config file; docs/scale-out.md): the shared-state backend,
and how to reach Redis as a single node, a Redis Cluster or through Sentinel."""

from __future__ import annotations

import re
from typing import cast
from urllib.parse import SplitResult, urlsplit

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
    if mode == "sentinel" and sentinel is None:
        st.errs.add(st.at("sentinel"), "required with redis_mode sentinel: {master, urls}")
    if mode == "cluster" and url.partition("://")[0] not in _SCHEMES:
        st.errs.add(st.at("redis_url"), "redis_mode cluster needs a redis:// or rediss:// URL of one node")
        return
    problem = _url_problem(url, unix=mode == "single")
    if problem is not None:
        st.errs.add(st.at("redis_url"), problem)
    elif mode == "cluster" and _database(url) not in ("", "0"):
        st.errs.add(st.at("redis_url"), "redis_mode cluster has database 0 only")


def _sentinel(s: Section) -> SentinelConfig:
    master = s.get("master", str, "")
    if not master:
        s.errs.add(s.at("master"), "required: the name the Sentinels monitor the master under")
    urls = s.strings("urls")
    if not urls:
        s.errs.add(s.at("urls"), "required: at least one Sentinel, redis://host:26379")
    for i, url in enumerate(urls):
        problem = _url_problem(url, unix=False) if _is_redis_url(url) else "must be a redis:// or rediss:// URL"
        if problem is not None:
            s.errs.add(f"{s.at('urls')}[{i}]", problem)
    if len({urlsplit(u).scheme for u in urls if _is_redis_url(u)}) > 1:
        # one client configuration serves every Sentinel (its TLS and password: the first URL's)
        s.errs.add(s.at("urls"), "all redis:// or all rediss://: the Sentinels share one TLS setting")
    return SentinelConfig(master=master, urls=urls)


def _is_redis_url(url: str) -> bool:
    parts = _urlsplit_or_none(url)
    return parts is not None and parts.scheme in _SCHEMES and bool(parts.hostname)


def _urlsplit_or_none(url: str) -> SplitResult | None:
    try:
        return urlsplit(url)
    except ValueError:
        return None


def _url_problem(url: str, *, unix: bool) -> str | None:
    """Why `url` is no Redis URL redis-py would read as written, or None. Checked at load: a password put
    into the URL unencoded (`${REDIS_PASSWORD}`) with a `/`, `?` or `#` in it ends the host part there, so
    the client failed at start with the password's first part in its error ("Port could not be cast to
    integer value as '...'"), or reached a host named after the user and logged the rest as its
    location (docs/scale-out.md). The message never quotes the URL: it holds a credential."""
    parts = _urlsplit_or_none(url)
    if parts is not None and unix and parts.scheme == "unix":
        return None if parts.path else "a unix:// URL needs the socket's path"
    if parts is None or parts.scheme not in _SCHEMES or not parts.hostname:
        return _SHAPE
    try:
        parts.port  # noqa: B018 (parsing it is the check: it raises on what is not a port)
    except ValueError:
        return _SHAPE
    if parts.fragment or "@" in parts.query or not re.fullmatch(r"/?[0-9]*", parts.path):
        return _SHAPE
    return None


def _database(url: str) -> str:
    return urlsplit(url).path.strip("/")


_SHAPE = ("must be redis[s]://[user:password@]host[:port][/database]; a password or user name with / ? # @ "
          "or % in it must be percent-encoded (/ as %2F, ? as %3F, # as %23, @ as %40, % as %25)")
