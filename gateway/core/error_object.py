"""An OpenAI-style error object (an HTTP error body's `error`, or an in-band one) classified into a
`Failure` from its structured fields only (never from its message's words): shared by every API's core
and by the providers that read OpenAI's shape."""

from __future__ import annotations

from typing import Any

from gateway.core.events import Failure, FailureKind


def _code_str(value: Any) -> str | None:
    if value is None:
        return None
    return str(value)


def classify_error_object(err: Any, status: int | None) -> Failure:
    """Classify an OpenAI-style error object (HTTP body or in-band) from its structured fields only."""
    if isinstance(err, str):
        return Failure(FailureKind.INBAND if status is None else kind_by_status(status), "upstream error",
                       status=status)
    if not isinstance(err, dict):
        err = {}
    code, etype = _code_str(err.get("code")), _code_str(err.get("type"))
    param = err.get("param") if isinstance(err.get("param"), str) else None
    message = err.get("message") if isinstance(err.get("message"), str) else "upstream error"
    numeric = int(code) if code and code.isdigit() else None
    if numeric is None and isinstance(err.get("status_code"), int):
        numeric = err["status_code"]  # Groq puts the HTTP status beside a string code
    effective = status if status is not None else numeric
    kind = _kind(code, etype, param, effective, inband=status is None)
    return Failure(kind, message, status=effective, code=code, type=etype, param=param)


# Quota and billing, from structured fields only: OpenAI and Azure (`insufficient_quota`, the billing
# codes), Kimi/Moonshot (type `exceeded_current_quota_error`), Z.ai (code 1113: balance used up),
# DeepSeek and OpenRouter (HTTP 402).
_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "billing_not_active",
                          "exceeded_current_quota_error", "1113"})
_RETRYABLE_CODES = frozenset({"rate_limit_exceeded", "server_error", "overloaded_error", "api_error",
                              "service_unavailable", "rate_limit_error", "internal_error", "timeout"})


def _kind(code: str | None, etype: str | None, param: str | None, status: int | None,
          inband: bool) -> FailureKind:
    if code in _QUOTA_CODES or etype in _QUOTA_CODES or status == 402:
        return FailureKind.QUOTA
    if code == "context_length_exceeded":
        return FailureKind.CONTEXT_LENGTH
    if code == "model_not_found" and status == 404 and not inband:
        return FailureKind.NOT_FOUND  # the deployment's model name (our config), never the client's
    if param == "stream_options" and status == 400:
        return FailureKind.STREAM_OPTIONS_REJECTED
    if param == "stream" and status == 400:
        return FailureKind.STREAM_REJECTED
    if inband:
        if code in _RETRYABLE_CODES or etype in _RETRYABLE_CODES:
            return FailureKind.INBAND
        client_status = status is not None and 400 <= status < 500 and status not in (408, 409, 429)
        if client_status or etype == "invalid_request_error":
            return FailureKind.HTTP_4XX  # an in-band client error (e.g. Groq tool_use_failed) passes through
        return FailureKind.INBAND
    return kind_by_status(status or 502)


def kind_by_status(status: int) -> FailureKind:
    """How an upstream's HTTP status (or the status an error object names) is retried (docs/extensions.md,
    "Failure semantics")."""
    if status == 429:
        return FailureKind.HTTP_429
    if status in (401, 403):
        return FailureKind.UPSTREAM_AUTH
    if status in (408, 409) or status >= 500:
        return FailureKind.HTTP_5XX
    return FailureKind.HTTP_4XX
