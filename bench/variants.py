"""Gateway variants for the acceptance benchmarks of #58 (IdP tokens), #59 (routing) and #61 (Redis Cluster).

Each variant is the bench's S2 gateway (bench/servers.py, `gateway_config`) with one thing changed, and
each comparison sets a variant beside its reference, with nothing else different:

- `auth`: `key` and `jwt` run the same config (a gateway key and `auth.jwt` beside it, docs/identity.md);
  only the credential the load generator sends differs: the key, or an RS256 token minted here and
  verified against a JWKS the fake upstream serves (`bench/upstream.py --jwks`). One token per target,
  so the gateway's token cache is what a steady client meets.
- `routing`: model `m` with three deployments on the fake upstream (three providers, three pools) and
  `routing: ordered|latency|weighted` (docs/routing.md).
- `state`: `redis` (one redis-server) or `cluster` (a 6-node Redis Cluster, tests/redis_topologies.py),
  with a key that has `rpm` and `tpm` limits, so every request counts and reserves in Redis
  (docs/scale-out.md). Redis runs outside the gateway's process tree: its CPU is not in the gateway's.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import yaml
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

BENCH_KEY = "sk-bench-key"
ISSUER = "https://idp.bench.invalid/realms/bench"
AUDIENCE = "llm-gateway"
GROUP = "bench-users"
JWKS_PATH = "/jwks"
# far above what a bench can send: the limits are there so the state backend is consulted per request
HIGH_RPM, HIGH_TPM = 100_000_000, 10**12
# callgrind runs the gateway ~50x slower: the default 50 ms per Redis operation would fall back to local
# state on slow replies and measure the wrong path (docs/reference.md, state.timeout_ms)
STATE_TIMEOUT_MS = 5000


@dataclass(frozen=True, slots=True)
class Variant:
    auth: str = "key"  # "key" or "jwt": the credential sent
    routing: str = ""  # "": the bench's one deployment; else the policy over three deployments
    state: str = "memory"  # "memory", "redis" or "cluster"

    @property
    def name(self) -> str:
        parts = [self.auth]
        if self.routing:
            parts.append(self.routing)
        if self.state != "memory":
            parts.append(self.state)
        return "-".join(parts)


AUTH = {"jwt": [Variant(auth="jwt"), Variant(auth="key")]}
ROUTING = {p: [Variant(routing=p), Variant(routing="ordered")] for p in ("latency", "weighted")}
STATE = {"cluster": [Variant(state="cluster"), Variant(state="redis")]}
# bench.run's S2 targets (`--variants`), each measured like `gateway`
TARGETS = {"gateway-key": Variant(), "gateway-jwt": Variant(auth="jwt"),
           "gateway-ordered": Variant(routing="ordered"), "gateway-latency": Variant(routing="latency"),
           "gateway-weighted": Variant(routing="weighted"),
           "gateway-redis": Variant(state="redis"), "gateway-cluster": Variant(state="cluster")}

# the acceptance budgets: (target, reference, most CPU per request of the target over the reference's)
BUDGETS = (("gateway-jwt", "gateway-key", 1.03), ("gateway-latency", "gateway-ordered", 1.02),
           ("gateway-weighted", "gateway-ordered", 1.02), ("gateway-cluster", "gateway-redis", 1.10))


def comparisons(auth: str | None, routing: str | None, state: str | None) -> list[list[Variant]]:
    """Each comparison is [variant, reference] (from `--auth jwt`, `--routing latency,weighted`,
    `--state cluster`; `ordered` and `redis` name the references themselves and add nothing)."""
    chosen: list[list[Variant]] = []
    if auth and auth != "key":
        chosen.append(AUTH[auth])
    for policy in (routing or "").split(","):
        if policy and policy != "ordered":
            chosen.append(ROUTING[policy])
    if state and state != "redis":
        chosen.append(STATE[state])
    return chosen


@dataclass(frozen=True, slots=True)
class Signer:
    """An RSA key of a run's own: its JWKS (what the fake upstream serves) and the tokens it signs."""

    kid: str
    private: rsa.RSAPrivateKey

    @classmethod
    def new(cls) -> Signer:
        return cls(uuid.uuid4().hex[:12], rsa.generate_private_key(public_exponent=65537, key_size=2048))

    def jwks(self) -> bytes:
        jwk: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(self.private.public_key()))
        jwk.update(kid=self.kid, use="sig", alg="RS256")
        return json.dumps({"keys": [jwk]}).encode()

    def token(self, ttl_s: int = 6 * 3600) -> str:
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": f"bench-{uuid.uuid4().hex[:8]}", "iat": now,
                  "exp": now + ttl_s, "groups": [GROUP]}
        return jwt.encode(claims, self.private, algorithm="RS256", headers={"kid": self.kid})


def write_jwks(signer: Signer, workdir: Path) -> Path:
    path = workdir / "jwks.json"
    path.write_bytes(signer.jwks())
    return path


def bearer(v: Variant, signer: Signer) -> str:
    return signer.token() if v.auth == "jwt" else BENCH_KEY


def config_text(base: str, v: Variant, upstream_port: int, redis_url: str = "") -> str:
    """`base` (a `servers.gateway_config` text) with the variant's auth, routing and state."""
    cfg: dict[str, Any] = yaml.safe_load(base)
    limited = v.state != "memory"
    key: dict[str, Any] = {"name": "bench", "key": BENCH_KEY}
    if limited:
        key.update(rpm=HIGH_RPM, tpm=HIGH_TPM)
    cfg["auth"] = {"keys": [key], "jwt": {
        "issuer": ISSUER, "audience": AUDIENCE, "jwks_url": f"http://127.0.0.1:{upstream_port}{JWKS_PATH}",
        "groups": {GROUP: {"team": "bench"}}}}
    if v.routing:
        _three_deployments(cfg, v.routing)
    if limited:
        cfg["state"] = {"backend": "redis", "redis_url": redis_url, "timeout_ms": STATE_TIMEOUT_MS,
                        "redis_mode": "cluster" if v.state == "cluster" else "single"}
    return yaml.safe_dump(cfg, sort_keys=False)


def _three_deployments(cfg: dict[str, Any], policy: str) -> None:
    """Model `m` over three providers on the fake upstream (copies of `up`: a pool each, as real
    deployments have), weights 2:1:1."""
    providers = cfg["providers"]
    for extra in ("up2", "up3"):
        providers[extra] = dict(providers["up"])
    model = next(m for m in cfg["models"] if m["name"] == "m")
    model["deployments"] = [{"provider": p, "model": "up-model", "weight": w}
                            for p, w in (("up", 2), ("up2", 1), ("up3", 1))]
    model["routing"] = policy


class StateServers:
    """The Redis a variant needs (none, one redis-server, or a 6-node cluster), stopped on `close`."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._urls: dict[str, str] = {}
        self._ports: dict[str, Callable[[], list[int]]] = {}  # each state's primaries, now

    def url(self, state: str) -> str:
        if state == "memory":
            return ""
        if state not in self._urls:
            self._urls[state] = self._start(state)
        return self._urls[state]

    def _start(self, state: str) -> str:
        if state == "redis":
            from tests.redis_server import RedisServer  # the tests' real redis-server on loopback

            server = self._stack.enter_context(RedisServer())
            self._ports[state] = lambda: [server.port]
            return server.url
        from tests.redis_topologies import RedisClusterNodes  # 3 primaries + 3 replicas, every slot covered

        cluster = self._stack.enter_context(RedisClusterNodes())
        self._ports[state] = lambda: [s.port for s in cluster.primaries()]
        return cluster.url

    def commands(self, state: str) -> int:
        """Commands the state's Redis primaries have processed (INFO stats): shows Redis was used."""
        import redis

        ports = self._ports.get(state)
        if ports is None:
            return 0
        return sum(int(redis.Redis(host="127.0.0.1", port=p, socket_timeout=5).info("stats")
                       ["total_commands_processed"]) for p in ports())

    def close(self) -> None:
        self._stack.close()
