"""What every Bedrock cell shares: the Bedrock Runtime URLs of a model, the request headers, the event-stream
framing and the HTTP error classification (docs/cloud-providers.md). The SigV4 signature is added last, by
`upstream.aws`, over the final URL, headers and body.

A model id containing `anthropic.` (a Claude model id, or an inference profile or ARN of one) goes to
InvokeModel with Anthropic's Messages body; every other model to Converse.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import orjson

from gateway.core.events import Failure, FailureKind
from gateway.core.eventstream import BedrockStreamTranscoder, exception_type
from gateway.core.messages.wire import classify_anthropic_error
from gateway.providers.base import Framing
from gateway.providers.retry_after import with_retry_after
from gateway.providers.settings import ProviderConfig

BEDROCK_ANTHROPIC_VERSION = "bedrock-2023-05-31"  # the `anthropic_version` InvokeModel wants for Claude
EVENTSTREAM = Framing("application/vnd.amazon.eventstream", BedrockStreamTranscoder)


def is_claude(model: str) -> bool:
    return "anthropic." in model


class BedrockEndpoint:
    def __init__(self, provider: ProviderConfig) -> None:
        self.root = provider.base_url.rstrip("/")
        self._headers = {"content-type": "application/json", **provider.headers}

    def headers_for(self, stream: bool) -> dict[str, str]:
        return {**self._headers, "accept": EVENTSTREAM.media_type if stream else "application/json"}

    def count_url(self, model: str) -> str:
        return f"{self.root}/model/{quote(model, safe='')}/count-tokens"

    def url(self, model: str, stream: bool) -> str:
        """`/model/{id}/invoke[-with-response-stream]` for Claude, `/model/{id}/converse[-stream]` else; the
        id percent-encoded whole (an inference profile ARN holds `:` and `/`)."""
        if is_claude(model):
            action = "invoke-with-response-stream" if stream else "invoke"
        else:
            action = "converse-stream" if stream else "converse"
        return f"{self.root}/model/{quote(model, safe='')}/{action}"


# a Claude foundation model id, bare or behind a cross-region inference profile's geography prefix
# (`us.`, `eu.`, `apac.`, `global.`): CountTokens takes only the bare id (not a profile, not an ARN)
_CLAUDE_FOUNDATION = re.compile(r"^(?:[a-z]+\.)?(anthropic\.[A-Za-z0-9._:-]+)$")


def count_model(model: str) -> str | None:
    """The model id CountTokens counts `model` with, or None when it cannot (the route estimates)."""
    m = _CLAUDE_FOUNDATION.match(model)
    return m.group(1) if m else None


def count_tokens_body(anthropic: Mapping[str, Any], client_headers: Mapping[str, str]) -> dict[str, Any]:
    """CountTokens' request for a Messages count_tokens body: the InvokeModel body it stands for, base64
    (a blob in AWS's JSON protocol). InvokeModel wants `max_tokens` (above a thinking budget); counting
    does not depend on it."""
    body = claude_body(anthropic, client_headers)
    thinking = body.get("thinking")
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
    if not isinstance(body.get("max_tokens"), int):
        body["max_tokens"] = budget + 1 if isinstance(budget, int) and not isinstance(budget, bool) else 1
    raw = base64.b64encode(orjson.dumps(body)).decode()
    return {"input": {"invokeModel": {"body": raw}}}


def count_tokens_answer(body: bytes) -> bytes:
    """`{"inputTokens": N}` -> `{"input_tokens": N}`; anything else as it came."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    n = obj.get("inputTokens") if isinstance(obj, dict) else None
    if not isinstance(n, int) or isinstance(n, bool):
        return body
    return orjson.dumps({"input_tokens": n})


def claude_body(anthropic: Mapping[str, Any], client_headers: Mapping[str, str]) -> dict[str, Any]:
    """An Anthropic Messages body as InvokeModel takes it: no `model` or `stream` (they are the URL's),
    Bedrock's `anthropic_version`, and the client's `anthropic-beta` header as the `anthropic_beta` list."""
    out = {k: v for k, v in anthropic.items() if k not in ("model", "stream")}
    out["anthropic_version"] = BEDROCK_ANTHROPIC_VERSION
    betas = [b.strip() for b in client_headers.get("anthropic-beta", "").split(",") if b.strip()]
    if betas and "anthropic_beta" not in out:
        out["anthropic_beta"] = betas
    return out


def classify_bedrock_http_error(status: int, headers: Mapping[str, str], body: bytes) -> Failure:
    """By the exception name in `x-amzn-ErrorType` (`ThrottlingException:http://...`) or the body's
    `__type` (`com.amazon...#ValidationException`), else by the status alone; never by the message."""
    try:
        obj = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        obj = None
    obj = obj if isinstance(obj, dict) else {}
    raw = headers.get("x-amzn-errortype") or obj.get("__type") or ""
    name = str(raw).partition(":")[0].rpartition("#")[2].strip()
    message = obj.get("message", obj.get("Message"))
    message = message if isinstance(message, str) and message else f"upstream answered HTTP {status}"
    etype = exception_type(name)
    if etype == "not_found_error":  # no such model or profile at this region: our configuration
        failure = Failure(FailureKind.NOT_FOUND, message, status=status, code=name, type=etype)
    else:
        failure = classify_anthropic_error({"type": etype, "message": message} if etype else {"message": message},
                                           status)
        failure = Failure(failure.kind, failure.message, status, name or None, etype or failure.type)
    return with_retry_after(failure, headers)


def bedrock_base_url(provider: ProviderConfig) -> str:
    """Bedrock Runtime's public endpoint in the provider's region (docs/cloud-providers.md), when no `base_url` is
    set."""
    region = provider.aws.region if provider.aws is not None else ""
    return f"https://bedrock-runtime.{region}.amazonaws.com"
