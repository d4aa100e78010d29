"""When a replica tries Redis again after a fallback (redis.py, docs/scale-out.md, "A Redis that comes and
goes"): soon after a lone outage, later and later while Redis keeps failing again right after answering.

Each switch back to shared counting can admit one more limit in its minute (the requests counted
locally are not in Redis's counts), and each switch away costs the operations in flight a deadline. A
Redis that drops every few seconds (a node under memory pressure, a flaky link, a host too busy to
answer within `state.timeout_ms`) made a replica switch both ways as often, each time a limit more. A
fallback that comes soon after the last recovery is a flap: the first probe after it waits, doubling per
flap up to a ceiling; shared counting that holds for `FLAP_WINDOW_S` forgets the flaps.
"""

from __future__ import annotations

FLAP_WINDOW_S = 10.0  # shared counting held this long: Redis is back for good, the next outage is a new one
FIRST_FLAP_WAIT_S = 0.25  # the first probe's wait after the first flap; doubled per flap after it
MAX_FLAP_WAIT_S = 8.0  # a flapping Redis is tried again at least this often


class RecoveryPacing:
    """The wait before the first recovery probe of each fallback, from the fallbacks and recoveries so far
    (times on the event loop's clock). Pure: the backend reports, this decides."""

    def __init__(self) -> None:
        self.flaps = 0  # fallbacks in a row, each within FLAP_WINDOW_S of the recovery before it
        self._restored_at: float | None = None

    def fell_back(self, now: float, first_wait_s: float) -> float:
        """A fallback at `now`: the wait before its first probe (`first_wait_s` after a lone outage)."""
        if self._restored_at is not None and now - self._restored_at < FLAP_WINDOW_S:
            self.flaps += 1
        else:
            self.flaps = 0
        if self.flaps == 0:
            return first_wait_s
        return max(first_wait_s, min(FIRST_FLAP_WAIT_S * (1 << min(self.flaps - 1, 8)), MAX_FLAP_WAIT_S))

    def restored(self, now: float) -> None:
        self._restored_at = now
