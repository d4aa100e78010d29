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
  before their block's own marker, which ends a longer prefix, and so do the blocks inside those (a
  `search_result` in a `tool_result`'s content, the texts in its own `content`), down to `MAX_DEPTH` levels
  of `content` below the message: Anthropic's own blocks nest 3 deep (tool_result > search_result > text),
  and a body nested deeper, which Anthropic refuses anyway, is not walked further (a hostile body cannot
  make the walk deep);
- a 1-hour marker after a 5-minute one would be refused too (longer TTLs must come first): it is sent
  as a 5-minute one, a top-level one (after every block's) too;
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

_BODY_FIELDS = ("tools", "system", "messages")  # in the prefix's order
TOOLS, SYSTEM, MESSAGES = 0, 1, 2  # their indices, a Slot's first
MAX_DEPTH = 4  # levels of `content` below a message walked for markers (a message's blocks are level 1)
LIST = -1  # a Tag's last index when it names the `content` list of the block its other indices name
# A marked block's path: a body field's index, the index in that field's list, then (in a message) an index
# in each `content` list down to the block: (MESSAGES, 3, 0, 2) is messages[3].content[0].content[2]
Slot = tuple[int, ...]
Tag = tuple[int, ...]  # a container `_Editor` has copied: a dict's path, (field,) or (*path, LIST) for a list


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
    `scan=False`: the client's body is known to carry none (`pipeline.request.read_json`), so it is not
    walked for them."""
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
    short_kept = _order_ttls(editor, slots[dropped:])
    automatic = body.get("cache_control")
    if short_kept and isinstance(automatic, dict) and automatic.get("ttl") == "1h":
        # the top-level one is the newest breakpoint: after a shorter one it is refused as a block's would be
        body["cache_control"] = {k: v for k, v in automatic.items() if k != "ttl"}
    return dropped


def _marked(body: Mapping[str, Any]) -> list[Slot]:
    """Every block carrying a `cache_control`, in prefix order (tools, system, messages), nested ones
    included."""
    out: list[Slot] = []
    for field in (TOOLS, SYSTEM):
        items = body.get(_BODY_FIELDS[field])
        for i, item in enumerate(items if isinstance(items, list) else ()):
            if isinstance(item, dict) and item.get("cache_control") is not None:
                out.append((field, i))
    messages = body.get("messages")
    for i, m in enumerate(messages if isinstance(messages, list) else ()):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            _marked_in(out, (MESSAGES, i), content, 1)
    return out


def _marked_in(out: list[Slot], path: Slot, content: list[Any], depth: int) -> None:
    """The markers of the blocks in the `content` list at `path`, `depth` levels below the message: each
    block's inner ones first (down to `MAX_DEPTH`), then its own, which ends the longer prefix."""
    for j, block in enumerate(content):
        if not isinstance(block, dict):
            continue
        inner = block.get("content")
        if depth < MAX_DEPTH and isinstance(inner, list):
            _marked_in(out, (*path, j), inner, depth + 1)
        if block.get("cache_control") is not None:
            out.append((*path, j))


def marked_inside(block: Mapping[str, Any]) -> int:
    """How many markers the blocks inside a message block's own `content` carry, as deep as `fit` looks
    (Bedrock Converse places or drops them, `convert.bedrock_converse`)."""
    inner = block.get("content")
    out: list[Slot] = []
    if isinstance(inner, list):
        _marked_in(out, (), inner, 2)
    return len(out)


def _cache_control(body: Mapping[str, Any], slot: Slot) -> Any:
    node = body[_BODY_FIELDS[slot[0]]][slot[1]]
    for k in slot[2:]:
        node = node["content"][k]
    return node.get("cache_control")


def _order_ttls(editor: _Editor, slots: list[Slot]) -> bool:
    """A 1-hour marker after a shorter one becomes a 5-minute one (Anthropic refuses the order). Returns
    whether a shorter one is among `slots`."""
    short_seen = False
    for slot in slots:
        cc = _cache_control(editor.body, slot)
        long = isinstance(cc, dict) and cc.get("ttl") == "1h"
        if long and short_seen:
            editor.edit(slot, {k: v for k, v in cc.items() if k != "ttl"})
        short_seen = short_seen or not long
    return short_seen


class _Editor:
    """Sets or removes blocks' `cache_control`, copying each container once, the first time it changes
    (the client's body stays as it came; many edits cost one copy of each list, not one per edit)."""

    __slots__ = ("body", "copied")

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.copied: set[Tag] = set()

    def edit(self, slot: Slot, cc: Mapping[str, Any] | None) -> None:
        items = self.own_list(self.body, _BODY_FIELDS[slot[0]], slot[:1])
        for n in range(2, len(slot)):  # down the `content` lists to the block's own list
            block = self.own_dict(items, slot[n - 1], slot[:n])
            items = self.own_list(block, "content", (*slot[:n], LIST))
        items[slot[-1]] = _with(items[slot[-1]], cc)
        self.copied.add(slot)  # `_with` made it a new dict

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
        editor.edit((TOOLS, len(tools) - 1), EPHEMERAL)
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": dict(EPHEMERAL)}]
    elif isinstance(system, list):
        for j in range(len(system) - 1, -1, -1):  # the last block that takes a marker ends the system prompt
            if _markable(system[j]):
                editor.edit((SYSTEM, j), EPHEMERAL)
                break
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
            messages = editor.own_list(editor.body, _BODY_FIELDS[MESSAGES], (MESSAGES,))
            messages[i] = {**messages[i], "content": [{"type": "text", "text": content,
                                                        "cache_control": dict(EPHEMERAL)}]}
            editor.copied.update({(MESSAGES, i), (MESSAGES, i, LIST)})
        return
    if not isinstance(content, list):
        return
    for j in range(len(content) - 1, -1, -1):
        if _markable(content[j]):
            editor.edit((MESSAGES, i, j), EPHEMERAL)
            return


def _markable(block: Any) -> bool:
    """A block Anthropic takes a marker on: not thinking, and not an empty text ("cache_control cannot be
    set for empty text blocks")."""
    return isinstance(block, dict) and block.get("type") not in _UNMARKABLE and block.get("text", True) != ""
