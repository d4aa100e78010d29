"""One error hierarchy for everything the gateway tells a client (CONTRACT §3 "Errors").

Each error knows its HTTP status, OpenAI error `type`, `code`, `param`, the request `outcome` label it
produces, and a client-safe message. The same object renders as a JSON body or as one in-stream SSE event.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core.events import Failure


class StartupError(Exception):
    """The gateway cannot start (a port in use, a certificate that does not load): one line on stderr,
    no traceback. Here, not in `gateway.server`: the CLI must not import the metrics library before
    `--workers` has chosen its multiprocess mode."""


class GatewayError(Exception):
    status = 500
    type = "server_error"
    code = "internal_error"
    outcome = "upstream_error"

    def __init__(self, message: str, *, param: str | None = None, headers: dict[str, str] | None = None,
                 status: int | None = None, code: str | None = None, type: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers = headers or {}
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        if type is not None:
            self.type = type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def json_bytes(self) -> bytes:
        return orjson.dumps(self.body())

    def sse_bytes(self) -> bytes:
        return b"data: " + self.json_bytes() + b"\n\n"


class InvalidRequest(GatewayError):
    status, type, code, outcome = 400, "invalid_request_error", "invalid_request", "client_error"


class InvalidApiKey(GatewayError):
    status, type, code, outcome = 401, "invalid_request_error", "invalid_api_key", "auth_error"


class ModelNotAllowed(GatewayError):
    status, type, code, outcome = 403, "invalid_request_error", "model_not_allowed", "auth_error"


class ModelNotFound(GatewayError):
    status, type, code, outcome = 404, "invalid_request_error", "model_not_found", "client_error"


class NotFound(GatewayError):
    status, type, code, outcome = 404, "invalid_request_error", "not_found", "client_error"


class MethodNotAllowed(GatewayError):
    status, type, code, outcome = 405, "invalid_request_error", "method_not_allowed", "client_error"


class RequestTooLarge(GatewayError):
    status, type, code, outcome = 413, "invalid_request_error", "request_too_large", "client_error"


class RateLimited(GatewayError):
    status, type, code, outcome = 429, "rate_limit_error", "rate_limit_exceeded", "rate_limited"


class BudgetExceeded(GatewayError):
    status, type, code, outcome = 429, "insufficient_quota", "budget_exceeded", "rate_limited"


class GuardrailBlocked(GatewayError):
    status, type, code, outcome = 400, "invalid_request_error", "guardrail_blocked", "guardrail_blocked"


class UpstreamFailed(GatewayError):
    status, type, code, outcome = 502, "api_error", "upstream_error", "upstream_error"


class UpstreamTimeout(GatewayError):
    status, type, code, outcome = 504, "api_error", "upstream_timeout", "timeout"


class UpstreamClientError(GatewayError):
    """An upstream 4xx that is the client's to fix: its status, type, code and message pass through."""

    outcome = "client_error"

    @classmethod
    def from_failure(cls, f: Failure) -> UpstreamClientError:
        # only a 4xx passes through: any other status (a 204 or 304 with our JSON body) would desync the
        # client's connection (RFC 9112 §6.3), so it is answered as the 400 it stands for
        status = f.status if f.status is not None and 400 <= f.status < 500 else 400
        return cls(f.message, param=f.param, status=status, code=f.code or f"http_{status}",
                   type=f.type or "invalid_request_error")


class UpstreamQuota(GatewayError):
    """The last deployment's account is out of quota or credit: 429 with the provider's code and its
    (scrubbed) message, returned at once (CONTRACT §4.2). Not a gateway key's limit: that is
    `BudgetExceeded`. Outcome `upstream_error`, so it shows where operators look for provider trouble."""

    status, type, code, outcome = 429, "insufficient_quota", "insufficient_quota", "upstream_error"

    @classmethod
    def from_failure(cls, f: Failure) -> UpstreamQuota:
        return cls(f.message[:1000], code=f.code or f.type or "insufficient_quota")


class Unavailable(GatewayError):
    status, type, code, outcome = 503, "api_error", "unavailable", "upstream_error"
