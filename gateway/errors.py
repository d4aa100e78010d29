"""One error hierarchy for everything the gateway tells a client (docs/reference.md, "Routes" "Errors").

Each error knows its HTTP status, OpenAI error `type`, `code`, `param`, the request `outcome` label it
produces, and a client-safe message. The same object renders as a JSON body or as one in-stream SSE event.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from gateway.core.events import Failure
from gateway.core.messages.wire import anthropic_error_type
from gateway.core.stream import ClientError


class StartupError(Exception):
    """The gateway cannot start (a port in use, a certificate that does not load): one line on stderr,
    no traceback. Here, not in `gateway.server`: the CLI must not import the metrics library before
    `--workers` has chosen its multiprocess mode."""


def say_on_stderr(line: str) -> None:
    """One line in one write(2): workers that fail together (a port in use) print at once, and `print`
    writes the text and its newline apart, so their lines interleaved mid-line."""
    os.write(2, (line + "\n").encode("utf-8", "replace"))


class GatewayError(Exception):
    status = 500
    type = "server_error"
    code = "internal_error"
    outcome = "upstream_error"
    # why, for the log line's `reason` (never for the client): the code unless a subclass or the
    # attempt loop knows better (a 404 that is really "not allowed", the last attempt's failure kind)
    reason: str | None = None

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

    @property
    def log_reason(self) -> str:
        return self.reason or self.code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def json_bytes(self) -> bytes:
        return orjson.dumps(self.body())

    def sse_bytes(self) -> bytes:
        return b"data: " + self.json_bytes() + b"\n\n"

    @property
    def anthropic_type(self) -> str:
        """The Messages API's error type: an upstream's own when it is one of Anthropic's (passed
        through), else the one Anthropic uses for the status."""
        return anthropic_error_type(self.status, self.type, isinstance(self, UpstreamClientError))

    def client_error(self) -> ClientError:
        """This error as a stream core writes it into its API's error event (`core.stream`)."""
        return ClientError(self.status, self.message, self.type, self.param, self.code,
                           isinstance(self, UpstreamClientError))

    def anthropic_body(self) -> dict[str, Any]:
        """`{"type": "error", "error": {"type", "message"}}`, the Messages API's shape (docs/reference.md, "Routes")."""
        return {"type": "error", "error": {"type": self.anthropic_type, "message": self.message}}

    def anthropic_sse_bytes(self) -> bytes:
        """The Messages API's in-stream error event."""
        return b"event: error\ndata: " + orjson.dumps(self.anthropic_body()) + b"\n\n"


class InvalidRequest(GatewayError):
    status, type, code, outcome = 400, "invalid_request_error", "invalid_request", "client_error"


class InvalidApiKey(GatewayError):
    status, type, code, outcome = 401, "invalid_request_error", "invalid_api_key", "auth_error"


class ExpiredApiKey(InvalidApiKey):
    """A known key past its `expires_at`: told apart from an unknown one, to the client and in the log
    line (docs/reference.md, Errors)."""

    code = "expired_api_key"


class PermissionDenied(GatewayError):
    """A valid IdP token whose groups map to no team or model (docs/identity.md)."""

    status, type, code, outcome = 403, "permission_error", "permission_denied", "auth_error"


class ModelNotFound(GatewayError):
    status, type, code, outcome = 404, "invalid_request_error", "model_not_found", "client_error"

    @classmethod
    def named(cls, name: str) -> ModelNotFound:
        """The one answer for a model name the caller may not use, whatever the cause (docs/reference.md, "Routes")."""
        return cls(f"the model {name[:128]!r} does not exist", param="model")


class ModelNotAllowed(ModelNotFound):
    """A configured model outside the key's list. The client gets exactly the 404 of an unknown name
    (status, type, code, message), so model names don't leak; only the log line's `reason` and the
    `outcome` label (operators' eyes) tell them apart."""

    outcome, reason = "auth_error", "model_not_allowed"


class ResponseNotFound(GatewayError):
    """A `previous_response_id` with no record of its creator: unknown, whoever created it upstream
    (docs/responses-bridge.md, ownership). The upstream is never asked."""

    status, type, code, outcome = 404, "invalid_request_error", "previous_response_not_found", "client_error"

    @classmethod
    def named(cls, response_id: str, *, owned_by_another: bool = False) -> ResponseNotFound:
        err = cls(f"Previous response with id {response_id[:128]!r} not found.", param="previous_response_id")
        if owned_by_another:  # the same answer to the client; the log line's `reason` tells operators
            err.reason = "response_not_owned"
        return err


class ItemNotFound(GatewayError):
    """An input item that names a stored output item by its id (`item_reference`) the caller was not given:
    unknown, whoever created it upstream, as an id of another key's response is (docs/responses-bridge.md,
    ownership). The upstream is never asked. OpenAI's own message for an unknown item, and our code."""

    status, type, code, outcome = 404, "invalid_request_error", "item_not_found", "client_error"

    @classmethod
    def named(cls, item_id: str) -> ItemNotFound:
        return cls(f"Item with id {item_id[:128]!r} not found.", param="input")


class ConversationNotFound(GatewayError):
    """A Responses `conversation`: state the upstream keeps for the provider's account, which the gateway
    never creates (it serves no /v1/conversations), so no record binds one to a key: unknown, as an id of
    another key is (docs/responses-bridge.md, ownership). The upstream is never asked."""

    status, type, code, outcome = 404, "invalid_request_error", "conversation_not_found", "client_error"

    @classmethod
    def named(cls, conversation_id: str) -> ConversationNotFound:
        return cls(f"Conversation with id {conversation_id[:128]!r} not found.", param="conversation")


class NotFound(GatewayError):
    status, type, code, outcome = 404, "invalid_request_error", "not_found", "client_error"


class MethodNotAllowed(GatewayError):
    status, type, code, outcome = 405, "invalid_request_error", "method_not_allowed", "client_error"


class RequestTooLarge(GatewayError):
    status, type, code, outcome = 413, "invalid_request_error", "request_too_large", "client_error"


class RateLimited(GatewayError):
    status, type, code, outcome = 429, "rate_limit_error", "rate_limit_exceeded", "rate_limited"


class TooManySockets(RateLimited):
    """A WebSocket upgrade past its caller's `server.websocket_max_per_key` open connections: refused
    before the `101` (`pipeline.socket_slots`)."""

    code = "websocket_limit_exceeded"


class BudgetExceeded(GatewayError):
    status, type, code, outcome = 429, "insufficient_quota", "budget_exceeded", "rate_limited"


class GuardrailBlocked(GatewayError):
    status, type, code, outcome = 400, "invalid_request_error", "guardrail_blocked", "guardrail_blocked"


class UpstreamFailed(GatewayError):
    status, type, code, outcome = 502, "api_error", "upstream_error", "upstream_error"


class UpstreamRateLimited(GatewayError):
    """Every attempt was rate-limited by its upstream: 429 with the upstream's Retry-After, so the
    application backs off rather than treating it as an outage. Not a gateway key's limit
    (`RateLimited`): outcome `upstream_error`, where operators look for provider trouble."""

    status, type, code, outcome = 429, "rate_limit_error", "rate_limit_exceeded", "upstream_error"


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
    (scrubbed) message, returned at once (docs/extensions.md, "Failure semantics"). Not a gateway key's limit: that is
    `BudgetExceeded`. Outcome `upstream_error`, so it shows where operators look for provider trouble."""

    status, type, code, outcome = 429, "insufficient_quota", "insufficient_quota", "upstream_error"

    @classmethod
    def from_failure(cls, f: Failure) -> UpstreamQuota:
        return cls(f.message[:1000], code=f.code or f.type or "insufficient_quota")


class Unavailable(GatewayError):
    status, type, code, outcome = 503, "api_error", "unavailable", "upstream_error"
