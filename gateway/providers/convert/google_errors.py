"""Google API errors (the Gemini API and Vertex AI) classified into `Failure`s, sans I/O.

Google's error body is `{"error": {"code": 429, "message": "...", "status": "RESOURCE_EXHAUSTED",
"details": [...]}}` (google.rpc.Status in its JSON mapping; AIP-193), in an HTTP error body and as an
event inside a 200 stream. The class comes from `status` (the canonical code's name), else from the HTTP
status; never from the message. A `google.rpc.RetryInfo` detail's `retryDelay` is the least wait.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.core.error_object import kind_by_status
from gateway.core.events import Failure, FailureKind
from gateway.providers.retry_after import with_retry_after

RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
# canonical codes (google.rpc.Code) -> how the retry table sees them
_KINDS: Mapping[str, FailureKind] = {
    RESOURCE_EXHAUSTED: FailureKind.HTTP_429,  # rate or quota per minute: the 429 rule
    "UNAVAILABLE": FailureKind.HTTP_5XX,
    "INTERNAL": FailureKind.HTTP_5XX,
    "DEADLINE_EXCEEDED": FailureKind.HTTP_5XX,
    "ABORTED": FailureKind.HTTP_5XX,
    "UNKNOWN": FailureKind.HTTP_5XX,
    "CANCELLED": FailureKind.HTTP_5XX,
    "DATA_LOSS": FailureKind.HTTP_5XX,
    "INVALID_ARGUMENT": FailureKind.HTTP_4XX,
    # the state of our project, not the request (google.rpc.Code): the Gemini API answers it for a project
    # without billing where the free tier is not offered ("User location is not supported"): the next
    # deployment, as a provider quota error, never passed to the client as its own 400
    "FAILED_PRECONDITION": FailureKind.QUOTA,
    "OUT_OF_RANGE": FailureKind.HTTP_4XX,
    "ALREADY_EXISTS": FailureKind.HTTP_4XX,
    "UNIMPLEMENTED": FailureKind.HTTP_4XX,
    "PERMISSION_DENIED": FailureKind.UPSTREAM_AUTH,  # our credentials or project, not the client's
    "UNAUTHENTICATED": FailureKind.UPSTREAM_AUTH,
    "NOT_FOUND": FailureKind.NOT_FOUND,  # the deployment's model or project (our config): next one
}
_STATUS_OF: Mapping[str, int] = {
    RESOURCE_EXHAUSTED: 429, "UNAVAILABLE": 503, "INTERNAL": 500, "DEADLINE_EXCEEDED": 504, "ABORTED": 409,
    "UNKNOWN": 500, "CANCELLED": 499, "DATA_LOSS": 500, "INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400, "ALREADY_EXISTS": 409, "UNIMPLEMENTED": 501, "PERMISSION_DENIED": 403,
    "UNAUTHENTICATED": 401, "NOT_FOUND": 404,
}
# `google.rpc.ErrorInfo.reason`s that name our credentials: the Gemini API answers a bad key with 400
# INVALID_ARGUMENT and this reason, which must not pass through to the client as its own mistake
_AUTH_REASONS = frozenset({"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED",
                           "ACCESS_TOKEN_EXPIRED", "ACCESS_TOKEN_SCOPE_INSUFFICIENT", "SERVICE_DISABLED",
                           "BILLING_DISABLED", "CONSUMER_INVALID"})
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")  # google.protobuf.Duration in JSON: "27s", "0.5s"


def error_object(obj: Any) -> dict[str, Any] | None:
    """The `error` of a Google error body; a stream's errors may come as a one-element JSON array."""
    if isinstance(obj, list) and len(obj) == 1:
        obj = obj[0]
    err = obj.get("error") if isinstance(obj, dict) else None
    return err if isinstance(err, dict) else None


def classify_google_error(err: Mapping[str, Any], status: int | None) -> Failure:
    """A Google `error` object, from an HTTP error body (`status` its HTTP status) or inside a 200
    stream (`status` None)."""
    code = err.get("status") if isinstance(err.get("status"), str) else None
    message = str(err["message"]) if isinstance(err.get("message"), str) else "upstream error"
    numeric = err.get("code") if isinstance(err.get("code"), int) and not isinstance(err.get("code"), bool) else None
    effective = status if status is not None else _STATUS_OF.get(code or "", numeric)
    kind = _KINDS.get(code or "") or _by_status(effective)
    if _reason(err) in _AUTH_REASONS:
        kind = FailureKind.UPSTREAM_AUTH
    if status is None and kind in (FailureKind.HTTP_5XX, FailureKind.HTTP_429):
        kind = FailureKind.INBAND  # in a stream: retried or fallen back before the first token
    return Failure(kind, message, status=effective, code=code, type=_type(kind), retry_after_s=_retry_delay(err))


def classify_google_http_error(status: int, headers: Mapping[str, str], body: bytes) -> Failure:
    """An HTTP error answer; a body that is not Google's (a proxy's page) is classified by status alone."""
    try:
        obj = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        obj = None
    err = error_object(obj)
    if err is None:
        kind = FailureKind.NOT_FOUND if status == 404 else _by_status(status)
        failure = Failure(kind, f"upstream answered HTTP {status}", status=status, type=_type(kind))
    else:
        failure = classify_google_error(err, status)
    return with_retry_after(failure, headers)


def _type(kind: FailureKind) -> str:
    """The OpenAI-shaped error type a passed-through client error carries."""
    return "invalid_request_error" if kind is FailureKind.HTTP_4XX else "api_error"


def _by_status(status: int | None) -> FailureKind:
    return FailureKind.INBAND if status is None else kind_by_status(status)


def _detail(err: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The first `details` entry of type `google.rpc.<kind>`, or {}."""
    details = err.get("details")
    for d in details if isinstance(details, list) else ():
        if isinstance(d, dict) and str(d.get("@type", "")).endswith(f"google.rpc.{kind}"):
            return d
    return {}


def _reason(err: Mapping[str, Any]) -> str:
    return str(_detail(err, "ErrorInfo").get("reason", ""))


def _retry_delay(err: Mapping[str, Any]) -> float | None:
    m = _DURATION.match(str(_detail(err, "RetryInfo").get("retryDelay", "")))
    return float(m.group(1)) if m is not None else None
