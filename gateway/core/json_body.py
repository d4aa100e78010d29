"""A client's JSON body, parsed once and held to the depth every later step can handle.

orjson parses up to 1024 levels but serialises at most 254 (it raises past that): a body nested
between the two would be accepted here and fail later, when a translator re-serialises it for the
upstream (a 500 and a traceback per request). So nesting is bounded at MAX_DEPTH, well inside what
orjson writes even after a translator wraps the body a few levels deeper, and refused as a client
error. No tool schema or message list comes near it.
"""

from __future__ import annotations

from typing import Any

import orjson

MAX_DEPTH = 128


class BodyError(ValueError):
    """Not a body we accept; the message is for the client."""


def parse_object(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BodyError("request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BodyError("request body must be a JSON object")
    # A cheap bound first: nesting needs an opening bracket per level, so a body with fewer than
    # MAX_DEPTH of them (nearly every request) is not walked at all.
    if raw.count(b"{") + raw.count(b"[") >= MAX_DEPTH and depth_exceeds(body, MAX_DEPTH):
        raise BodyError(f"request body is nested deeper than {MAX_DEPTH} levels")
    return body


def depth_exceeds(value: Any, limit: int) -> bool:
    """Whether containers nest more than `limit` deep (iterative: no recursion limit to hit)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return False
