"""YAML + environment -> a validated, frozen `Config` (docs/reference.md, "Config keys").

Every error names the exact key path (`models[2].deployments[0].provider: unknown provider "x"`).
Secret values never appear in an error: messages quote key names and types, not values.
This is the only module that reads the process environment.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import yaml

from gateway.config import edges
from gateway.config.aliases import Named, compile_names, not_a_model
from gateway.config.control import ADMIN_KEYS, STORE_KEYS, admin_config, key_identity, store_config
from gateway.config.identity import JWT_KEYS, jwt_config
from gateway.config.provider_config import provider_config
from gateway.config.reader import ConfigError, Errors, Section, expand_env
from gateway.config.safety_config import NAME as _NAME
from gateway.config.safety_config import guardrail, profile, rule_validator
from gateway.config.state_config import STATE_KEYS, state_config
from gateway.config.telemetry import KEYS as TELEMETRY_KEYS
from gateway.config.telemetry import telemetry_config
from gateway.config.types import (
    CACHE_MAX_BYTES,
    SLICE_MAX_US,
    SLICE_MIN_US,
    ApiKey,
    AuthConfig,
    CacheConfig,
    Config,
    Deployment,
    GuardrailConfig,
    LoggingConfig,
    ModelConfig,
    Price,
    ProviderConfig,
    RetryPolicy,
    ServerConfig,
)
from gateway.core.policy.tiers import ROUTING_POLICIES
from gateway.providers.registry import PROVIDERS


def port_clash(port: int, metrics_port: int) -> str | None:
    """The problem when the API and /metrics would share a port (0 picks a free one for each)."""
    if port and port == metrics_port:
        return (f"the same port as server.port ({port}): /metrics is served on a port of its own, never on "
                "the API port; give server.metrics_port (or --metrics-port) another")
    return None


def with_listen_overrides(config: Config, host: str | None, port: int | None, metrics_port: int | None) -> Config:
    """`serve --host/--port/--metrics-port` over the file's `server`, checked as the file's own values are."""
    s = config.server
    server = replace(s, host=host or s.host, port=s.port if port is None else port,
                     metrics_port=s.metrics_port if metrics_port is None else metrics_port)
    clash = port_clash(server.port, server.metrics_port)
    if clash:
        raise ConfigError([f"server.metrics_port: {clash}"])
    return replace(config, server=server, file_listen=(s.host, s.port, s.metrics_port))


def _server(s: Section) -> ServerConfig:
    d = ServerConfig()
    port = s.integer("port", d.port, 0)
    metrics_port = s.integer("metrics_port", d.metrics_port, 0)
    clash = port_clash(port, metrics_port)
    if clash:
        s.errs.add(s.at("metrics_port"), clash)
    return ServerConfig(
        host=s.get("host", str, d.host),
        port=port,
        metrics_port=metrics_port,
        max_body_bytes=s.integer("max_body_bytes", d.max_body_bytes, 1),
        drain_s=s.number("drain_s", d.drain_s),
        websocket_idle_s=s.number("websocket_idle_s", d.websocket_idle_s, 1.0),
        websocket_max_per_key=s.integer("websocket_max_per_key", d.websocket_max_per_key, 1),
        keepalive_after_s=s.number("keepalive_after_s", d.keepalive_after_s),
        max_connections=s.optional_int("max_connections"),
        request_head_timeout_s=s.number("request_head_timeout_s", d.request_head_timeout_s, 0.1),
        send_timeout_s=s.number("send_timeout_s", d.send_timeout_s, 0.1),
        loop_turn_ms=s.number("loop_turn_ms", d.loop_turn_ms),
        sched_slice_us=_sched_slice(s),
        tls=edges.tls(Section(s.raw.get("tls"), s.at("tls"), s.errs, ("cert_file", "key_file", "key_password"))),
        cors=edges.cors(Section(s.raw.get("cors"), s.at("cors"), s.errs, ("allow_origins", "max_age_s"))),
    )


def _sched_slice(s: Section) -> int:
    """0 (the kernel's default) or a slice Linux accepts as given: it clamps to 0.1-100 ms, and a value
    it would change is refused here rather than silently become another."""
    us = s.integer("sched_slice_us", 0, 0)
    if us and not SLICE_MIN_US <= us <= SLICE_MAX_US:
        s.errs.add(s.at("sched_slice_us"), f"must be 0 (the kernel's default) or {SLICE_MIN_US}-{SLICE_MAX_US}")
        return 0
    return us


def _api_key(path: str, raw: Any, errs: Errors) -> ApiKey:
    s = Section(raw, path, errs, ("name", "key", "key_sha256", "models", "rpm", "tpm", "budget_usd",
                                   "budget_period"))
    name, key, digest = key_identity(s, path)
    budget = s.number("budget_usd", 0.0) if s.has("budget_usd") else None
    return ApiKey(
        name=name, key=key or None, key_sha256=digest or None,
        models=s.strings("models") if s.has("models") else None,
        rpm=s.optional_int("rpm", 0), tpm=s.optional_int("tpm", 0), budget_usd=budget,  # 0: refuse every request
        budget_period=s.choice("budget_period", ("day", "month"), "day"),  # type: ignore[arg-type]
    )


def _auth(s: Section, models: Mapping[str, ModelConfig]) -> AuthConfig:
    keys = tuple(_api_key(p, raw, s.errs) for p, raw in s.items("keys"))
    _unique_keys(s.at("keys"), keys, s.errs)
    jwt = jwt_config(Section(s.raw.get("jwt"), s.at("jwt"), s.errs, JWT_KEYS), models)
    return AuthConfig(keys=keys, allow_unauthenticated=s.get("allow_unauthenticated", bool, False), jwt=jwt)


def _unique_keys(path: str, keys: tuple[ApiKey, ...], errs: Errors) -> None:
    """Two keys with one name, or one secret (a `key`, or a `key_sha256` equal to another's digest),
    are an error naming both paths: with one secret the gateway could tell them apart by order alone,
    so one team's model list and budget would be another's. The secret itself is never quoted."""
    names: dict[str, int] = {}
    digests: dict[str, int] = {}
    for i, k in enumerate(keys):
        if k.name in names:
            errs.add(f"{path}[{i}].name", f'duplicate key name "{k.name}" (also {path}[{names[k.name]}])')
        names.setdefault(k.name, i)
        digest = k.key_sha256 or (hashlib.sha256(k.key.encode()).hexdigest() if k.key else None)
        if digest is None:
            continue
        if digest in digests:
            field_ = "key_sha256" if k.key_sha256 else "key"
            errs.add(f"{path}[{i}].{field_}", f"the same secret as {path}[{digests[digest]}]: every key needs its own")
        digests.setdefault(digest, i)


def _deployment(path: str, raw: Any, providers: Mapping[str, ProviderConfig], errs: Errors) -> Deployment:
    s = Section(raw, path, errs, ("provider", "model", "price", "prefill", "tier", "weight"))
    provider = s.get("provider", str, "")
    if provider not in providers:
        errs.add(s.at("provider"), f'unknown provider "{provider}"' if provider else "required")
    model = s.get("model", str, "")
    if not model:
        errs.add(s.at("model"), "required")
    price = _price(Section(s.raw.get("price"), s.at("price"), errs,
                           ("input", "output", "cached_input", "cache_creation_input", "cache_write",
                            "cache_creation_input_1h")))
    kind = PROVIDERS.get(providers[provider].type) if provider in providers else None
    prefill = s.get("prefill", bool, kind is not None and kind.prefill)  # unset: the type's own (Anthropic's)
    return Deployment(provider=provider, model=model, price=price, prefill=prefill,
                      tier=s.integer("tier", 0), weight=s.number("weight", 1.0, finite=True))


def _price(p: Section) -> Price:
    """USD per million tokens; a cache price left unset is charged as input (docs/caching.md, Cost)."""
    def optional(key: str) -> float | None:
        return p.number(key, 0.0, finite=True) if p.has(key) else None
    if p.has("cache_creation_input") and p.has("cache_write"):
        p.errs.add(p.at("cache_write"), "the same price as cache_creation_input: give one of them")
    return Price(input=p.number("input", 0.0, finite=True), output=p.number("output", 0.0, finite=True),
                 cached_input=optional("cached_input"),
                 cache_creation_input=optional("cache_creation_input") if p.has("cache_creation_input")
                 else optional("cache_write"),
                 cache_creation_input_1h=optional("cache_creation_input_1h"))


def _prompt_cache(s: Section) -> bool:
    """`prompt_cache: {breakpoints: off | auto}`: True for auto."""
    p = Section(s.raw.get("prompt_cache"), s.at("prompt_cache"), s.errs, ("breakpoints",))
    return p.choice("breakpoints", ("off", "auto"), "off") == "auto"


def _retry(s: Section) -> RetryPolicy:
    d = RetryPolicy()
    return RetryPolicy(
        max_attempts=s.integer("max_attempts", d.max_attempts, 1),
        per_deployment=s.integer("per_deployment", d.per_deployment, 1),
        initial_backoff_ms=s.number("initial_backoff_ms", d.initial_backoff_ms),
        max_backoff_ms=s.number("max_backoff_ms", d.max_backoff_ms),
    )


def _model(path: str, raw: Any, ctx: _Ctx) -> ModelConfig:
    s = Section(raw, path, ctx.errs, ("name", "deployments", "routing", "retry", "hedge_after_ms",
                                       "guardrails", "cache", "redaction", "continuation", "aliases", "affinity",
                                       "prompt_cache"))
    name = s.get("name", str, "")
    if not _NAME.match(name):
        ctx.errs.add(s.at("name"), "required: letters, digits, _ . : - (max 63)")
    deployments = tuple(_deployment(p, r, ctx.providers, ctx.errs) for p, r in s.items("deployments"))
    if not deployments:
        ctx.errs.add(s.at("deployments"), "at least one deployment is required")
    routing = s.choice("routing", ROUTING_POLICIES, "ordered")
    _check_routing(s, routing, deployments)
    guardrails = s.strings("guardrails")
    for i, g in enumerate(guardrails):
        if g not in ctx.guardrail_names:
            ctx.errs.add(f"{s.at('guardrails')}[{i}]", f'unknown guardrail "{g}"')
    redaction = s.word("redaction", "off")  # a profile name, or off (bare or quoted)
    if redaction != "off" and redaction not in ctx.profile_names:
        ctx.errs.add(s.at("redaction"), f'unknown redaction profile "{redaction}"')
    return ModelConfig(
        name=name, deployments=deployments,
        routing=routing,  # type: ignore[arg-type]
        retry=_retry(Section(s.raw.get("retry"), s.at("retry"), ctx.errs,
                              ("max_attempts", "per_deployment", "initial_backoff_ms", "max_backoff_ms"))),
        hedge_after_ms=s.number("hedge_after_ms", 0.0), guardrails=guardrails,
        cache=s.get("cache", bool, False), redaction=redaction,
        continuation=s.choice("continuation", ("on", "off"), "off") == "on",
        aliases=s.strings("aliases"), affinity=s.choice("affinity", ("off", "session"), "off"),  # type: ignore[arg-type]
        auto_breakpoints=_prompt_cache(s),
    )


def _check_routing(s: Section, routing: str, deployments: tuple[Deployment, ...]) -> None:
    """What the policies need of the deployments (docs/routing.md): some weight above 0; with `cost`, a
    price on every deployment (an unpriced one would look free and win every request)."""
    if deployments and all(d.weight == 0 for d in deployments):
        s.errs.add(s.at("deployments"), "every weight is 0: at least one deployment needs a weight above 0")
    if routing == "cost" and deployments:
        for path, raw in s.items("deployments"):
            if isinstance(raw, dict) and raw.get("price") is None:
                s.errs.add(f"{path}.price", "required with routing: cost")


class _Ctx:
    def __init__(self, errs: Errors, providers: Mapping[str, ProviderConfig],
                 guardrail_names: set[str], profile_names: set[str]):
        self.errs, self.providers = errs, providers
        self.guardrail_names, self.profile_names = guardrail_names, profile_names


_TOP = ("server", "auth", "state", "providers", "models", "guardrails", "redaction", "cache", "logging",
        "telemetry", "admin", "store")


def parse_config(raw: Any, env: Mapping[str, str] | None = None) -> Config:
    """Validate a raw YAML document into a `Config`, or raise `ConfigError` with every problem."""
    errs = Errors()
    config = _parse(raw, os.environ if env is None else env, errs)
    if errs.items:
        raise ConfigError(errs.items)
    return config


def _parse(raw: Any, env: Mapping[str, str], errs: Errors) -> Config:
    raw = expand_env(raw, "", env, errs)
    top = Section(raw, "", errs, _TOP)
    providers: dict[str, ProviderConfig] = {}
    for pname, praw in top.get("providers", dict, {}).items():
        providers[str(pname)] = provider_config(str(pname), f"providers.{pname}", praw, errs)
    guardrails: dict[str, GuardrailConfig] = {}
    for gpath, graw in top.items("guardrails"):
        g = guardrail(gpath, graw, errs)
        if g.name in guardrails:
            errs.add(f"{gpath}.name", f'duplicate guardrail "{g.name}"')
        guardrails[g.name] = g
    red = Section(top.raw.get("redaction"), "redaction", errs, ("profiles",))
    profiles = {
        str(n): profile(str(n), f"redaction.profiles.{n}", r, errs, rule_validator())
        for n, r in red.get("profiles", dict, {}).items()
    }
    ctx = _Ctx(errs, providers, set(guardrails), set(profiles))
    models: dict[str, ModelConfig] = {}
    named: list[Named] = []
    for mpath, mraw in top.items("models"):
        m = _model(mpath, mraw, ctx)
        if m.name in models:
            errs.add(f"{mpath}.name", f'duplicate model "{m.name}"')
        models[m.name] = m
        named.append(Named(mpath, m.name, m.aliases, tuple(d.model for d in m.deployments)))
    model_names, problems = compile_names(named)
    for path, problem in problems:
        errs.add(path, problem)
    auth = _auth(Section(top.raw.get("auth"), "auth", errs, ("keys", "allow_unauthenticated", "jwt")), models)
    for ki, key in enumerate(auth.keys):
        for mi, mname in enumerate(key.models or ()):
            if mname not in models:
                errs.add(f"auth.keys[{ki}].models[{mi}]", not_a_model(mname, model_names))
    st = Section(top.raw.get("state"), "state", errs, STATE_KEYS)
    c = Section(top.raw.get("cache"), "cache", errs, ("enabled", "ttl_s", "max_entries", "max_bytes"))
    lg = Section(top.raw.get("logging"), "logging", errs, ("level", "format"))
    admin = admin_config(Section(top.raw.get("admin"), "admin", errs, ADMIN_KEYS), auth)
    store = store_config(Section(top.raw.get("store"), "store", errs, STORE_KEYS), admin)
    config = Config(
        server=_server(Section(top.raw.get("server"), "server", errs,
                                ("host", "port", "metrics_port", "max_body_bytes", "drain_s", "websocket_idle_s",
                                 "websocket_max_per_key",
                                 "keepalive_after_s", "max_connections", "request_head_timeout_s",
                                 "send_timeout_s", "loop_turn_ms", "sched_slice_us", "tls", "cors"))),
        auth=auth,
        state=state_config(st),
        providers=MappingProxyType(providers), models=MappingProxyType(models),
        guardrails=MappingProxyType(guardrails), redaction_profiles=MappingProxyType(profiles),
        cache=CacheConfig(enabled=c.get("enabled", bool, False), ttl_s=c.number("ttl_s", 300.0, 0.001),
                          max_entries=c.integer("max_entries", 10_000, 1),
                          max_bytes=c.integer("max_bytes", CACHE_MAX_BYTES, 1)),
        logging=LoggingConfig(level=lg.choice("level", ("debug", "info", "warning", "error"), "info"),
                              format=lg.choice("format", ("json", "console"), "json")),  # type: ignore[arg-type]
        telemetry=telemetry_config(Section(top.raw.get("telemetry"), "telemetry", errs, TELEMETRY_KEYS), env),
        egress=edges.egress_from_env(env, errs),
        admin=admin, store=store, model_names=model_names,
    )
    if not models:
        errs.add("models", "at least one model is required")
    if not config.auth.keys and not config.auth.allow_unauthenticated and store.url is None \
            and config.auth.jwt is None:
        errs.add("auth", "no keys configured: add auth.keys or set auth.allow_unauthenticated: true")
    return config


def load_config(path: str, env: Mapping[str, str] | None = None) -> Config:
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None)  # the parser's words, never the document's text
        raise ConfigError([f"{path}: not valid YAML{where}" + (f": {problem}" if problem else "")]) from None
    return parse_config(raw, env)


# One entry of every list and named mapping, so that parsing it builds every section there is.
_EVERY_SECTION: dict[str, Any] = {
    "auth": {"keys": [{"name": "k", "key": "x"}],
             "jwt": {"issuer": "https://idp", "audience": "a", "groups": {"g": {"team": "t"}}}},
    "providers": {"p": {"type": "mock"}},
    "models": [{"name": "m", "deployments": [{"provider": "p", "model": "x"}]}],
    "guardrails": [{"name": "g", "terms": ["x"]}],
    "redaction": {"profiles": {"r": {"custom": [{"name": "c", "pattern": "x"}]}}},
    "admin": {"keys": [{"name": "a", "key": "y"}], "jwt_groups": {"g": {"role": "viewer"}},
              "console": {"oidc_client_id": "c"}},
}
_NAMED = (("providers.p.", "providers.<name>."), ("redaction.profiles.r.", "redaction.profiles.<name>."),
          ("auth.jwt.groups.g.", "auth.jwt.groups.<group>."), ("admin.jwt_groups.g.", "admin.jwt_groups.<group>."))


def config_keys() -> set[str]:
    """Every config key this code accepts, as `server.tls.cert_file`, `models[].retry.max_attempts`,
    `providers.<name>.proxy`: what docs/reference.md must list (tests/unit/test_reference_doc.py)."""
    errs = Errors()
    _parse(_EVERY_SECTION, {}, errs)
    out: set[str] = set()
    for key in errs.keys:
        key = re.sub(r"\[\d+\]", "[]", key)
        for concrete, pattern in _NAMED:
            key = key.replace(concrete, pattern)
        out.add(key)
    return out


def config_path_from_env(cli_path: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """`--config` wins; else `GATEWAY_CONFIG`; else None (the embedded default)."""
    return cli_path or (os.environ if env is None else env).get("GATEWAY_CONFIG") or None


def embedded_default() -> Config:
    """The demo: loopback only, the `mock` provider behind model `demo`, no auth (docs/reference.md, "Commands")."""
    raw = {
        "server": {"host": "127.0.0.1", "port": 8080, "metrics_port": 9464},
        "auth": {"allow_unauthenticated": True},
        "providers": {"demo": {"type": "mock"}},
        "models": [{"name": "demo", "deployments": [{"provider": "demo", "model": "demo-1"}],
                    "redaction": "default"}],
        "redaction": {"profiles": {"default": {"rules": ["secrets"]}}},
    }
    config = parse_config(raw, env={})
    errs = Errors()  # the demo is traced too when the OTEL_* variables say so
    telemetry = telemetry_config(Section(None, "telemetry", errs, TELEMETRY_KEYS), os.environ)
    if errs.items:
        raise ConfigError(errs.items)
    fields = {f: getattr(config, f) for f in config.__dataclass_fields__}
    return Config(**{**fields, "telemetry": telemetry, "is_demo": True})
