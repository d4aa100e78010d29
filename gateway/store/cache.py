"""Each replica's cache of the stored keys and teams: what the request path reads instead of the store.

Built whole from a `Snapshot` and swapped in one assignment, so a lookup never sees half a change. A
key in a team carries the team's limits (`ApiKey.team`) and the intersection of both model lists.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.config.types import ApiKey, TeamLimits
from gateway.store.types import Snapshot, StoredKey, Team


class KeyCache:
    def __init__(self, clock: Callable[[], float] = time.time):
        self._by_digest: dict[bytes, tuple[ApiKey, float | None]] = {}
        self.version = -1  # nothing loaded yet
        self.names: frozenset[str] = frozenset()
        self.teams: frozenset[str] = frozenset()
        self.team_limits: dict[str, TeamLimits] = {}  # by name: what an IdP token's team obeys
        self._clock = clock

    def load(self, snap: Snapshot) -> None:
        teams = {t.name: t for t in snap.teams}
        keys = {k.name: api_key(k, teams.get(k.team) if k.team else None) for k in snap.keys}
        by_digest: dict[bytes, tuple[ApiKey, float | None]] = {}
        for s in snap.secrets:
            key = keys.get(s.key_name)
            if key is not None:
                by_digest[bytes.fromhex(s.digest)] = (key, s.expires_at)
        self._by_digest, self.names, self.teams = by_digest, frozenset(keys), frozenset(teams)
        self.team_limits = {t.name: team_limits(t) for t in snap.teams}
        self.version = snap.version

    def find(self, digest: bytes) -> ApiKey | None:
        """The stored key whose secret has this SHA-256, unless it (or this secret) has expired."""
        hit = self._by_digest.get(digest)
        if hit is None:
            return None
        key, secret_expires = hit
        if secret_expires is not None or key.expires_at is not None:
            now = self._clock()
            if (secret_expires is not None and now >= secret_expires) or (
                    key.expires_at is not None and now >= key.expires_at):
                return None
        return key

    def expired(self, digest: bytes) -> bool:
        """Whether this secret names a stored key past its own `expires_at` (not a secret past a
        rotation's grace: that one is simply no longer valid)."""
        hit = self._by_digest.get(digest)
        return hit is not None and hit[0].expires_at is not None and self._clock() >= hit[0].expires_at


def api_key(k: StoredKey, team: Team | None) -> ApiKey:
    lim = k.limits
    models = lim.models
    limits = None
    if team is not None:
        t = team.limits
        if t.models is not None:
            models = t.models if models is None else tuple(m for m in models if m in t.models)
        limits = team_limits(team)
    return ApiKey(name=k.name, models=models, rpm=lim.rpm, tpm=lim.tpm, budget_usd=lim.budget_usd,
                  budget_period=lim.budget_period, team=limits, expires_at=k.expires_at, id=k.id)


def team_limits(team: Team) -> TeamLimits:
    t = team.limits
    return TeamLimits(name=team.name, rpm=t.rpm, tpm=t.tpm, budget_usd=t.budget_usd, budget_period=t.budget_period,
                      id=team.id)
