"""docs/reference.md keeps up with the code: every config key the parser accepts, every metric the gateway
exports, every route and every error code appears in it, as a `code span`. The check itself is shown
to fail on a copy of the reference with one entry removed."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from gateway.apis.catalog import CLIENT_APIS
from gateway.app import _routes
from gateway.config.load import config_keys, embedded_default
from gateway.errors import GatewayError
from gateway.observe.metrics import create_metrics, preinitialise

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference.md"


def metric_names() -> set[str]:
    """The exported names (`llm_gateway_requests_total`), as a scrape shows them."""
    metrics = create_metrics(CollectorRegistry())
    preinitialise(metrics, embedded_default(), CLIENT_APIS)
    assert metrics.registry is not None
    text = generate_latest(metrics.registry).decode()
    return set(re.findall(r"^# TYPE (\S+) ", text, re.M))


def error_codes() -> set[str]:
    def subclasses(cls: type[GatewayError]) -> list[type[GatewayError]]:
        return [cls, *(s for sub in cls.__subclasses__() for s in subclasses(sub))]

    return {c.code for c in subclasses(GatewayError)}


def routes() -> set[str]:
    return {f"{method} {path}" for path, methods in _routes().items() for method in methods}


def code_spans(text: str) -> set[str]:
    return set(re.findall(r"`([^`\n]+)`", text))


def missing(text: str) -> dict[str, list[str]]:
    spans = code_spans(text)
    wanted = {"config keys": config_keys(), "metrics": metric_names(), "error codes": error_codes(),
              "routes": routes()}
    return {kind: sorted(names - spans) for kind, names in wanted.items() if names - spans}


def test_the_reference_names_everything_the_code_knows() -> None:
    gaps = missing(REFERENCE.read_text())
    assert gaps == {}, "docs/reference.md lacks these (add a row for each, as `name`): " + "; ".join(
        f"{kind}: {', '.join(names)}" for kind, names in gaps.items())


def test_the_check_fails_on_a_removed_entry() -> None:
    text = REFERENCE.read_text()
    for name, kind in (("server.tls.cert_file", "config keys"), ("llm_gateway_requests_total", "metrics"),
                       ("budget_exceeded", "error codes"), ("GET /v1/models/{id}", "routes")):
        removed = text.replace(f"`{name}`", name)
        assert missing(removed) == {kind: [name]}, name


def test_what_the_code_knows_is_not_empty() -> None:
    """The lists are read from the code, so an empty one would pass vacuously."""
    keys = config_keys()
    assert {"server.port", "providers.<name>.proxy", "models[].retry.max_attempts",
            "redaction.profiles.<name>.custom[].pattern"} <= keys
    assert len(metric_names()) >= 15 and "llm_gateway_local_limit_workers" in metric_names()
    assert {"GET /v1/models", "POST /v1/chat/completions"} <= routes()


def test_the_readme_links_the_reference() -> None:
    assert "(docs/reference.md)" in (ROOT / "README.md").read_text()
