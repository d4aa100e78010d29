"""Budget holds (docs/keys-teams-spend.md, Budgets): the estimated cost of every request this process has
admitted and not yet charged, per counter and budget period, for both backends.

A budget's check reads the period's spend, adds what is held, and holds the new request's estimate in
one step of the event loop, so requests admitted together each see the ones before them. Without it they
all passed a check no charge had reached yet: a tenant with a cent left got as many requests as it sent
at once. Held in this process only: a shared store's spend is what the replicas have charged, and a hold
kept there would outlive a replica that died holding it, for the rest of the period.
"""

from __future__ import annotations

from gateway.state.base import Period, SpendHold, period_id


class SpendHolds:
    """Per (counter, period kind): the period the holds are in, their sum, and how many there are."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, Period], tuple[str, float, int]] = {}

    def held(self, key: str, period: Period, now: float) -> float:
        entry = self._held.get((key, period))
        return entry[1] if entry is not None and entry[0] == period_id(period, now) else 0.0

    def take(self, key: str, period: Period, spent: float, budget: float, usd: float, now: float) -> SpendHold | None:
        """Hold `usd` when `spent` and what is held are under `budget`; None (nothing held) when not."""
        if spent + self.held(key, period, now) >= budget:
            return None
        pid = period_id(period, now)
        entry = self._held.get((key, period))
        if entry is None or entry[0] != pid:
            entry = (pid, 0.0, 0)  # a new period: the last one's holds no longer limit anything
        self._held[(key, period)] = (pid, entry[1] + usd, entry[2] + 1)
        return SpendHold(key, period, pid, usd)

    def give_back(self, hold: SpendHold) -> None:
        entry = self._held.get((hold.key, hold.period))
        if entry is None or entry[0] != hold.period_id:
            return  # its period is over, and its holds were forgotten with it
        if entry[2] <= 1:
            del self._held[(hold.key, hold.period)]  # no float left over, and no entry for an idle key
        else:
            self._held[(hold.key, hold.period)] = (entry[0], max(0.0, entry[1] - hold.usd), entry[2] - 1)

    def counters(self) -> int:
        """Counters with requests in flight holding (for tests: an idle key holds nothing)."""
        return len(self._held)
