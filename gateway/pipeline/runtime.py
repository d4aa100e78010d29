"""Everything a request needs, compiled once per config: translators, compiled redaction profiles and
guardrails, breakers, learned facts. A SIGHUP reload builds a new Runtime and swaps it in atomically;
requests in flight keep the one they started with.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.config.aliases import ALIAS
from gateway.config.types import ApiKey, Config, Deployment, ModelConfig, ProviderConfig
from gateway.core.policy.affinity import SeenSessions
from gateway.core.policy.breaker import BreakerPolicy, CircuitBreaker
from gateway.core.policy.latency import LatencyBook
from gateway.pipeline.auth import KeyRing
from gateway.pipeline.jwt_auth import Jwks, JwtAuth
from gateway.pipeline.learned import Learned
from gateway.pipeline.safety import Safety, compile_safety
from gateway.pipeline.served_names import LearnedNames, served_model
from gateway.pipeline.slicer import Slicer
from gateway.providers.base import Translator
from gateway.providers.registry import Translators, build_translators
from gateway.state.base import ServedName, StateBackend
from gateway.store import ControlPlane
from gateway.upstream import Upstream


@dataclass(slots=True)
class Runtime:
    config: Config
    translators: Translators
    upstream: Upstream
    safety: Safety
    keyring: KeyRing
    learned: Learned
    breakers: dict[str, CircuitBreaker]
    inflight: dict[str, int]  # deployment label -> attempts open now (balanced routing)
    slicer: Slicer = field(default_factory=Slicer)  # masking and guardrail checks, a slice at a time
    rand: random.Random = field(default_factory=random.Random)
    clock: Callable[[], float] = time.time  # epoch seconds for the rate limits (tests drive their own)
    control: ControlPlane | None = None  # the store's keys, teams and ledger (`store.url`), kept on reload
    sessions: SeenSessions = field(default_factory=SeenSessions)  # affinity's `new` sessions, kept on reload
    served_names: LearnedNames = field(default_factory=LearnedNames)  # upstream-reported names, kept on reload
    # learned upstream TTFTs (`routing: latency`, cost's ties), per replica and kept on reload, on their
    # own monotonic clock (tests drive their own to skip the 30 s a probe waits for)
    latency: LatencyBook = field(default_factory=LatencyBook)
    mono: Callable[[], float] = time.monotonic

    def provider(self, d: Deployment) -> ProviderConfig:
        return self.config.providers[d.provider]

    def translator(self, schema: str, d: Deployment) -> Translator | None:
        """`d`'s cell of the support matrix for a client API's schema (`ClientApi.schema`); None when its
        provider type does not serve that API."""
        return self.translators.get(schema, d.provider)

    def breaker(self, d: Deployment) -> CircuitBreaker:
        b = self.breakers.get(d.label)
        if b is None:
            cfg = self.config.providers[d.provider].breaker
            policy = BreakerPolicy(cfg.failures, cfg.window_s, cfg.cooldown_s)
            b = self.breakers[d.label] = CircuitBreaker(policy)
        return b

    def allowed(self, d: Deployment) -> bool:
        return self.breaker(d).allow(time.monotonic())

    def model(self, name: str, key: ApiKey | None = None) -> ModelConfig | None:
        """The configured model a request's `model` names: by its name or an alias, else by an upstream
        model name the gateway gave back in an answer, the first such model `key` may use
        (docs/agents.md, "Names the gateway gave back")."""
        model = self.config.resolve_model(name)
        if model is not None:
            return model
        return served_model(name, key, self.config.model_names, self.served_names, self.config.models.get)

    async def shared_model(self, name: str, key: ApiKey | None, state: StateBackend) -> ModelConfig | None:
        """For a name `model` did not reach: the names other processes learned from answers, from the state
        backend (docs/agents.md, "Names the gateway gave back"). Callers ask `model` first, so a request for
        a known name never waits on the state; one read per request for an unknown name."""
        if not ALIAS.match(name):
            return None  # a name no upstream could have reported is never looked up
        served = await state.served_names(name)
        if not served:
            return None
        self.served_names.adopt(name, served, self.config.model_names)
        return self.model(name, key)

    def learn_served_name(self, d: Deployment, model: str, reported: object, state: StateBackend) -> None:
        """An answer of deployment `d` of `model` carried `reported` as its model: kept if it is a name
        the config does not resolve, so a client may send it back, and recorded in the state backend the
        first time, for the other processes (in the background: the answer never waits for it)."""
        if isinstance(reported, str) and self.served_names.learn(reported, model, d.model, self.config.model_names):
            state.record_served_name(reported, ServedName(model=model, upstream=d.model))


def build_runtime(config: Config, upstream: Upstream,
                  previous: Runtime | None = None, control: ControlPlane | None = None) -> Runtime:
    """Compile a config. Raises ValueError with a key path when something cannot be compiled."""
    control = control or (previous.control if previous else None)
    return Runtime(
        config=config,
        translators=build_translators(config.providers),
        upstream=upstream,
        safety=compile_safety(config, upstream.minted.secrets),
        keyring=KeyRing(config.auth, control.cache if control is not None else None,
                        _jwt_auth(config, upstream, control, previous)),
        learned=previous.learned if previous else Learned(),
        breakers=_kept_breakers(previous, config) if previous else {},
        inflight=previous.inflight if previous else {},
        slicer=previous.slicer if previous else Slicer(),
        clock=previous.clock if previous else time.time,
        control=control,
        sessions=previous.sessions if previous else SeenSessions(),
        served_names=previous.served_names if previous else LearnedNames(),
        latency=previous.latency if previous else LatencyBook(),
        mono=previous.mono if previous else time.monotonic,
    )


def _kept_breakers(previous: Runtime, config: Config) -> dict[str, CircuitBreaker]:
    """What a reload keeps of the breakers: a deployment's (open, or counting failures) while it is still
    configured and its provider's `breaker` settings are the same. The rest are dropped and made anew on
    first use, so changed settings apply at once, and the table holds the labels of the config in force
    only, not every label a process ever served (docs/runbook.md, "Reload rejected")."""
    before, now = previous.config.providers, config.providers
    kept: dict[str, CircuitBreaker] = {}
    for model in config.models.values():
        for d in model.deployments:
            b = previous.breakers.get(d.label)
            was = before.get(d.provider)
            if b is not None and was is not None and was.breaker == now[d.provider].breaker:
                kept[d.label] = b
    return kept


def _jwt_auth(config: Config, upstream: Upstream, control: ControlPlane | None,
              previous: Runtime | None) -> JwtAuth | None:
    """`auth.jwt`'s verifier; a reload with the same IdP keeps the keys already fetched and, with the same
    `refetch_s`, the gate that spaces the fetches unknown `kid`s cause."""
    cfg = config.auth.jwt
    if cfg is None:
        return None
    teams = control.cache if control is not None else None
    old = previous.keyring.jwt if previous is not None else None
    if old is None or (old.cfg.issuer, old.cfg.jwks_url) != (cfg.issuer, cfg.jwks_url):
        return JwtAuth(cfg, Jwks(cfg, upstream.get_json), teams)
    gate = old.gate if old.cfg.refetch_s == cfg.refetch_s else None
    return JwtAuth(cfg, old.jwks, teams, gate=gate)
