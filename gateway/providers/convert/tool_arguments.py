"""A tool call's arguments as an object: OpenAI carries them as a JSON string, which may be empty or
broken; Anthropic's `input`, Google's `args` and Bedrock's `input` want an object."""

from __future__ import annotations

from typing import Any

import orjson


def arguments_object(arguments: Any) -> dict[str, Any]:
    """Something that is not a JSON object becomes {} (the call is kept, its id pairs with the result)."""
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
