"""`telemetry` and the standard OTEL_* variables -> TelemetryConfig (CONTRACT §8), read in one place."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ConfigError, parse_config

BASE: dict[str, Any] = {"auth": {"allow_unauthenticated": True}, "providers": {"d": {"type": "mock"}},
                        "models": [{"name": "m", "deployments": [{"provider": "d", "model": "x"}]}]}


def telemetry(env: dict[str, str], **section: Any) -> Any:
    return parse_config({**BASE, **({"telemetry": section} if section else {})}, env=env).telemetry


def test_off_without_an_endpoint() -> None:
    assert not telemetry({}).enabled
    assert not telemetry({"OTEL_SERVICE_NAME": "x"}).enabled


def test_the_base_endpoint_gets_the_traces_path_and_the_signal_endpoint_is_used_as_it_is() -> None:
    assert telemetry({}, otlp_endpoint="http://c:4318/").traces_endpoint == "http://c:4318/v1/traces"
    assert telemetry({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}).traces_endpoint == "http://c:4318/v1/traces"
    t = telemetry({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:9/custom", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://o"})
    assert t.traces_endpoint == "http://c:9/custom"


def test_the_file_wins_over_the_environment() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318", "OTEL_SERVICE_NAME": "from-env",
           "OTEL_TRACES_SAMPLER": "always_on"}
    t = telemetry(env, otlp_endpoint="http://file:4318", service_name="from-file", sampling_ratio=0.25)
    assert (t.traces_endpoint, t.service_name) == ("http://file:4318/v1/traces", "from-file")
    assert (t.sampler, t.sampling_ratio) == ("parentbased_traceidratio", 0.25)


def test_respect_parent_sampling_says_whether_a_client_traceparent_decides() -> None:
    assert telemetry({}).sampler == "parentbased_traceidratio"  # OTel's default: the parent decides
    assert telemetry({}, respect_parent_sampling=False).sampler == "traceidratio"
    assert telemetry({}, sampling_ratio=0.5, respect_parent_sampling=False).sampler == "traceidratio"
    env = {"OTEL_TRACES_SAMPLER": "parentbased_always_on"}
    assert telemetry(env, respect_parent_sampling=False).sampler == "always_on"  # the file wins
    assert telemetry({"OTEL_TRACES_SAMPLER": "always_on"}, respect_parent_sampling=True).sampler == \
        "parentbased_always_on"
    with pytest.raises(ConfigError, match=r"telemetry\.respect_parent_sampling"):
        telemetry({}, respect_parent_sampling="yes")


def test_the_standard_variables_are_honoured() -> None:
    t = telemetry({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_SAMPLER": "traceidratio",
                   "OTEL_TRACES_SAMPLER_ARG": "0.1", "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20t0k",
                   "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.name=rs",
                   "OTEL_EXPORTER_OTLP_TIMEOUT": "2500", "OTEL_BSP_MAX_QUEUE_SIZE": "64"})
    assert (t.sampler, t.sampling_ratio, t.service_name) == ("traceidratio", 0.1, "rs")
    assert dict(t.headers) == {"authorization": "Bearer t0k"}
    assert dict(t.resource_attributes) == {"deployment.environment": "prod"}
    assert (t.export_timeout_s, t.max_queue_size) == (2.5, 64)
    assert "t0k" not in repr(t)  # collector credentials never reach a log line


@pytest.mark.parametrize("env", [{"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}])
def test_disabled_by_the_standard_switches(env: dict[str, str]) -> None:
    assert not telemetry({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", **env}).enabled


@pytest.mark.parametrize(("env", "section", "where"), [
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, {}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, {}, "OTEL_TRACES_EXPORTER"),
    ({"OTEL_TRACES_SAMPLER": "sometimes"}, {}, "OTEL_TRACES_SAMPLER"),
    ({}, {"sampling_ratio": 2}, "telemetry.sampling_ratio"),
    ({}, {"otlp_endpoint": "collector:4318"}, "telemetry.otlp_endpoint"),
    ({}, {"colour": "blue"}, "telemetry.colour"),
])
def test_errors_name_the_key_or_the_variable(env: dict[str, str], section: dict[str, Any], where: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, "telemetry": {"otlp_endpoint": "http://c:4318", **section}}, env=env)
    assert any(e.startswith(where) for e in err.value.errors), err.value.errors


# -- the GenAI metrics (issue #62, docs/observability.md) --------------------------------------------------


def test_genai_metrics_are_on_by_default_and_pushed_only_with_otel_metrics_exporter_otlp() -> None:
    t = telemetry({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert t.genai_metrics and not t.semconv_latest_experimental
    assert t.metrics_endpoint is None  # a traces endpoint alone starts no metrics push
    assert not telemetry({}, genai_metrics=False).genai_metrics
    assert telemetry({"OTEL_METRICS_EXPORTER": "none"}).metrics_endpoint is None


def test_the_metrics_endpoint_the_signal_variable_then_the_base_then_the_default() -> None:
    otlp = {"OTEL_METRICS_EXPORTER": "otlp"}
    assert telemetry(otlp).metrics_endpoint == "http://localhost:4318/v1/metrics"
    assert telemetry({**otlp, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}).metrics_endpoint == (
        "http://c:4318/v1/metrics")
    t = telemetry({**otlp, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://o", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://m/x",
                   "OTEL_METRIC_EXPORT_INTERVAL": "15000", "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "Auth=a%20b"})
    assert (t.metrics_endpoint, t.metric_export_interval_s, dict(t.metrics_headers)) == (
        "http://m/x", 15.0, {"auth": "a b"})
    assert telemetry({**otlp, "OTEL_SDK_DISABLED": "true"}).metrics_endpoint is None


def test_the_latest_experimental_genai_names_are_opted_into_by_the_conventions_variable() -> None:
    assert telemetry({"OTEL_SEMCONV_STABILITY_OPT_IN": "http, gen_ai_latest_experimental"}).semconv_latest_experimental
    assert not telemetry({"OTEL_SEMCONV_STABILITY_OPT_IN": "http"}).semconv_latest_experimental


@pytest.mark.parametrize("env", [{"OTEL_METRICS_EXPORTER": "zipkin"},
                                 {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"},
                                 {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "ftp://x"}])
def test_unsupported_metrics_exports_are_config_errors(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        telemetry(env)
