"""Each replica's cache of the stored keys and teams: what the request path reads instead of the store.

Built whole from a `Snapshot` and swapped in one assignment, so a lookup never sees half a change. A
key in a team carries the team's limits (`ApiKey.team`) and the intersection of both model lists.

The config's keys (`auth.keys`) and the stored ones share one namespace of names and secrets
(docs/keys-teams-spend.md, "Config keys and stored keys"): `clashes` is the check a start or a reload
makes before it uses a config, and a stored key that clashes anyway (written by a replica with an older
config, or in the database by hand) is left out of the lookup: the config key wins, on every replica
whose config holds it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import structlog

from gateway.config.types import ApiKey, TeamLimits
from gateway.store.types import Snapshot, StoredKey, Team

log = structlog.get_logger("gateway")
Hit = tuple[ApiKey, float | None]  # a stored key and its secret's own `expires_at`


@dataclass(frozen=True, slots=True)
class Clash:
    """A config key (`auth.keys[index]`) and a stored key with its name, or with one of its secrets."""

    index: int
    field: Literal["name", "key", "key_sha256"]  # the config key's field that clashes
    stored: str  # the stored key's name

    def line(self) -> str:
        """The config error's line (docs/reference.md, "Commands"): it names the config key's path."""
        path = f"auth.keys[{self.index}].{self.field}"
        if self.field == "name":
            return (f'{path}: "{self.stored}" is also the name of a stored key (store.url): rename this key, '
                    f"or revoke the stored one")
        return f'{path}: the same secret as the stored key "{self.stored}": every key needs its own'


class KeyCache:
    def __init__(self, clock: Callable[[], float] = time.time,
                 on_shadowed: Callable[[int], None] = lambda keys: None):
        self._stored: dict[bytes, Hit] = {}  # every stored secret, a clashing key's included
        self._by_digest: dict[bytes, Hit] = {}  # what `find` answers: without the keys the config's shadow
        self._config: tuple[ApiKey, ...] = ()  # `auth.keys` of the config in use (`reserve`)
        self.shadowed: tuple[Clash, ...] = ()
        self.version = -1  # nothing loaded yet
        self.names: frozenset[str] = frozenset()
        self.teams: frozenset[str] = frozenset()
        self.team_limits: dict[str, TeamLimits] = {}  # by name: what an IdP token's team obeys
        self._clock = clock
        self._on_shadowed = on_shadowed  # llm_gateway_stored_keys_shadowed: how many stored keys are left out

    def load(self, snap: Snapshot) -> None:
        teams = {t.name: t for t in snap.teams}
        keys = {k.name: api_key(k, teams.get(k.team) if k.team else None) for k in snap.keys}
        stored: dict[bytes, Hit] = {}
        for s in snap.secrets:
            key = keys.get(s.key_name)
            if key is not None:
                stored[bytes.fromhex(s.digest)] = (key, s.expires_at)
        self._stored, self.names, self.teams = stored, frozenset(keys), frozenset(teams)
        self.team_limits = {t.name: team_limits(t) for t in snap.teams}
        self._shadow()
        self.version = snap.version

    def clashes(self, config: tuple[ApiKey, ...]) -> list[Clash]:
        """The config's keys (`auth.keys`) that share a name or a secret with a stored key. Reads only
        what `load` swapped in whole, so a reload may ask from its worker thread."""
        names, stored = self.names, self._stored
        found: list[Clash] = []
        for i, k in enumerate(config):
            if k.name in names:
                found.append(Clash(i, "name", k.name))
            hit = stored.get(config_digest(k))
            if hit is not None:
                found.append(Clash(i, "key_sha256" if k.key_sha256 else "key", hit[0].name))
        return found

    def reserve(self, config: tuple[ApiKey, ...]) -> None:
        """The keys of the config in use, at start and on each reload: from now on a stored key that
        clashes with one of them is left out (`_shadow`)."""
        self._config = config
        self._shadow()

    def _shadow(self) -> None:
        """The lookup without the stored keys that clash with a config key (all of their secrets): the
        config key wins, whatever the order of the rows, and each clash is logged once (until it goes away
        and comes back)."""
        clashes = tuple(self.clashes(self._config))
        out = {c.stored for c in clashes}
        stored = self._stored
        self._by_digest = {d: hit for d, hit in stored.items() if hit[0].name not in out} if out else stored
        self._on_shadowed(len(out))  # before the log line, so the gauge already counts what it reports
        for c in clashes:
            if c not in self.shadowed:
                log.error("stored_key_shadowed", key=c.stored, config_key=f"auth.keys[{c.index}]", field=c.field,
                          message="a stored key shares this config key's name or secret: the config key wins and "
                          "the stored key is refused until one of them is renamed or revoked")
        self.shadowed = clashes

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


def config_digest(k: ApiKey) -> bytes:
    """A config key's secret as the SHA-256 the store keeps (`key_sha256` is that already)."""
    return bytes.fromhex(k.key_sha256) if k.key_sha256 else hashlib.sha256((k.key or "").encode()).digest()


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
