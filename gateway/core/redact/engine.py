"""The streaming window shared by redaction and stream-mode guardrails.

Text is cut into *units*: gaps (whitespace, and the characters no rule can match, see
`core.redact.breaks`), and runs between them of at most `RUN_LIMIT` characters (a longer run is cut,
before a candidate that could still grow past the cut: see `_cut`). A *segment* is one run, or several
runs and the gaps between them while a multi-word rule (``Bearer <token>``, a PEM block, a phone
number in groups) could still match across them. Rules are matched inside one segment only; the
gaps between segments are released as they arrive.

Everything the window decides depends on the text alone, never on how it was split into deltas,
so streaming and one-shot use the same machine and agree by construction:

* a run is complete when the character after it arrives (or at `RUN_LIMIT`, or at the end);
* after a complete run, the segment stays open only while some multi-word rule's non-empty-prefix
  pattern (see `core.redact.regex`) matches from a position inside the segment to its end plus the
  whitespace seen so far; otherwise it closes and is released, masked;
* an open segment closes at a gap longer than `MAX_GAP` or before a run that would take it past
  `SEG_LIMIT` characters or `SEG_RUNS` runs, so the text held back never exceeds
  `MAX_HELD_CHARS` (and the liveness checks of one segment cost at most SEG_RUNS x SEG_LIMIT).

Fast path: while no segment is open, a whole region of complete runs is searched once with one
combined regex (every rule's detect form, plus every multi-word rule's prefix form followed by
whitespace). No hit proves every run in it would close alone unmasked, and it is released as is;
text released is never scanned again.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate

from gateway.core.redact.cuts import keep_start, run_cut
from gateway.core.redact.spec import RUN_LIMIT as RUN_LIMIT
from gateway.core.redact.spec import ScanSpec as ScanSpec

MAX_GAP = 64
SEG_LIMIT = 8192
SEG_RUNS = 256  # a PEM block of an 8192-bit RSA key has about 110 lines
MAX_HELD_CHARS = SEG_LIMIT + MAX_GAP + RUN_LIMIT
# At a run's forced cut, a candidate that starts within this many characters before the cut is
# kept (the next run starts there) instead of released: a secret across the cut is masked whole,
# and every cut still releases at least RUN_LIMIT - CUT_KEEP characters (linear cost).
CUT_KEEP = 1024
# A held run this long gets the next deltas as pieces, joined once when needed (`_held_text`), not
# copied whole at every delta; a shorter one (a word of prose) is copied, which costs less than pieces.
PIECES_FROM = 256


class SegmentWindow:
    """Base of the streaming windows; subclasses decide what a closed segment becomes."""

    __slots__ = ("_buf", "_live_from", "_parts", "_parts_len", "_pos", "_runs", "_scan", "_seg", "_seg_end", "_spec",
                 "_stopped")

    def __init__(self, spec: ScanSpec) -> None:
        self._spec = spec
        self._scan = spec.short_scan  # read once per delta: one attribute, not two
        self._buf = ""  # held text; starts with the open segment, or with an unfinished run
        self._pos = 0  # start of the first unit not yet complete, in _buf
        self._seg = -1  # start of the open segment in the text being scanned, -1 when none
        self._seg_end = 0  # end of the open segment's last complete run
        self._live_from = 0  # leftmost start of a still-growing candidate, from the segment start
        self._runs = 0  # runs in the open segment
        self._stopped = False
        self._parts: list[str] = []  # held after `_buf`: pieces of its one unfinished run (see `_held_text`)
        self._parts_len = 0

    @property
    def held_chars(self) -> int:
        return len(self._buf) + self._parts_len

    def _held_text(self) -> str:
        """The held text as one string: `_buf` and the pieces a run without a gap added to it, joined
        once when they are needed, not copied into `_buf` at every delta."""
        self._buf = "".join([self._buf, *self._parts])
        self._parts.clear()
        self._parts_len = 0
        return self._buf

    def _close(self, segment: str, out: list[str]) -> bool:
        """Release a closed segment into `out`; False stops the window (a guardrail violation)."""
        raise NotImplementedError

    def _feed(self, delta: str, final: bool) -> str:
        if self._stopped:
            return ""
        if not final:
            return self._push(delta)
        if self._spec.passthrough:
            return delta
        return self._general(delta, True)

    def _push(self, delta: str) -> str:
        """`_feed(delta, False)` of a window that has not stopped, with the per-delta common case
        inlined: nothing open, the held text (if any) is one unfinished run, and the new complete
        runs need nothing. `RedactionWindow.push` is this very function (one call per delta)."""
        scan = self._scan
        if scan is None and self._spec.passthrough:
            return delta
        if self._seg >= 0 or not delta:
            return self._general(delta, False)
        if delta[-1].isspace():
            rest = ""
        else:
            # The unfinished run at the end: all of it lies in `delta`, after its last gap.
            rest = delta.rsplit(None, 1)[-1]
            if not rest.isascii() and self._spec.gaps.breaks:  # a break character can end runs too
                rest = rest[self._spec.gaps.tail_start(rest):]
            if len(rest) == len(delta):  # no whitespace: the unfinished run goes on
                buf = self._buf
                if self._parts or len(buf) >= PIECES_FROM:  # a long run: one more piece, not a copy of it
                    if len(buf) + self._parts_len + len(delta) >= RUN_LIMIT:
                        return self._general(delta, False)
                    self._parts.append(delta)
                    self._parts_len += len(delta)
                    return ""
                text = buf + delta  # a word: one short copy
                if len(text) >= RUN_LIMIT:
                    return self._general(delta, False)
                self._buf = text
                return ""
        buf = self._held_text() if self._parts else self._buf
        text = buf + delta if buf else delta
        end = len(text) - len(rest)
        if scan is not None and len(text) < RUN_LIMIT:
            # first_hit's only search, inlined: a text this short has no run to cut.
            if (m := scan.search(text, 0, end)) is not None and m.start() < end:
                return self._general(delta, False)
        elif len(text) - end >= RUN_LIMIT or self._spec.first_hit(text, 0, end) >= 0:
            return self._general(delta, False)
        self._buf = rest
        return text[:end] if rest else text

    def push_together(self, deltas: list[str]) -> list[str]:
        """Deltas that arrived together (one upstream read): the same text in all as `_push` one by one,
        but each delta's text goes out with that delta as soon as the text after it in the batch shows
        its last run complete, instead of one delta later. The client reads nothing later than before,
        and an unchanged delta can be forwarded as it came. Taken when nothing is open and the
        complete text has no hint (then one by one every push would take the fast path too: hints
        hold no whitespace, so each lies inside one complete run); otherwise exactly `_push` one by
        one. Batches are cut well below RUN_LIMIT, where the inlined search is exact."""
        if self._scan is None and self._spec.passthrough:
            return deltas
        if len(deltas) == 1:  # one delta in the read (a paced stream): no later text to release it sooner
            return [self._feed(deltas[0], False)]
        ends = list(accumulate(map(len, deltas)))  # at C speed: a read may bring a thousand deltas
        if ends[-1] < RUN_LIMIT // 2:
            return self._together(deltas)  # one batch: the loop below would not cut it
        out: list[str] = []
        start, base = 0, 0
        while start < len(deltas):
            # The longest run of deltas from `start` under RUN_LIMIT // 2 characters (at least one).
            stop = max(start + 1, bisect_left(ends, base + RUN_LIMIT // 2, start))
            out += self._together(deltas[start:stop])
            start, base = stop, ends[stop - 1]
        return out

    def _together(self, deltas: list[str]) -> list[str]:
        scan = self._scan
        buf = self._held_text() if self._parts else self._buf
        joined = "".join(deltas)
        if scan is None or self._seg >= 0 or self._stopped or not all(deltas):
            return [self._feed(d, False) for d in deltas]
        # Nothing is open, so the held text is one unfinished run: only the new text is searched for a gap
        cut = self._spec.gaps.tail_start(joined)
        if len(buf) + len(joined) >= RUN_LIMIT:
            return self._to_limit(deltas) if not cut else [self._feed(d, False) for d in deltas]
        text = buf + joined
        if not cut:  # no gap: the run goes on, held whole
            self._buf = text
            return [""] * len(deltas)
        rest = text[len(buf) + cut:]
        end = len(text) - len(rest)
        if (m := scan.search(text, 0, end)) is not None and m.start() < end:
            return [self._feed(d, False) for d in deltas]
        self._buf = rest
        if len(rest) <= len(deltas[-1]):  # the usual batch: only the last delta holds an unfinished run
            out = deltas[:]
            if buf:
                out[0] = buf + out[0]
            if rest:
                out[-1] = out[-1][:len(out[-1]) - len(rest)]
            return out
        out = []
        start, stop = 0, len(buf)  # the first delta's piece also carries what was held before it
        for d in deltas:
            stop += len(d)
            out.append(text[start:stop] if stop <= end else text[start:end] if start < end else "")
            start = stop
        return out

    def _to_limit(self, deltas: list[str]) -> list[str]:
        """`_together` of deltas without a gap that take the held run to RUN_LIMIT: `_push` would hold
        each until the one that reaches it (held here in one copy, not one per delta) and cut there."""
        # held[i]: the run held after deltas[:i]; deltas[k] is the first to take it to the limit
        k = bisect_left(list(accumulate(map(len, deltas), initial=len(self._buf))), RUN_LIMIT) - 1
        if k:
            self._buf += "".join(deltas[:k])
        out = [""] * k
        out.append(self._feed(deltas[k], False))
        return out + self._together(deltas[k + 1:]) if k + 1 < len(deltas) else out

    def _general(self, delta: str, final: bool) -> str:
        """The segment machine over the held text and `delta` (any state)."""
        buf = self._held_text() if self._parts else self._buf
        text = buf + delta if buf else delta
        out: list[str] = []
        pos = self._pos
        # Unless the text ends in whitespace, its trailing run is unfinished: the fast path stops
        # before it. Computed once per delta (a one-shot body may visit the fast path often).
        gaps = self._spec.gaps
        complete = len(text) if final else gaps.tail_start(text)
        while pos < len(text) and not self._stopped:
            # The fast path starts only after whitespace (see ScanSpec.first_hit); right after a cut
            # inside a long run, the slow path takes the next unit.
            if self._seg < 0 and (pos == 0 or gaps.is_gap(text[pos - 1])):
                pos, slow = self._fast(text, pos, complete, out)
                if not slow:
                    break
            nxt = self._slow(text, pos, final, out, complete)
            if nxt == pos:
                break
            pos = nxt
        if final and self._seg >= 0 and not self._stopped:
            gap = text[self._seg_end :]
            if self._close_open(text, out):
                out.append(gap)
        self._keep(text, pos, final)
        return "".join(out)

    def _keep(self, text: str, pos: int, final: bool) -> None:
        if final or self._stopped:
            self._buf, self._pos, self._seg = "", 0, -1
            return
        start = self._seg if self._seg >= 0 else pos
        self._buf = text[start:]
        self._pos = pos - start
        if self._seg >= 0:
            self._seg_end -= start
            self._seg = 0

    def _fast(self, text: str, pos: int, complete: int, out: list[str]) -> tuple[int, bool]:
        """Release complete runs in text[pos:complete] that provably need nothing; return (new
        pos, slow path needed)."""
        n = len(text)
        end = max(pos, complete)
        if end > pos:
            hit = self._spec.first_hit(text, pos, end)
            if hit >= 0:
                start = self._spec.gaps.unit_start(text, hit, pos)
                if start > pos:
                    out.append(text[pos:start])
                return start, True
            out.append(text[pos:end] if pos or end < n else text)
        # A run that reached RUN_LIMIT is complete although nothing followed it yet.
        return end, end < n and n - end >= RUN_LIMIT

    def _slow(self, text: str, pos: int, final: bool, out: list[str], tail: int) -> int:
        """Handle the unit at `pos`; return the position after it, or `pos` to hold it. `tail`: where the
        text's trailing run starts (no gap from there on: its units need no search)."""
        if pos >= tail:
            return self._run(text, pos, min(len(text), pos + RUN_LIMIT), final, out)
        gaps = self._spec.gaps
        m = gaps.unit.match(text, pos)
        assert m is not None
        end = m.end()
        if gaps.is_gap(text[pos]):
            return self._gap(text, pos, end, final or end < len(text), out)
        return self._run(text, pos, end, final, out)

    def _gap(self, text: str, start: int, end: int, complete: bool, out: list[str]) -> int:
        if self._seg < 0:
            out.append(text[start:end])
            return end
        if end - start <= MAX_GAP:
            if not complete:
                return start
            if self._still_alive(text[self._seg : end], self._seg_end - self._seg):
                return end
        if self._close_open(text, out):
            out.append(text[start:end])
        return end

    def _run(self, text: str, start: int, end: int, final: bool, out: list[str]) -> int:
        forced = end - start == RUN_LIMIT
        if end == len(text) and not (final or forced):
            return start  # unfinished, or its end is known but not the character after it
        clean = False
        if forced:
            end, clean = run_cut(self._spec, text, self._seg if self._seg >= 0 else start, start, end, CUT_KEEP)
        at_limit = self._seg >= 0 and (end - self._seg > SEG_LIMIT or self._runs >= SEG_RUNS)
        if at_limit and not self._close_at_limit(text, start, end, out):
            return len(text)
        if self._seg < 0:
            self._seg, self._live_from, self._runs = start, 0, 0
        self._seg_end = end
        self._runs += 1
        if (
            forced
            or end == len(text)
            or not self._still_alive(text[self._seg : end + 1], end - self._seg)
        ) and not self._close_open(text, out, clean):
            return len(text)
        return end

    def _close_at_limit(self, text: str, start: int, end: int, out: list[str]) -> bool:
        """The open segment may not take the run text[start:end]: close it, keeping its leftmost
        still-growing candidate as the start of the next segment when that fits in the limits
        (see `core.redact.cuts`); otherwise close it whole and release the gap before the run."""
        seg = self._seg
        keep, low = seg + self._live_from, max(seg + 1, end - SEG_LIMIT)
        if low <= keep < start:
            keep = keep_start(self._spec, text, seg, keep, low, end)
        runs = self._spec.gaps.runs(text, keep, start) if low <= keep < start else SEG_RUNS
        if runs >= SEG_RUNS:
            gap = text[self._seg_end : start]
            if not self._close_open(text, out):
                return False
            out.append(gap)
            return True
        self._seg_end = keep
        if not self._close_open(text, out):
            return False
        self._seg, self._live_from, self._runs = keep, 0, runs
        return True

    def _still_alive(self, held: str, seg_len: int) -> bool:
        self._live_from = self._spec.alive(held, seg_len, self._live_from)
        return self._live_from >= 0

    def _close_open(self, text: str, out: list[str], clean: bool = False) -> bool:
        """`clean`: the segment is known to hold no match (see `run_cut`): released as it is."""
        segment = text[self._seg : self._seg_end]
        self._seg = -1
        if clean:
            out.append(segment)
            return True
        if self._close(segment, out):
            return True
        self._stopped = True
        return False
