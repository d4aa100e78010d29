"""What a body assembled from parts holds, found part by part (pure): WebSocket mode keeps a conversation
and each turn adds a message to it, so the whole body is held to the bounds of `core.json_body` (its
containers, its nesting) and searched for cache markers without walking or scanning the whole again on
every turn (`pipeline.request.read_json`; docs/reference.md, WebSocket mode).

A part is walked once, parsed, as it comes: its containers counted, its nesting measured as the body will
hold it (its parts sit side by side, so the body's nesting is the deepest part's), its objects looked up
for the marker key. Exact, not a bound of its bytes: a key spelled with escapes is found as parsed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.json_body import MAX_DEPTH


@dataclass(frozen=True, slots=True)
class Scan:
    containers: int  # its JSON arrays and objects
    depth: int  # the levels of containers it nests to, the body's own counted (past MAX_DEPTH: MAX_DEPTH + 1)
    marked: bool  # an object of it has the marker key (a cache marker: docs/caching.md)

    def joined(self, other: Scan) -> Scan:
        """The scan of a body made of both."""
        return Scan(self.containers + other.containers, max(self.depth, other.depth), self.marked or other.marked)

    @property
    def too_deep(self) -> bool:
        return self.depth > MAX_DEPTH


NOTHING = Scan(0, 0, False)


def body_scans(body: dict[str, Any], marker: str) -> tuple[Scan, Scan]:
    """A body's own scan but for its `input`, and its `input`'s: the two parts a turn keeps apart (the
    conversation keeps the input, not the turn's other fields)."""
    fields = {key: value for key, value in body.items() if key != "input"}
    return walked(fields, 0, marker), walked(body.get("input"), 1, marker)


def walked(value: Any, wrapped: int, marker: str) -> Scan:
    """`value` as a part of a body, `wrapped` levels of containers deep in it (an `input` list: 1)."""
    if not isinstance(value, (dict, list)):  # a tuple: see core.json_body._deeper
        return NOTHING
    walk = _Walk(marker)
    depth = wrapped + walk.levels(value, MAX_DEPTH - wrapped)
    return Scan(walk.containers, depth, walk.marked)


class _Walk:
    __slots__ = ("containers", "marked", "marker")

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.containers = 0
        self.marked = False

    def levels(self, node: dict[str, Any] | list[Any], room: int) -> int:
        """The levels of containers `node` nests (itself one), measured no further than one past `room`
        (so at most MAX_DEPTH calls deep)."""
        self.containers += 1
        if room <= 0:
            return 1
        if isinstance(node, dict):
            if not self.marked and self.marker in node:
                self.marked = True
            children: Any = node.values()
        else:
            children = node
        deepest = 0
        for child in children:
            if isinstance(child, (dict, list)):
                d = self.levels(child, room - 1)
                if d > deepest:
                    deepest = d
        return deepest + 1
