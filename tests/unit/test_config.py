"""Config parsing: env interpolation, key paths in every error, secrets never in messages."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.app import server_limits
from gateway.config import ConfigError, embedded_default, parse_config

BASE: dict[str, Any] = {
    "auth": {"allow_unauthenticated": True},
    "providers": {"p": {"type": "openai", "base_url": "https://x.example/v1", "api_key": "${KEY}"}},
    "models": [{"name": "m", "deployments": [{"provider": "p", "model": "up"}]}],
}


def errors(raw: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, env=env or {"KEY": "k"})
    return info.value.errors


def test_env_interpolation_with_and_without_default() -> None:
    raw = {**BASE, "server": {"port": "${PORT:-9000}", "host": "${HOST}"}}
    config = parse_config(raw, env={"KEY": "sk-secret", "HOST": "0.0.0.0"})
    assert config.server.port == 9000 and config.server.host == "0.0.0.0"
    assert config.providers["p"].api_key == "sk-secret"
    assert "sk-secret" not in repr(config.providers["p"])
    assert errors(raw, {"HOST": "h"}) == [
        "providers.p.api_key: environment variable KEY is not set and has no default"]



def test_an_unset_key_variable_is_one_error_not_two() -> None:
    """A key whose secret is `${NAME}` unset: the unset variable, and no "exactly one of key or
    key_sha256" or secret clash about the empty value it left (docs/reference.md, Commands)."""
    raw = {**BASE, "auth": {"keys": [{"name": "a", "key": "${A_KEY}"}, {"name": "b", "key": "${B_KEY}"}]},
           "admin": {"keys": [{"name": "p", "key": "${ADMIN_KEY}"}]}, "store": {"url": "sqlite:///x.db"}}
    assert errors(raw, {"KEY": "k"}) == [
        "auth.keys[0].key: environment variable A_KEY is not set and has no default",
        "auth.keys[1].key: environment variable B_KEY is not set and has no default",
        "admin.keys[0].key: environment variable ADMIN_KEY is not set and has no default"]


@pytest.mark.parametrize(("patch", "expected"), [
    ({"server": {"port": "eighty"}}, "server.port: must be int, got str"),
    ({"server": {"nope": 1}}, "server.nope: unknown key"),
    ({"server": {"loop_turn_ms": -1}}, "server.loop_turn_ms: must be >= 0"),
    ({"server": {"sched_slice_us": 50}}, "server.sched_slice_us: must be 0 (the kernel's default) or 100-100000"),
    ({"server": {"sched_slice_us": 200_000}},
     "server.sched_slice_us: must be 0 (the kernel's default) or 100-100000"),
    ({"server": {"sched_slice_us": -1}}, "server.sched_slice_us: must be >= 0"),
    ({"models": [{"name": "m", "deployments": [{"provider": "q", "model": "x"}]}]},
     'models[0].deployments[0].provider: unknown provider "q"'),
    ({"models": [{"name": "m", "routing": "random", "deployments": [{"provider": "p", "model": "x"}]}]},
     'models[0].routing: must be one of ordered, balanced, weighted, latency, cost, got "random"'),
    ({"guardrails": [{"name": "g", "type": "regex", "patterns": ["("]}]}, "guardrails[0].patterns[0]: invalid"),
    ({"redaction": {"profiles": {"r": {"rules": ["nonsense"]}}}},
     'redaction.profiles.r.rules[0]: unknown rule or rule set "nonsense"'),
    ({"auth": {"keys": [{"name": "a", "key": "one", "key_sha256": "ab"}]}}, "auth.keys[0]: exactly one of"),
    ({"providers": {"p": {"type": "azure", "base_url": "https://a.example"}}}, "providers.p.api_version: required"),
    ({"auth": {}}, "auth: no keys configured"),
    # an IdP team's principal is named jwt:<team>: a key of that name would share its limits, spend,
    # cached answers and response ids (docs/identity.md)
    ({"auth": {"keys": [{"name": "jwt:ml", "key": "one"}]}}, "auth.keys[0].name: jwt: names IdP callers"),
    ({"admin": {"keys": [{"name": "JWT:x", "key": "two"}]}, "store": {"url": "sqlite:///x.db"}},
     "admin.keys[0].name: jwt: names IdP callers"),
    ({"store": {"url": "sqlite:///x.db", "ledger_journal": " "}}, "store.ledger_journal: must be auto, off or a"),
])
def test_every_error_names_its_key_path(patch: dict[str, Any], expected: str) -> None:
    found = errors({**BASE, **patch})
    assert any(e.startswith(expected) for e in found), found


def test_secret_values_never_appear_in_errors() -> None:
    raw = {**BASE, "providers": {"p": {"type": "openai", "base_url": "nope", "api_key": "sk-LEAK-ME"}}}
    assert all("sk-LEAK-ME" not in e for e in errors(raw))


def test_embedded_default_is_loopback_demo() -> None:
    config = embedded_default()
    assert config.is_demo and config.server.host == "127.0.0.1"
    assert list(config.models) == ["demo"] and config.providers["demo"].type == "mock"
    assert config.auth.allow_unauthenticated and config.state.backend == "memory"


def test_custom_rule_may_not_shadow_a_builtin_and_terms_may_not_be_blank() -> None:
    found = errors({**BASE, "redaction": {"profiles": {"r": {"custom": [{"name": "email", "pattern": "x"}]}}},
                    "guardrails": [{"name": "g", "type": "terms", "terms": ["ok", "  "]}]})
    assert 'redaction.profiles.r.custom[0].name: "email" is a built-in rule name; choose another' in found
    assert "guardrails[0].terms[1]: must not be blank" in found


def test_the_sched_slice_is_off_unless_set() -> None:
    assert parse_config(BASE, env={"KEY": "k"}).server.sched_slice_us == 0
    assert parse_config({**BASE, "server": {"sched_slice_us": 100}}, env={"KEY": "k"}).server.sched_slice_us == 100


def test_the_loop_turn_reaches_the_servers_limits_in_seconds() -> None:
    assert server_limits(parse_config(BASE, env={"KEY": "k"}).server).turn_s == 0.002
    config = parse_config({**BASE, "server": {"loop_turn_ms": 0}}, env={"KEY": "k"})
    assert server_limits(config.server).turn_s == 0.0


def test_the_ledger_journal_is_auto_unless_set() -> None:
    assert parse_config({**BASE, "store": {"url": "sqlite:///x.db"}}, env={"KEY": "k"}).store.ledger_journal == "auto"
    pg = {"url": "postgresql://u@h/db", "ledger_journal": "/var/lib/gateway/ledger"}
    assert parse_config({**BASE, "store": pg}, env={"KEY": "k"}).store.ledger_journal == "/var/lib/gateway/ledger"


def test_response_owners_are_kept_30_days_unless_set() -> None:
    assert parse_config(BASE, env={"KEY": "k"}).state.response_owner_ttl_s == 30 * 86_400
    custom = parse_config({**BASE, "state": {"response_owner_ttl_s": 3600}}, env={"KEY": "k"})
    assert custom.state.response_owner_ttl_s == 3600
    assert errors({**BASE, "state": {"response_owner_ttl_s": 0}}) == ["state.response_owner_ttl_s: must be >= 1"]


@pytest.mark.parametrize("url", ["http://guard:99999/check", "http://guard:80a/check", "http://guard:0/check",
                                 "http://user:hunter2@guard:65536/check", "http://[::1/check"])
def test_a_webhook_url_with_a_bad_port_is_a_config_error_that_never_quotes_it(url: str) -> None:
    """It passed the check and failed at request time as a 500 (the port was first parsed then)."""
    hook = {"name": "g", "type": "webhook", "url": url, "stage": "input"}
    found = errors({**BASE, "guardrails": [hook]})
    assert found == ["guardrails[0].url: must be an http:// or https:// URL with a port from 1 to 65535"]
    assert all("hunter2" not in e and "guard" not in e.split(":", 1)[1] for e in found)


def test_a_good_webhook_url_and_the_other_called_urls_with_a_bad_port() -> None:
    hook = {"name": "g", "type": "webhook", "url": "https://guard.example:8443/check"}
    assert parse_config({**BASE, "guardrails": [hook]}, env={"KEY": "k"}).guardrails["g"].url == hook["url"]
    bad = {**BASE, "providers": {"p": {"type": "openai", "base_url": "https://x.example:123456/v1", "api_key": "k"}},
           "telemetry": {"otlp_endpoint": "http://collector:4318x"},
           "auth": {"jwt": {"issuer": "https://idp.example", "audience": "gw", "jwks_url": "https://idp:99999/k"}}}
    found = errors(bad)
    assert "providers.p.base_url: must be an http:// or https:// URL with a port from 1 to 65535" in found
    assert "telemetry.otlp_endpoint: must be an http:// or https:// URL with a port from 1 to 65535" in found
    assert "auth.jwt.jwks_url: must be an http(s) URL with a host and a port from 1 to 65535" in found
