"""An Anthropic HTTP error answer classified into a `Failure`, sans I/O: every cell that reaches Claude
(Anthropic's API, Bedrock's InvokeModel, Vertex AI) reads its errors with it."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from gateway.core.events import Failure, FailureKind
from gateway.core.messages.wire import classify_anthropic_error
from gateway.providers.retry_after import with_retry_after


def classify_anthropic_http_error(status: int, headers: Mapping[str, str], body: bytes) -> Failure:
    """`{"type":"error","error":{"type":...,"message":...}}` with an HTTP status -> a Failure.
    A body that is not Anthropic's (a proxy's HTML page) is classified by its status alone."""
    try:
        obj = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        obj = None
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict) and isinstance(err.get("type"), str):
        failure = classify_anthropic_error(err, status)
    elif status == 404:  # no error object: no such endpoint at this base_url (our configuration)
        failure = Failure(FailureKind.NOT_FOUND, f"upstream answered HTTP {status}", status=status)
    else:
        failure = classify_anthropic_error({"message": f"upstream answered HTTP {status}"}, status)
    return with_retry_after(failure, headers)
