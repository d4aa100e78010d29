"""Where a window cuts text it may not hold any longer: before whatever could still become a match.

A run that reaches `RUN_LIMIT` characters and a segment that would pass `SEG_LIMIT` characters or
`SEG_RUNS` runs must be cut so that memory stays bounded. Cutting blindly splits a secret that lies
across the cut into two pieces that neither match (a key inside a long URL or a line of minified
JSON). So the cut goes before the leftmost candidate that could still grow past it, and the text
from there starts the next run or segment: the secret is matched whole there.

`tail` is the alternation of every rule's non-empty-prefix form (see `redact_regex`) anchored at the
end of the searched text: `tail.search(text, a, b)` is the leftmost q >= a where text[q:b] could be
the start of a match. A complete match that starts before the chosen start and runs across it would
be split by the cut too, so the start moves back to it (a few times at most); `detect` (a superset of
the matches) tells such a match from a candidate that died before it became one. A match that would
have to be kept from before `low` is too long to keep, and then the cut stays where it was (-1).
"""

from __future__ import annotations

import re

TRIES = 8  # how often a match across the kept start may move it back before we give up


def keep_start(tail: re.Pattern[str], detect: re.Pattern[str] | None, text: str, first: int, keep: int,
               low: int, end: int) -> int:
    """The start, in [low, keep], of the text to keep when `keep` starts a candidate to keep,
    text[first:keep] goes out and text[:end] is known; -1 when a match across it starts before `low`."""
    pos, moves = first, 0
    while (m := tail.search(text, pos, keep + 1)) is not None and m.start() < keep:
        q = m.start()  # text[q:keep + 1] is the start of a match: is a whole one across `keep`?
        whole = detect.match(text, q, end) if detect is not None else None
        if whole is None or whole.end() <= keep:
            pos = q + 1
            continue
        if q < low or moves == TRIES:
            return -1
        keep, pos, moves = q, first, moves + 1
    return keep


def run_cut(tail: re.Pattern[str] | None, detect: re.Pattern[str] | None, text: str, start: int, end: int,
            keep_chars: int) -> int:
    """Where the run text[start:end], which reached the run limit, is cut: before the leftmost
    candidate that starts within `keep_chars` of `end` and could still grow past it, or at `end`."""
    low = max(start + 1, end - keep_chars)
    if tail is None or (m := tail.search(text, low, end)) is None:
        return end
    keep = keep_start(tail, detect, text, start, m.start(), low, end)
    return end if keep < 0 else keep
