"""The `telemetry` section and the standard `OTEL_*` environment variables -> `TelemetryConfig`.

Read here, once, like the rest of the config (the SDK is then built from these values only, so what it
would read from the environment by itself is overridden). A key in the file wins over its variable; a
variable over the default. Tracing is on when an endpoint is known (`telemetry.otlp_endpoint`,
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`), unless `OTEL_SDK_DISABLED=true` or
`OTEL_TRACES_EXPORTER=none`. Only OTLP over HTTP (protobuf) is exported.
See https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/ and
https://opentelemetry.io/docs/specs/otel/protocol/exporter/ (the `/v1/traces` path rule).
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gateway.config.reader import Errors, Section, http_url_problem
from gateway.config.types import TelemetryConfig

KEYS = ("otlp_endpoint", "service_name", "sampling_ratio", "respect_parent_sampling", "headers", "export_timeout_s",
        "max_queue_size", "genai_metrics")
SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
            "parentbased_traceidratio")
_TRACES_PATH = "/v1/traces"
_METRICS_PATH = "/v1/metrics"
# OTEL_SEMCONV_STABILITY_OPT_IN's value for the GenAI conventions' latest experimental version
GENAI_LATEST = "gen_ai_latest_experimental"


def telemetry_config(s: Section, env: Mapping[str, str]) -> TelemetryConfig:
    return dataclasses.replace(_traces_config(s, env), **_metrics_config(s, env))


def _metrics_config(s: Section, env: Mapping[str, str]) -> dict[str, Any]:
    """The GenAI metrics' switches and their OTLP push (docs/observability.md). The push is opt-in by
    OTEL_METRICS_EXPORTER=otlp alone (the SDK's default exporter is otlp, but a gateway that exports
    /metrics should not also start pushing because a traces endpoint was set)."""
    opt_in = {v.strip() for v in env.get("OTEL_SEMCONV_STABILITY_OPT_IN", "").split(",")}
    out: dict[str, Any] = {"genai_metrics": s.get("genai_metrics", bool, True),
                           "semconv_latest_experimental": GENAI_LATEST in opt_in}
    exporter = env.get("OTEL_METRICS_EXPORTER", "").strip().lower()
    if exporter not in ("", "none", "otlp", "prometheus"):
        s.errs.add("OTEL_METRICS_EXPORTER", f'only "otlp", "prometheus" or "none" is supported, got "{exporter}"')
    if exporter != "otlp" or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return out
    protocol = (env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")).strip()
    if protocol and protocol != "http/protobuf":
        s.errs.add("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", f'only "http/protobuf" is supported, got "{protocol}"')
    signal = env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "").strip()
    base = (s.get("otlp_endpoint", str, "") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")).strip().rstrip("/")
    url = signal or (base + _METRICS_PATH if base else "http://localhost:4318" + _METRICS_PATH)
    out["metrics_endpoint"] = _checked(url, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", s.errs)
    out["metrics_headers"] = MappingProxyType(_pairs(
        env.get("OTEL_EXPORTER_OTLP_METRICS_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS", ""),
        "OTEL_EXPORTER_OTLP_HEADERS", s.errs))
    interval_ms = _env_number(env, "OTEL_METRIC_EXPORT_INTERVAL", 60000.0, s.errs)
    out["metric_export_interval_s"] = max(interval_ms, 10.0) / 1000
    return out


def _traces_config(s: Section, env: Mapping[str, str]) -> TelemetryConfig:
    d = TelemetryConfig()
    errs = s.errs
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return d
    exporter = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if exporter == "none":
        return d
    if exporter != "otlp":
        errs.add("OTEL_TRACES_EXPORTER", f'only "otlp" or "none" is supported, got "{exporter}"')
    for var in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = env.get(var, "").strip()
        if protocol and protocol != "http/protobuf":
            errs.add(var, f'only "http/protobuf" is supported, got "{protocol}"')
            break
        if protocol:
            break
    sampler = env.get("OTEL_TRACES_SAMPLER", d.sampler).strip().lower() or d.sampler
    if sampler not in SAMPLERS:
        errs.add("OTEL_TRACES_SAMPLER", f"must be one of {', '.join(SAMPLERS)}")
        sampler = d.sampler
    ratio = _env_number(env, "OTEL_TRACES_SAMPLER_ARG", d.sampling_ratio, errs)
    if s.has("sampling_ratio"):
        ratio, sampler = s.number("sampling_ratio", 1.0), "parentbased_traceidratio"
    if not 0.0 <= ratio <= 1.0:
        errs.add(s.at("sampling_ratio"), "must be between 0 and 1")
    if s.has("respect_parent_sampling"):
        sampler = _parent_based(sampler, s.get("respect_parent_sampling", bool, True))
    resource = _pairs(env.get("OTEL_RESOURCE_ATTRIBUTES", ""), "OTEL_RESOURCE_ATTRIBUTES", errs)
    service = s.get("service_name", str, "") or env.get("OTEL_SERVICE_NAME", "") or resource.pop(
        "service.name", d.service_name)
    resource.pop("service.name", None)
    headers = _pairs(env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS", ""),
                     "OTEL_EXPORTER_OTLP_HEADERS", errs)
    for hk, hv in s.get("headers", dict, {}).items():
        headers[str(hk).lower()] = str(hv)
    timeout_ms = _env_number(env, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", 0.0, errs) or _env_number(
        env, "OTEL_EXPORTER_OTLP_TIMEOUT", d.export_timeout_s * 1000, errs)
    return TelemetryConfig(
        traces_endpoint=_endpoint(s, env),
        service_name=service, sampler=sampler, sampling_ratio=ratio,
        headers=MappingProxyType(headers), resource_attributes=MappingProxyType(resource),
        export_timeout_s=s.number("export_timeout_s", timeout_ms / 1000, 0.001),
        max_queue_size=s.integer("max_queue_size", int(_env_number(env, "OTEL_BSP_MAX_QUEUE_SIZE",
                                                                   d.max_queue_size, errs)), 1),
        max_export_batch_size=max(1, int(_env_number(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
                                                     d.max_export_batch_size, errs))),
        schedule_delay_s=_env_number(env, "OTEL_BSP_SCHEDULE_DELAY", d.schedule_delay_s * 1000, errs) / 1000,
    )


def _parent_based(sampler: str, respect: bool) -> str:
    """`respect_parent_sampling`: whether a client's `traceparent` sampled flag decides if the request is
    traced (OTel's `parentbased_*` samplers), or the gateway's own sampler decides every request (the
    client's trace is still continued: same trace id, its span as the parent). The flag is the client's
    to set: with it respected, a client can have every one of its requests traced, or none."""
    root = sampler.removeprefix("parentbased_")
    return f"parentbased_{root}" if respect else root


def _endpoint(s: Section, env: Mapping[str, str]) -> str | None:
    """The traces URL. A base endpoint (the config key, `OTEL_EXPORTER_OTLP_ENDPOINT`) gets `/v1/traces`
    appended; the signal-specific variable is used as it is (the OTLP exporter spec)."""
    base = s.get("otlp_endpoint", str, "")
    if not base:
        signal = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        if signal:
            return _checked(signal, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", s.errs)
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        where = "OTEL_EXPORTER_OTLP_ENDPOINT"
    else:
        where = s.at("otlp_endpoint")
    if not base:
        return None
    url = base.rstrip("/")
    return _checked(url if url.endswith(_TRACES_PATH) else url + _TRACES_PATH, where, s.errs)


def _checked(url: str, where: str, errs: Errors) -> str:
    problem = http_url_problem(url)
    if problem is not None:
        errs.add(where, problem)
    return url


def _pairs(raw: str, where: str, errs: Errors) -> dict[str, str]:
    """`k1=v1,k2=v2` with percent-encoded values (W3C Baggage octets), as the OTEL_* lists are written.
    Values are never quoted in an error: a header list holds credentials."""
    out: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            errs.add(where, "must be a comma-separated list of key=value")
            continue
        out[name.strip().lower() if where.endswith("HEADERS") else name.strip()] = urllib.parse.unquote(
            value.strip())
    return out


def _env_number(env: Mapping[str, str], name: str, default: float, errs: Errors) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        errs.add(name, "must be a number")
        return default
    if value < 0:
        errs.add(name, "must be >= 0")
        return default
    return value
