"""Credentials the request signers obtain while the gateway runs: AWS access key ids, secret keys and
session tokens, Google OAuth access tokens (docs/extensions.md, "secrets in upstream texts").

They are not in the config, so the `Scrubber` compiled from it cannot know them. A signer puts each set
it gets here before it signs anything with it; the scrubber masks whatever `secrets` holds when it reads
an upstream failure. Nothing is compiled: `secrets` is a tuple rebuilt when the sets change (a refresh,
minutes apart) and swapped whole, so a reader never sees half of a change and pays nothing for it.

Each owner (a signer) has one current set. A set it replaces, or holds when it stops, stays `keep_s`
longer: an answer to a request signed with it may still come (the provider's `timeouts.total_s`). A
current set with an expiry leaves `keep_s` after it (the signer no longer signs with it). Bounded: at
most `MAX_RETIRED` replaced sets, the oldest out first. Pure: time comes in as `now` (monotonic
seconds); the caller prunes at `next_deadline`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

MIN_SECRET = 4  # as for configured secrets (core/scrub.py): shorter cannot be told from ordinary text
MAX_RETIRED = 64  # replaced sets kept at once: a few refreshes of a few signers within one `keep_s`


@dataclass(slots=True)
class _Held:
    values: tuple[str, ...]
    until: float  # monotonic deadline; math.inf while current without an expiry


class MintedSecrets:
    """The current and recently replaced credentials of every signer; `secrets` is what to mask."""

    __slots__ = ("_current", "_retired", "secrets")

    def __init__(self) -> None:
        self._current: dict[Hashable, _Held] = {}
        self._retired: list[_Held] = []  # oldest first
        self.secrets: tuple[str, ...] = ()  # longest first, so a value that contains another is masked whole

    def hold(self, owner: Hashable, values: Iterable[str], now: float, keep_s: float,
             expires_at: float | None = None) -> None:
        """`owner` signs with `values` from now on (until `expires_at`, when it has one). Its previous
        set, if different, is kept `keep_s` more."""
        held = _Held(tuple(values), math.inf if expires_at is None else expires_at + keep_s)
        previous = self._current.get(owner)
        self._current[owner] = held
        if previous is not None and previous.values == held.values:
            return  # the same credentials, looked at again: only the deadline may move
        if previous is not None:
            self._retire(previous, now + keep_s)
        self._publish()

    def release(self, owner: Hashable, now: float, keep_s: float) -> None:
        """`owner` stopped (closed, or replaced on reload): its set is kept `keep_s` more."""
        previous = self._current.pop(owner, None)
        if previous is not None:
            self._retire(previous, now + keep_s)
            self._publish()

    def prune(self, now: float) -> None:
        """Drop every set past its deadline."""
        expired = [owner for owner, held in self._current.items() if held.until <= now]
        for owner in expired:
            del self._current[owner]
        kept = [held for held in self._retired if held.until > now]
        if expired or len(kept) != len(self._retired):
            self._retired = kept
            self._publish()

    def next_deadline(self) -> float | None:
        """When `prune` next has something to drop; None when nothing here expires."""
        soonest = min((h.until for h in (*self._current.values(), *self._retired)), default=math.inf)
        return None if soonest == math.inf else soonest

    def _retire(self, held: _Held, until: float) -> None:
        self._retired.append(_Held(held.values, min(held.until, until)))
        del self._retired[:-MAX_RETIRED]

    def _publish(self) -> None:
        unique = {v for h in (*self._current.values(), *self._retired) for v in h.values if len(v) >= MIN_SECRET}
        self.secrets = tuple(sorted(unique, key=lambda s: (-len(s), s)))
