"""A provider's section of the config (`providers.<name>`, docs/reference.md, "Config keys"; docs/cloud-providers.md)
-> its `ProviderConfig`: type, base URL (or the type's default), credentials, headers, timeouts, breaker, egress, the
clouds' settings. Errors name the key path; secret values never appear in them."""

from __future__ import annotations

import dataclasses
import re
from types import MappingProxyType
from typing import Any

from gateway.config import edges
from gateway.config.aws_config import AWS_KEYS, aws_settings
from gateway.config.reader import Errors, Section, http_url_problem
from gateway.config.types import BreakerConfig, ProviderConfig, Timeouts
from gateway.providers.registry import PROVIDERS, ProviderKind


def _timeouts(s: Section) -> Timeouts:
    d = Timeouts()
    return Timeouts(
        connect_s=s.number("connect_s", d.connect_s, 0.001),
        first_token_s=s.number("first_token_s", d.first_token_s, 0.001),
        idle_s=s.number("idle_s", d.idle_s, 0.001),
        total_s=s.number("total_s", d.total_s, 0.001),
    )


def _breaker(s: Section) -> BreakerConfig:
    d = BreakerConfig()
    return BreakerConfig(failures=s.integer("failures", d.failures, 1),
                         window_s=s.number("window_s", d.window_s, 0.001),
                         cooldown_s=s.number("cooldown_s", d.cooldown_s))


PROVIDER_FIELDS = ("type", "base_url", "api_key", "headers", "timeouts", "api_version", "anthropic_version",
                   "ttft_ms", "token_delay_ms", "breaker", "proxy", "forward_headers", "learn_ttl_s", "project",
                   "location", "credentials_file", "responses")


def _base_url(s: Section, kind: ProviderKind | None) -> tuple[str, bool]:
    """The configured `base_url`, and whether the type's default stands in for a missing one."""
    base_url = s.get("base_url", str, "").rstrip("/")
    optional = kind is not None and kind.default_base_url is not None and not base_url
    if kind is not None and kind.remote and not optional:
        if not re.match(r"^https?://[^/\s]+", base_url):
            s.errs.add(s.at("base_url"), "required: an http:// or https:// URL")
        elif (problem := http_url_problem(base_url)) is not None:
            s.errs.add(s.at("base_url"), problem)
    return base_url, optional


def provider_config(name: str, path: str, raw: Any, errs: Errors) -> ProviderConfig:
    s = Section(raw, path, errs, (*PROVIDER_FIELDS, *AWS_KEYS))
    types = tuple(PROVIDERS)  # read now: a type `registry.register` added counts
    ptype = s.choice("type", types, "mock") if s.has("type") else ""
    if not ptype:
        errs.add(s.at("type"), f"required: one of {', '.join(types)}")
    kind = PROVIDERS.get(ptype)
    aws = aws_settings(s, kind is not None and kind.auth == "sigv4")
    base_url, optional = _base_url(s, kind)
    for key in kind.requires if kind is not None else ():
        if not s.has(key):
            errs.add(s.at(key), f"required for type {ptype}")
    headers = s.get("headers", dict, {})
    for hk, hv in headers.items():
        if not isinstance(hv, str):
            errs.add(f"{s.at('headers')}.{hk}", "must be a string")
    proxy, use_env_proxy = edges.provider_proxy(s)
    cfg = ProviderConfig(
        name=name, type=ptype or "mock", genai_name=kind.genai_name if kind is not None else "",
        proxy=proxy, use_env_proxy=use_env_proxy,
        forward_headers=edges.forward_headers(s, kind.forward_headers if kind is not None else ()),
        base_url=base_url, api_key=s.get("api_key", str, "") or None,
        headers=MappingProxyType({str(k): str(v) for k, v in headers.items()}),
        timeouts=_timeouts(Section(s.raw.get("timeouts"), s.at("timeouts"), errs,
                                    ("connect_s", "first_token_s", "idle_s", "total_s"))),
        breaker=_breaker(Section(s.raw.get("breaker"), s.at("breaker"), errs,
                                  ("failures", "window_s", "cooldown_s"))),
        api_version=s.get("api_version", str, "") or None,
        anthropic_version=s.get("anthropic_version", str, "2023-06-01"), aws=aws,
        responses=_responses(s, kind),
        learn_ttl_s=s.number("learn_ttl_s", 600.0, 0.001),
        ttft_ms=s.number("ttft_ms", 120.0), token_delay_ms=s.number("token_delay_ms", 15.0),
        project=s.get("project", str, "") or None, location=s.get("location", str, "") or None,
        credentials_file=s.get("credentials_file", str, "") or None,
    )
    if optional and kind is not None and kind.default_base_url is not None:
        cfg = dataclasses.replace(cfg, base_url=kind.default_base_url(cfg))
    return cfg


def _responses(s: Section, kind: ProviderKind | None) -> bool:
    """`responses: false`: an `openai`-type server without `/responses`, served by the Responses bridge
    (docs/responses-bridge.md). Other types know whether they have it."""
    given = s.get("responses", bool, None)
    if given is not None and kind is not None and not kind.responses_optional:
        s.errs.add(f"{s.path}.{PROVIDER_FIELDS[-1]}",
                   "not a key of this provider type (it knows whether it has the Responses API)")
    return given is not False
