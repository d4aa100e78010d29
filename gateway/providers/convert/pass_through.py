"""A client's body passed through to a server of its own API (OpenAI's Chat Completions or Responses,
Azure's): the deployment's model name, and the stream flag set or, for a whole body, dropped with the
`stream_options` only a stream may carry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def passed_through(body: Mapping[str, Any], model: str, *, stream: bool) -> dict[str, Any]:
    out = dict(body)
    out["model"] = model
    if stream:
        out["stream"] = True
    else:
        out.pop("stream", None)
        out.pop("stream_options", None)
    return out
