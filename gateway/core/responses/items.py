"""Output item ids, sans I/O (docs/responses-bridge.md, Ownership): the ids of the items an answer gave its
caller, and the stored items a request's input names by id (`item_reference`).

An OpenAI Responses upstream keeps every output item of a stored response, and an input item
`{"type": "item_reference", "id": ...}` reads one into the prompt by its id alone, whichever key of the
provider's account created it; the `type` may be left out or null (openai's `ItemReference` param: `id`
required, `type` optional), so an input item with an `id` and no `type` is a reference too. The gateway
records the ids of the items each caller was given with its response id and refuses a reference to any
other before an upstream is asked (`pipeline.ownership`).

The ids are read off what the stream core keeps anyway (the assembler's items, announced by
`response.output_item.added` / `.done`, and the terminal event's `response.output`), once, when the
answer is recorded: nothing is added to the per-event path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def references(body: dict[str, Any]) -> list[Any]:
    """The `id` of each item of `input` that names a stored item (as given: the caller checks its type);
    empty for a request that names none. One pass over the items, one lookup each (a message or a tool
    call: its `type`), so a request without references pays next to nothing."""
    value = body.get("input")
    found: list[Any] = []
    if not isinstance(value, list):
        return found
    for item in value:
        if isinstance(item, dict):
            kind = item.get("type")
            if kind is None:
                if "id" in item:
                    found.append(item["id"])
            elif kind == "item_reference":  # a literal, not a global looked up per item
                found.append(item.get("id"))
    return found


def output_ids(items: Iterable[Any], output: Any = None) -> list[str]:
    """The string `id`s of `items` (the output items a stream announced) and of the items of `output` (a
    `response` object's `output`, the terminal event's or a whole answer's), each once, in order."""
    seen: dict[str, None] = {}
    for item in items:
        _take(seen, item)
    if isinstance(output, list):
        for item in output:
            _take(seen, item)
    return list(seen)


def response_output_ids(resp: Any) -> list[str]:
    """The ids of a `response` object's output items (a whole answer, or a terminal event's)."""
    return output_ids((), resp.get("output")) if isinstance(resp, dict) else []


def _take(seen: dict[str, None], item: Any) -> None:
    if isinstance(item, dict):
        rid = item.get("id")
        if isinstance(rid, str) and rid:
            seen[rid] = None
