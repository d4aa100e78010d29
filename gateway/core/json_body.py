"""A client's JSON body, parsed once and held to the depth every later step can handle.

orjson parses up to 1024 levels but serialises at most 254 (it raises past that): a body nested
between the two would be accepted here and fail later, when a translator re-serialises it for the
upstream (a 500 and a traceback per request). So nesting is bounded at MAX_DEPTH, well inside what
orjson writes even after a translator wraps the body a few levels deeper, and refused as a client
error. No tool schema or message list comes near it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
from mypy_extensions import mypyc_attr

MAX_DEPTH = 128
DEPTH_MESSAGE = f"request body is nested deeper than {MAX_DEPTH} levels"
# orjson builds ~10 million containers a second and frees them at half that, in one call the loop cannot
# interleave: a 10 MiB body of nested empty arrays (5 million of them) froze every stream for ~0.9 s
# (bench S2hd). Bounding the containers bounds that stall to ~25 ms parsing and ~15 ms freeing. No real
# request comes near it: even brackets inside strings count, and a text with this many of them is a
# prompt of millions of tokens, over any model's context.
MAX_CONTAINERS = 250_000
CONTAINERS_MESSAGE = f"request body has more than {MAX_CONTAINERS} JSON arrays and objects"
NOT_JSON_MESSAGE = "request body is not valid JSON"
NOT_OBJECT_MESSAGE = "request body must be a JSON object"


class BodyError(ValueError):
    """Not a body we accept; the message is for the client."""


def parse_object(raw: bytes, parsed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body as a JSON object, its depth checked at once (see `parse_shallow` for a big body)."""
    body = parse_shallow(raw, parsed=parsed)
    if may_be_deep(raw) and depth_exceeds(body, MAX_DEPTH):
        raise BodyError(DEPTH_MESSAGE)
    return body


def bracket_count(raw: bytes) -> int:
    """Opening brackets, at C speed (~1 ms a MiB): a bound on the body's containers, strings' included."""
    return raw.count(b"{") + raw.count(b"[")


def parse_shallow(raw: bytes, brackets: int | None = None, parsed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body as a JSON object, at most `MAX_CONTAINERS` of them (checked before parsing; `brackets`:
    its `bracket_count` when the caller has it); its depth is the caller's to check (`may_be_deep`,
    `DepthCheck`). `parsed`: the object `raw` is the JSON of, parsed already by the transport (WebSocket
    mode), held to the same bounds and returned instead of parsing `raw` again."""
    if len(raw) > MAX_CONTAINERS:  # a shorter body has fewer
        if brackets is None:
            brackets = bracket_count(raw)
        if brackets > MAX_CONTAINERS:
            raise BodyError(CONTAINERS_MESSAGE)
    if parsed is not None:
        return parsed
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BodyError(NOT_JSON_MESSAGE) from None
    if not isinstance(body, dict):
        raise BodyError(NOT_OBJECT_MESSAGE)
    return body


def may_be_deep(raw: bytes) -> bool:
    """A cheap bound first: nesting needs an opening bracket per level, so a body with fewer than
    MAX_DEPTH of them (nearly every request) is not walked at all."""
    return bracket_count(raw) >= MAX_DEPTH


def depth_exceeds(value: Any, limit: int) -> bool:
    """Whether containers nest more than `limit` deep, in one call (a body small enough to walk at once, a
    split parse's skeleton; `DepthCheck` walks a bigger one a step at a time). Recursive, so at most `limit`
    calls deep, and over containers only: compiled, ~8x faster than the step-wise walk was on a 30-turn
    conversation (bench/README.md, "#63 and #60, 2026-12-06 evening")."""
    return _container(value) and _deeper(value, limit - 1)


def _deeper(node: dict[str, Any] | list[Any], room: int) -> bool:
    """Whether `node` holds a container with more than `room` levels of containers under it and itself."""
    if room < 0:
        return True
    # a tuple, not `isinstance(x, dict | list)`: compiled, that builds a union for every value visited (more
    # than half of the step-wise walk's cost: 87 -> 38 us on that conversation)
    for child in node.values() if isinstance(node, dict) else node:
        if isinstance(child, (dict, list)) and _deeper(child, room - 1):
            return True
    return False


def _container(value: Any) -> bool:
    return isinstance(value, (dict, list))


def _children(node: dict[str, Any] | list[Any]) -> Iterator[Any]:
    return iter(node.values()) if isinstance(node, dict) else iter(node)


class DepthCheck:
    """`depth_exceeds`, at most `budget` values visited per `step()`: a 10 MiB body of small objects
    is millions of values (~0.2 s of walking), which the I/O shell spreads between its other work.
    `exceeded` is final once `step()` has returned True. `marker`: a key its objects are looked up for
    on the way (`marked`, exact once the walk has ended without `exceeded`): the same walk that bounds the
    depth finds a cache marker, where a search of the body's bytes for it cost more than the walk
    (bench/README.md, "agent-sized bodies")."""

    __slots__ = ("_budget", "_limit", "_marker", "_stack", "exceeded", "marked")

    def __init__(self, value: Any, limit: int, budget: int, marker: str = "") -> None:
        if budget < 1:
            raise ValueError("budget must be positive")
        self._limit, self._budget, self._marker = limit, budget, marker
        self.marked = bool(marker) and isinstance(value, dict) and marker in value
        # one iterator per open container: the values of the innermost are at depth len(stack) + 1
        self._stack: list[Iterator[Any]] = [_children(value)] if _container(value) else []
        self.exceeded = bool(self._stack) and limit < 1
        if self.exceeded:
            self._stack.clear()

    def step(self) -> bool:
        stack, budget, limit, marker = self._stack, self._budget, self._limit, self._marker
        while stack and budget > 0:
            for child in stack[-1]:
                budget -= 1
                if isinstance(child, (dict, list)):  # a tuple, not `dict | list`: see _deeper
                    if len(stack) >= limit:
                        self.exceeded = True
                        stack.clear()
                        return True
                    if marker and not self.marked and isinstance(child, dict) and marker in child:
                        self.marked = True
                    stack.append(_children(child))
                    break
                if budget <= 0:
                    break
            else:
                stack.pop()
        return not stack


@mypyc_attr(native_class=False)
class JsonText(str):
    """A long text of a client's body that keeps its JSON literal (`json`, quotes included), so that
    `encode` writes those bytes back instead of escaping the text again: 10 MiB of escapes or non-ASCII
    text is 15-35 ms of orjson in one call (`core.json_split` makes these; elsewhere it is a plain str)."""

    json: bytes


class LiteralSteps:
    """`text` as a `JsonText`, its literal written `slice_chars` characters a step (a `core.redact.sliced`
    Steps): a long text that input redaction masked is a new `str`, which the translator's `encode` escaped
    whole (~30 ms for 10 MiB of non-ASCII text). JSON escapes each character on its own, so the slices'
    escapes joined are the whole text's."""

    __slots__ = ("_parts", "_pos", "_slice", "_text", "result")

    def __init__(self, text: str, slice_chars: int) -> None:
        if slice_chars < 1:
            raise ValueError("slice_chars must be positive")
        self._text, self._slice, self._pos = text, slice_chars, 0
        self._parts: list[bytes] = [b'"']
        self.result: JsonText | None = None

    def step(self) -> bool:
        text, pos = self._text, self._pos
        end = min(pos + self._slice, len(text))
        self._parts.append(orjson.dumps(text[pos:end])[1:-1])
        self._pos = end
        if end < len(text):
            return False
        self._parts.append(b'"')
        result = JsonText(text)
        result.json = b"".join(self._parts)
        self.result, self._parts = result, []
        return True


def encode(value: Any) -> bytes:
    """`orjson.dumps(value)`, a `JsonText` written as its literal (the same JSON text, maybe spelled
    with other escapes). Other subclasses of str, int, list and dict are written as orjson writes them."""
    return orjson.dumps(value, default=_as_builtin, option=orjson.OPT_PASSTHROUGH_SUBCLASS)


def encoded_size(value: Any) -> int:
    """`len(encode(value))`, a `JsonText` counted by its literal's length instead of copied into the output
    (measuring a conversation that holds a 10 MiB text was ~10 ms of copying it; `Conversation.body_size`)."""
    literals = _Literals()
    return len(orjson.dumps(value, default=literals.counted, option=orjson.OPT_PASSTHROUGH_SUBCLASS)) + literals.extra


_EMPTY_STRING = orjson.Fragment(b'""')


class _Literals:
    """`encoded_size`'s `default`: each `JsonText` written as `""`, the rest of its literal's bytes added up."""

    __slots__ = ("extra",)

    def __init__(self) -> None:
        self.extra = 0

    def counted(self, value: Any) -> Any:
        if isinstance(value, JsonText):
            self.extra += len(value.json) - 2
            return _EMPTY_STRING
        return _as_builtin(value)


def _as_builtin(value: Any) -> Any:
    if isinstance(value, JsonText):
        return orjson.Fragment(value.json)
    # what orjson writes of a subclass without the option
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def copy_containers(value: Any, depth: int) -> Any:
    """`value` with its own copies of its objects and arrays `depth` levels down (`value` itself is the
    first), what they hold further down and every string shared: a text masked in place in the copy
    (input redaction) is not masked in `value`."""
    if depth <= 0:
        return value
    if isinstance(value, dict):
        return {k: copy_containers(v, depth - 1) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_containers(v, depth - 1) for v in value]
    return value
