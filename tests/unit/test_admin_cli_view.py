"""What `gateway admin` prints (gateway/admin_cli_view.py): tables, one-line failures, wrong URLs."""

from __future__ import annotations

import json

import pytest

from gateway.admin_cli_view import Failure, diagnose_base_url, diagnose_failure, render, table

NO_PROBE = lambda: None  # noqa: E731


@pytest.mark.parametrize(("url", "fixed"), [
    ("http://gw:8080/v1", "http://gw:8080"), ("http://gw:8080/v1/", "http://gw:8080"),
    ("https://gw.example.com/admin/v1", "https://gw.example.com"), ("http://gw:8080/admin", "http://gw:8080"),
    ("http://proxy/llm/v1", "http://proxy/llm"),
])
def test_a_base_url_with_an_api_path_names_the_one_to_use(url: str, fixed: str) -> None:
    problem = diagnose_base_url(url)
    assert problem is not None and f"set it to the gateway's base URL, {fixed} " in problem


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080", "https://gw.example.com/llm", "http://gw/v1beta"])
def test_a_base_url_without_an_api_path_is_fine(url: str) -> None:
    assert diagnose_base_url(url) is None


@pytest.mark.parametrize("url", ["127.0.0.1:8080", "ftp://gw", "http://"])
def test_a_url_that_is_not_http_is_explained(url: str) -> None:
    assert "must be the gateway's base URL" in (diagnose_base_url(url) or "")


def test_a_gateway_error_is_status_code_message_and_param() -> None:
    body = json.dumps({"error": {"message": "unknown model 'x'", "type": "invalid_request_error",
                                 "param": "models", "code": "invalid_request"}}).encode()
    assert diagnose_failure("http://gw", Failure(400, body), NO_PROBE) == (
        "400 invalid_request: unknown model 'x' (param: models)")


def test_a_wrong_admin_key_says_which_variable() -> None:
    body = json.dumps({"error": {"message": "invalid admin key", "code": "invalid_api_key"}}).encode()
    assert "check GATEWAY_ADMIN_KEY" in diagnose_failure("http://gw", Failure(401, body), NO_PROBE)


def test_the_metrics_port_is_recognised_by_its_prometheus_text() -> None:
    metrics = b"# HELP llm_gateway_requests_total Requests\n# TYPE llm_gateway_requests_total counter\n"
    line = diagnose_failure("http://gw:9464", Failure(404, b"404: Not Found"), lambda: metrics)
    assert "is the gateway's metrics port (server.metrics_port)" in line


def test_another_server_is_quoted_briefly_on_one_line() -> None:
    line = diagnose_failure("http://gw", Failure(502, b"<html>\n<body>" + b"x" * 200 + b"</body>"), NO_PROBE)
    assert "\n" not in line and "answered 502 with '<html> <body>xxx" in line and "…'" in line


def test_lists_are_tables_and_objects_are_fields() -> None:
    listed = render({"object": "list", "data": [
        {"object": "gateway.key", "name": "alice", "team": None, "models": ["a", "b"], "rpm": 60},
        {"object": "gateway.key", "name": "bob-the-long", "team": "t", "models": [], "rpm": None}]})
    assert listed.splitlines() == ["NAME          TEAM  MODELS  RPM", "alice         -     a,b     60",
                                   "bob-the-long  t     (none)  -"]
    one = render({"object": "gateway.team", "name": "t", "budget_usd": 2.5, "key": "sk-gw-x"})
    assert one.splitlines() == ["name        t", "budget_usd  2.5", "", "key: sk-gw-x", "(shown once: store it now)"]
    assert render({"object": "gateway.key.deleted", "name": "alice", "deleted": True}) == "revoked key alice"
    assert render({"object": "list", "data": []}) == "(none)"
    assert table([{"cost_usd": 0.12345678}], ["cost_usd"]).splitlines()[1] == "0.123457"
