"""Anthropic prompt-cache breakpoints (`cache_control`) on a Messages request body, sans I/O
(docs/caching.md).

Every Anthropic-format cell (Anthropic, Bedrock InvokeModel, Vertex rawPredict, and Bedrock Converse,
whose `cachePoint` blocks are made from the same markers) passes its Messages body through `fit` before
it leaves:

- at most `MAX_BREAKPOINTS` markers: Anthropic answers a fifth with a 400, so the extra ones are dropped
  from the oldest (the front of the prefix: tools, then system, then messages) and the number dropped is
  returned for the log line's `cache_markers_dropped`; the newest markers are the ones the next turn
  reads from (a top-level `cache_control`, Anthropic's automatic caching, counts as the newest). The
  blocks inside a content block's own `content` (a `tool_result`'s: Claude Code marks them, and a Chat
  `tool` message's marked parts land there) count too, as Anthropic counts them: in the prefix they come
  before their block's own marker, which ends a longer prefix;
- a 1-hour marker after a 5-minute one would be refused too (longer TTLs must come first): it is sent
  as a 5-minute one;
- with `auto` (a model's `prompt_cache: {breakpoints: auto}`) and no marker from the client, nested ones
  included: markers at the end of the tools, the end of the system prompt and the last block of the last
  two user turns, so a client that sends none (Codex, OpenAI SDKs) still reads its previous turn's prefix
  from the cache.

The client's body is never changed: a container is copied before a marker in it is added or removed.
`marker` turns what a Chat or Responses client put in a part's `cache_control` into Anthropic's form.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_BREAKPOINTS = 4  # Anthropic's limit per request
TTLS = frozenset({"5m", "1h"})
EPHEMERAL: Mapping[str, str] = {"type": "ephemeral"}
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})  # blocks Anthropic takes no cache_control on

TOOLS, SYSTEM, MESSAGES = _BODY_FIELDS = ("tools", "system", "messages")  # in the prefix's order
WHOLE = -1  # a Slot's last index when the marker is on the block itself, not on one inside its `content`
# (one of _BODY_FIELDS, index, block index within a message, index within that block's `content` or WHOLE)
Slot = tuple[str, int, int, int]
Tag = tuple[str, int, int]  # a container `_Editor` has copied


def marker(value: Any) -> dict[str, str] | None:
    """A client's `cache_control` as Anthropic takes it: `{"type": "ephemeral"}` with its `ttl` when that
    is one Anthropic knows; None when the client sent no object."""
    if not isinstance(value, dict):
        return None
    ttl = value.get("ttl")
    return {"type": "ephemeral", "ttl": ttl} if ttl in TTLS else {"type": "ephemeral"}


def fit(body: dict[str, Any], *, auto: bool, scan: bool = True) -> int:
    """Make `body`'s breakpoints ones Anthropic accepts (see the module doc), in place on `body`'s own
    keys, copying any container it changes. Returns how many of the client's markers were dropped.
    `scan=False`: the client's body is known to carry none (`providers.base.may_carry_markers`), so it is
    not walked for them."""
    if not scan:
        if auto:
            _add_auto(body)
        return 0
    slots = _marked(body)
    # a top-level `cache_control` (Anthropic's automatic caching) is a breakpoint on the last block: the newest
    top = 1 if body.get("cache_control") is not None else 0
    if not slots and not top:
        if auto:
            _add_auto(body)
        return 0
    dropped = min(len(slots), max(0, len(slots) + top - MAX_BREAKPOINTS))
    editor = _Editor(body)
    for slot in slots[:dropped]:
        editor.edit(slot, None)
    _order_ttls(editor, slots[dropped:])
    return dropped


def _marked(body: Mapping[str, Any]) -> list[Slot]:
    """Every block carrying a `cache_control`, in prefix order (tools, system, messages), nested ones
    included."""
    out: list[Slot] = []
    tools = body.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        if isinstance(tool, dict) and tool.get("cache_control") is not None:
            out.append((TOOLS, i, 0, WHOLE))
    system = body.get("system")
    for i, block in enumerate(system if isinstance(system, list) else ()):
        if isinstance(block, dict) and block.get("cache_control") is not None:
            out.append((SYSTEM, i, 0, WHOLE))
    messages = body.get("messages")
    for i, m in enumerate(messages if isinstance(messages, list) else ()):
        content = m.get("content") if isinstance(m, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else ()):
            if isinstance(block, dict):
                _marked_block(out, i, j, block)
    return out


def _marked_block(out: list[Slot], i: int, j: int, block: Mapping[str, Any]) -> None:
    """A message block's markers: those on the blocks of its own `content` (a `tool_result`'s), then its
    own, which ends the longer prefix."""
    inner = block.get("content")
    for k, part in enumerate(inner if isinstance(inner, list) else ()):
        if isinstance(part, dict) and part.get("cache_control") is not None:
            out.append((MESSAGES, i, j, k))
    if block.get("cache_control") is not None:
        out.append((MESSAGES, i, j, WHOLE))


def _cache_control(body: Mapping[str, Any], slot: Slot) -> Any:
    kind, i, j, k = slot
    if kind != MESSAGES:
        return body[kind][i].get("cache_control")
    block = body["messages"][i]["content"][j]
    return (block if k == WHOLE else block["content"][k]).get("cache_control")


def _order_ttls(editor: _Editor, slots: list[Slot]) -> None:
    """A 1-hour marker after a shorter one becomes a 5-minute one (Anthropic refuses the order)."""
    short_seen = False
    for slot in slots:
        cc = _cache_control(editor.body, slot)
        long = isinstance(cc, dict) and cc.get("ttl") == "1h"
        if long and short_seen:
            editor.edit(slot, {k: v for k, v in cc.items() if k != "ttl"})
        short_seen = short_seen or not long


class _Editor:
    """Sets or removes blocks' `cache_control`, copying each container once, the first time it changes
    (the client's body stays as it came; many edits cost one copy of each list, not one per edit)."""

    __slots__ = ("body", "copied")

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.copied: set[Tag] = set()

    def edit(self, slot: Slot, cc: Mapping[str, Any] | None) -> None:
        kind, i, j, k = slot
        items = self.own_list(self.body, kind, (kind, -1, -1))
        if kind != MESSAGES:
            items[i] = _with(items[i], cc)
            return
        message = self.own_dict(items, i, ("message", i, -1))
        content = self.own_list(message, "content", ("content", i, -1))
        if k == WHOLE:
            content[j] = _with(content[j], cc)
            self.copied.add(("block", i, j))  # `_with` made it a new dict
            return
        block = self.own_dict(content, j, ("block", i, j))
        inner = self.own_list(block, "content", ("inner", i, j))
        inner[k] = _with(inner[k], cc)

    def own_list(self, owner: dict[str, Any], key: str, tag: Tag) -> list[Any]:
        if tag not in self.copied:
            owner[key] = list(owner[key])
            self.copied.add(tag)
        items: list[Any] = owner[key]
        return items

    def own_dict(self, items: list[Any], i: int, tag: Tag) -> dict[str, Any]:
        if tag not in self.copied:
            items[i] = dict(items[i])
            self.copied.add(tag)
        block: dict[str, Any] = items[i]
        return block


def _with(block: Mapping[str, Any], cc: Mapping[str, Any] | None) -> dict[str, Any]:
    out = {k: v for k, v in block.items() if k != "cache_control"}
    if cc is not None:
        out["cache_control"] = dict(cc)
    return out


def _add_auto(body: dict[str, Any]) -> None:
    """Breakpoints at the end of the tools, the end of the system prompt and the last two user turns."""
    editor = _Editor(body)
    tools = body.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[-1], dict):
        editor.edit((TOOLS, len(tools) - 1, 0, WHOLE), EPHEMERAL)
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": dict(EPHEMERAL)}]
    elif isinstance(system, list) and system and isinstance(system[-1], dict):
        editor.edit((SYSTEM, len(system) - 1, 0, WHOLE), EPHEMERAL)
    messages = body.get("messages")
    turns: list[Any] = messages if isinstance(messages, list) else []
    users: list[int] = []
    for i in range(len(turns) - 1, -1, -1):  # from the end: the last two, not a walk of the conversation
        if isinstance(turns[i], dict) and turns[i].get("role") == "user":
            users.append(i)
            if len(users) == 2:
                break
    for i in reversed(users):
        _mark_turn(editor, i)


def _mark_turn(editor: _Editor, i: int) -> None:
    content = editor.body["messages"][i].get("content")
    if isinstance(content, str):
        if content:  # a string turn becomes the one text block it stands for, marked
            messages = editor.own_list(editor.body, MESSAGES, (MESSAGES, -1, -1))
            messages[i] = {**messages[i], "content": [{"type": "text", "text": content,
                                                        "cache_control": dict(EPHEMERAL)}]}
            editor.copied.update({("message", i, -1), ("content", i, -1)})
        return
    if not isinstance(content, list):
        return
    for j in range(len(content) - 1, -1, -1):
        block = content[j]
        if isinstance(block, dict) and block.get("type") not in _UNMARKABLE and block.get("text", True) != "":
            editor.edit((MESSAGES, i, j, WHOLE), EPHEMERAL)
            return
