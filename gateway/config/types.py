"""The compiled configuration: frozen dataclasses, built once by `gateway.config`.

Nothing outside `gateway.config` reads YAML or the environment; everything else receives these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from gateway.config.aliases import ModelNames
from gateway.core.policy.retry import RetryPolicy
from gateway.core.policy.routing import RouteTable, Routing
from gateway.core.proxy import Proxy
from gateway.providers.settings import AwsSettings, BreakerConfig, ProviderConfig, Timeouts

# re-exported: defined beside the code that reads them, built here
__all__ = ["AwsSettings", "BreakerConfig", "ProviderConfig", "Proxy", "RetryPolicy", "Routing", "Timeouts"]

Stage = Literal["input", "output", "both"]
GuardMode = Literal["stream", "hold", "audit"]


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS on the API listener: PEM files, read at start and again on every SIGHUP."""

    cert_file: str
    key_file: str
    # the passphrase of an encrypted key (from the environment with ${VAR}); never in a repr or log
    key_password: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class CorsConfig:
    """Opt-in CORS for browser clients: off while `allow_origins` is empty."""

    allow_origins: tuple[str, ...] = ()  # exact origins (`https://app.example.com`) or `*`
    max_age_s: int = 600


@dataclass(frozen=True, slots=True)
class Egress:
    """The process's egress proxies, read from HTTPS_PROXY / HTTP_PROXY / NO_PROXY at start."""

    https: Proxy | None = None
    http: Proxy | None = None
    no_proxy: tuple[str, ...] = ()


SLICE_MIN_US, SLICE_MAX_US = 100, 100_000  # the slices Linux takes as given (it clamps others)


DEFAULT_MAX_CONNECTIONS = 10_000


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    metrics_port: int = 9464
    max_body_bytes: int = 10 * 1024 * 1024
    drain_s: float = 30.0
    websocket_idle_s: float = 300.0  # a WebSocket-mode connection with no message this long is closed
    websocket_max_per_key: int = 32  # WebSocket-mode connections one key may hold open (per process); past it 429
    keepalive_after_s: float = 10.0
    # open client connections; past it a new one gets 503. None: DEFAULT_MAX_CONNECTIONS, or what the file
    # descriptor limit holds when that is less (docs/extensions.md, server)
    max_connections: int | None = None
    request_head_timeout_s: float = 15.0  # a request's first byte (the first's: the accept) to its head's end (408)
    send_timeout_s: float = 30.0  # a client that reads nothing of its response this long is cut
    loop_turn_ms: float = 2.0  # request steps one loop iteration runs before the rest wait (0: no limit)
    sched_slice_us: int = 0  # the loop thread's EEVDF slice suggestion (0: the kernel's default)
    tls: TlsConfig | None = None
    cors: CorsConfig = CorsConfig()


@dataclass(frozen=True, slots=True)
class TeamLimits:
    """A stored key's team (docs/keys-teams-spend.md): limits and a budget counted for all its keys together, on top
    of each key's own. Counted in the state backend under its id (`team_counter`)."""

    name: str
    rpm: int | None = None
    tpm: int | None = None
    budget_usd: float | None = None
    budget_period: Literal["day", "month"] = "day"
    id: str | None = None  # a team created since teams have ids: unique for ever, unlike the name

    @property
    def counter(self) -> str:
        return team_counter(self.name, self.id)


def team_counter(name: str, team_id: str | None) -> str:
    """`TeamLimits.counter` of a team's name and id: a team with an id counts under it (a team re-created
    under a deleted one's name starts from nothing); one created before teams had ids, or an IdP token's
    team the store does not hold, under its name. `/` is in no key or team name."""
    return f"team/{name}" if team_id is None else f"team-id/{team_id}"


@dataclass(frozen=True, slots=True)
class ApiKey:
    name: str
    key: str | None = field(default=None, repr=False)
    key_sha256: str | None = field(default=None, repr=False)
    models: tuple[str, ...] | None = None
    rpm: int | None = None
    tpm: int | None = None
    budget_usd: float | None = None
    budget_period: Literal["day", "month"] = "day"
    team: TeamLimits | None = None  # stored keys only; `models` is then already the two lists' intersection
    expires_at: float | None = None  # epoch seconds (stored keys)
    subject: str | None = None  # an IdP token's `sub` (docs/identity.md); None for a key
    id: str | None = None  # stored keys: unique for ever, unlike the name, which a new key may reuse

    @property
    def counter(self) -> str:
        """What its limits and spend are counted under in the state backend: a stored key's id (a new
        key under a revoked key's name starts from nothing), else its name. `/` is in no key name."""
        return key_counter(self.name, self.id)


def key_counter(name: str, key_id: str | None) -> str:
    """`ApiKey.counter` of a key's name and id: the ledger's rows map to the same counters."""
    return name if key_id is None else f"key/{key_id}"


@dataclass(frozen=True, slots=True)
class JwtGroup:
    """An `auth.jwt.groups` entry: an IdP group's team and models (None: every model)."""

    group: str
    team: str | None = None
    models: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class JwtConfig:
    """`auth.jwt`: IdP-issued tokens beside keys (docs/identity.md)."""

    issuer: str
    audience: str
    jwks_url: str | None = None  # None: discovered from {issuer}/.well-known/openid-configuration
    team_claim: str | None = None
    groups_claim: str = "groups"
    groups: tuple[JwtGroup, ...] = ()
    leeway_s: float = 60.0
    refetch_s: float = 30.0  # at most one JWKS fetch per this long for unknown `kid`s
    refresh_s: float = 300.0  # the JWKS fetched again this often: a key the IdP withdraws stops verifying
    timeout_s: float = 5.0  # one discovery or JWKS fetch


@dataclass(frozen=True, slots=True)
class AuthConfig:
    keys: tuple[ApiKey, ...] = ()
    allow_unauthenticated: bool = False
    jwt: JwtConfig | None = None


@dataclass(frozen=True, slots=True)
class SentinelConfig:
    """`state.sentinel`: the master's name and the Sentinels that know where it is (docs/scale-out.md)."""

    master: str
    urls: tuple[str, ...] = field(default=(), repr=False)  # redis:// or rediss://, may carry a password


RedisMode = Literal["single", "cluster", "sentinel"]


@dataclass(frozen=True, slots=True)
class StateConfig:
    backend: Literal["memory", "redis"] = "memory"
    redis_url: str = field(default="redis://127.0.0.1:6379/0", repr=False)
    # how long the gateway remembers which key and team created a response id (docs/responses-bridge.md)
    response_owner_ttl_s: float = 30 * 86_400.0
    redis_mode: RedisMode = "single"
    redis_ca_file: str | None = None  # a private CA for rediss://
    timeout_ms: int = 50  # the longest a request waits on Redis, per operation
    replicas: int = 1  # replicas sharing the limits: each takes 1/replicas of a limit while Redis is away
    sentinel: SentinelConfig | None = None
    # worker processes of this replica (`--workers`; never read from the file): the local share while
    # Redis is away is a limit / (replicas x workers)
    workers: int = 1


AdminRole = Literal["admin", "team_admin", "viewer"]
ADMIN_ROLES: tuple[AdminRole, ...] = ("admin", "team_admin", "viewer")  # strongest first


@dataclass(frozen=True, slots=True)
class AdminKey:
    """A control-plane key (`admin.keys`): valid on /admin/v1 only, never as a gateway key."""

    name: str
    key_sha256: str = field(repr=False)  # hex digest: a plain `key` is digested at load
    role: AdminRole = "admin"
    team: str | None = None  # a team_admin's team


@dataclass(frozen=True, slots=True)
class AdminJwtGroup:
    """An `admin.jwt_groups` entry: IdP group -> admin role (and a team_admin's team)."""

    group: str
    role: AdminRole
    team: str | None = None


@dataclass(frozen=True, slots=True)
class AdminConfig:
    keys: tuple[AdminKey, ...] = ()
    jwt_groups: tuple[AdminJwtGroup, ...] = ()
    console_oidc_client_id: str | None = None

    @property
    def enabled(self) -> bool:
        """Whether any admin credential can exist: config keys, IdP groups, or (with a store) stored ones."""
        return bool(self.keys or self.jwt_groups)


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Where keys, teams, the spend ledger and the audit log live (docs/keys-teams-spend.md); no `url`: no store."""

    url: str | None = field(default=None, repr=False)  # sqlite:///path or postgresql://...
    poll_s: float = 0.5  # the version poll every replica runs (a backstop for PostgreSQL's NOTIFY)
    ledger_wait_s: float = 2.0  # longest a response waits for its ledger commit while the store is down
    connect_timeout_s: float = 5.0
    # where the spend ledger journals its rows so requests need not wait for their commit: "auto" (beside a
    # SQLite file; none for PostgreSQL, whose replicas' disks may not outlive them), "off", or a directory
    ledger_journal: str = "auto"

    @property
    def dialect(self) -> str:
        return "" if self.url is None else self.url.partition(":")[0]


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float = 0.0
    output: float = 0.0
    cached_input: float | None = None
    cache_creation_input: float | None = None  # `cache_write` in the config is the same price
    cache_creation_input_1h: float | None = None  # Anthropic's 1-hour cache writes; unset: `input`


@dataclass(frozen=True, slots=True)
class Deployment:
    provider: str
    model: str
    price: Price = Price()
    # continues a trailing assistant message (docs/continuation.md); unset in the config: the provider type's
    # default, resolved at load (anthropic natively; OpenAI-compatible servers only when declared)
    prefill: bool = False
    tier: int = 0  # a lower tier is always tried first (docs/routing.md)
    weight: float = 1.0  # `routing: weighted`'s share; 0: a fallback only
    # `provider/model`: the value of `x-gateway-deployment` and the `deployment` label; formatted once
    # here, not at each of the dozen reads a request makes
    label: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", f"{self.provider}/{self.model}")


@dataclass(frozen=True, slots=True)
class ModelConfig:
    name: str
    deployments: tuple[Deployment, ...]
    routing: Routing = "ordered"
    retry: RetryPolicy = RetryPolicy()
    hedge_after_ms: float = 0.0
    guardrails: tuple[str, ...] = ()
    cache: bool = False
    redaction: str = "off"
    aliases: tuple[str, ...] = ()  # other names clients may send, exact or glob (`config.aliases`)
    affinity: Literal["off", "session"] = "off"  # session: keep a session on one deployment (docs/agents.md,
    # "Session affinity")
    continuation: bool = False  # continue a stream that fails after the first token (docs/continuation.md)
    # `prompt_cache: {breakpoints: auto}`: Anthropic cache breakpoints for requests that carry none
    # (docs/caching.md)
    auto_breakpoints: bool = False
    # the deployments by tier, compiled here once (and again when a request narrows `deployments` to
    # those serving its API), never per request
    table: RouteTable = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "table", RouteTable.of(self.deployments))


@dataclass(frozen=True, slots=True)
class GuardrailConfig:
    name: str
    type: Literal["terms", "regex", "webhook"]
    stage: Stage = "output"
    mode: GuardMode = "stream"
    terms: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    url: str | None = None
    timeout_s: float = 5.0


@dataclass(frozen=True, slots=True)
class CustomRule:
    name: str
    pattern: str


@dataclass(frozen=True, slots=True)
class RedactionProfile:
    name: str
    rules: tuple[str, ...] = ("secrets",)
    custom: tuple[CustomRule, ...] = ()
    scope: tuple[str, ...] = ("content", "reasoning", "refusal")
    inputs: bool = False


CACHE_MAX_BYTES = 256 << 20  # the in-memory cache's answers together (an answer may be up to 32 MiB)


@dataclass(frozen=True, slots=True)
class CacheConfig:
    enabled: bool = False
    ttl_s: float = 300.0
    max_entries: int = 10_000
    max_bytes: int = CACHE_MAX_BYTES


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    level: str = "info"
    format: Literal["json", "console"] = "json"


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """OpenTelemetry tracing (docs/extensions.md, "Traces"): the `telemetry` section with the standard `OTEL_*`
    variables under it, resolved once at load (`config.telemetry`). `traces_endpoint` None: tracing is off."""

    traces_endpoint: str | None = None  # the full OTLP/HTTP URL, `.../v1/traces`
    service_name: str = "llm-gateway"
    sampler: str = "parentbased_traceidratio"  # an OTEL_TRACES_SAMPLER value
    sampling_ratio: float = 1.0
    headers: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    resource_attributes: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}))
    export_timeout_s: float = 10.0  # one export request, its retries included
    max_queue_size: int = 2048  # finished spans waiting for export; past it a span is dropped (counted)
    max_export_batch_size: int = 512
    schedule_delay_s: float = 5.0
    # the GenAI convention metrics (issue #62, docs/observability.md): on /metrics unless
    # `genai_metrics: false`; the conventions' newest names with OTEL_SEMCONV_STABILITY_OPT_IN=
    # gen_ai_latest_experimental; pushed by OTLP only with OTEL_METRICS_EXPORTER=otlp
    genai_metrics: bool = True
    semconv_latest_experimental: bool = False
    metrics_endpoint: str | None = None  # the full OTLP/HTTP URL, `.../v1/metrics`
    metrics_headers: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    metric_export_interval_s: float = 60.0  # OTEL_METRIC_EXPORT_INTERVAL

    @property
    def enabled(self) -> bool:
        return self.traces_endpoint is not None


@dataclass(frozen=True, slots=True)
class Config:
    server: ServerConfig
    auth: AuthConfig
    state: StateConfig
    providers: MappingProxyType[str, ProviderConfig]
    models: MappingProxyType[str, ModelConfig]
    guardrails: MappingProxyType[str, GuardrailConfig]
    redaction_profiles: MappingProxyType[str, RedactionProfile]
    cache: CacheConfig
    logging: LoggingConfig
    telemetry: TelemetryConfig = TelemetryConfig()
    egress: Egress = Egress()
    admin: AdminConfig = AdminConfig()
    store: StoreConfig = StoreConfig()
    is_demo: bool = False
    file_listen: tuple[str, int, int] | None = None  # the file's host, port, metrics_port under `serve --host/...`
    model_names: ModelNames = field(default_factory=ModelNames)  # every name and alias of `models`, compiled at load

    def resolve_model(self, requested: str) -> ModelConfig | None:
        """The model a request's `model` names: its name, an exact alias, or a glob alias."""
        name = self.model_names.resolve(requested)
        return self.models.get(name) if name is not None else self.models.get(requested)

    def secret_values(self) -> tuple[str, ...]:
        """Every configured secret, so output paths can prove none of them leaks."""
        out: list[str] = [p.api_key for p in self.providers.values() if p.api_key]
        out += [k.key for k in self.auth.keys if k.key]
        if self.store.url and "@" in self.store.url:
            out.append(self.store.url)
        return tuple(out)

