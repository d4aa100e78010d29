"""The Date header (RFC 9110 §6.6.1: a server with a clock sends it in every response), made off the
first token's way out.

`email.utils.formatdate` goes through `datetime` and measured ~3 µs hot but ~100 µs after 50 ms asleep
(bench/README.md, fourteenth look), which is what it is on a gateway at a few requests a second: each
response there is the first of its second, so each first token paid for it. The server's once-a-second
sweep calls `prepare`, which formats the current second and the next `AHEAD` ones; a response then
only looks its second up. A second not prepared (a clock step, a loop held longer than `AHEAD`
seconds, a server that is not listening) is formatted on the spot, and the strings held stay at most
`AHEAD + 1`.
"""

from __future__ import annotations

from email.utils import formatdate

AHEAD = 2  # seconds beyond the current one: the sweep may come late by up to this much and still cover


class HttpDates:
    __slots__ = ("_by_second",)

    def __init__(self) -> None:
        self._by_second: dict[int, str] = {}

    def __contains__(self, second: object) -> bool:
        return second in self._by_second

    def at(self, second: int) -> str:
        """The header's value for a Unix time in whole seconds."""
        text = self._by_second.get(second)
        if text is None:
            text = formatdate(second, usegmt=True)
            self._by_second = {second: text}
        return text

    def prepare(self, second: int) -> None:
        """Hold `second` and the `AHEAD` after it, keeping what is already formatted, dropping the past."""
        held = self._by_second
        self._by_second = {s: held.get(s) or formatdate(s, usegmt=True) for s in range(second, second + AHEAD + 1)}
