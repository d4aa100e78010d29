"""A provider's settings (`providers.<name>` in the config): what translators and the upstream client read.

Here rather than in `gateway.config` so the providers depend on no other package than `core`; the config
builds these and validates `type` against the one registry (`providers.registry`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

from gateway.core.proxy import Proxy


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect_s: float = 5.0
    first_token_s: float = 60.0
    idle_s: float = 60.0
    total_s: float = 600.0


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """Circuit breaker per deployment of this provider (an extension of docs/reference.md, "Config keys")."""

    failures: int = 5
    window_s: float = 30.0
    cooldown_s: float = 15.0


@dataclass(frozen=True, slots=True)
class AwsSettings:
    """A `bedrock` provider's region and credentials (docs/reference.md, "Config keys"; docs/cloud-providers.md). Keys
    left empty: the AWS default chain (environment, shared files and `AWS_PROFILE`, web identity, container, instance
    metadata)."""

    region: str = ""
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    role_arn: str | None = None  # assumed (STS AssumeRole) with the credentials above or the chain's


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    name: str
    type: str  # a key of `providers.registry.PROVIDERS`
    base_url: str = ""
    api_key: str | None = field(default=None, repr=False)
    headers: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    timeouts: Timeouts = Timeouts()
    breaker: BreakerConfig = BreakerConfig()
    api_version: str | None = None  # azure
    anthropic_version: str = "2023-06-01"  # anthropic
    aws: AwsSettings | None = None  # bedrock
    project: str | None = None  # vertex
    location: str | None = None  # vertex: a region, or "global"
    credentials_file: str | None = None  # vertex: a service account's (or ADC's) JSON; else the default chain
    responses: bool = True  # openai: the server has `/responses`; false: the Responses bridge
    # (docs/responses-bridge.md)
    learn_ttl_s: float = 600.0  # how long a learn-once fact (docs/extensions.md, "Failure semantics") holds before a
    # re-probe
    # egress: `proxy` set is this provider's proxy; else, with `use_env_proxy`, HTTPS_PROXY/HTTP_PROXY
    # and NO_PROXY decide; `proxy: false` in the config clears both (always direct)
    proxy: Proxy | None = None
    use_env_proxy: bool = True
    forward_headers: tuple[str, ...] = ()  # lower-case client header names passed to the upstream
    genai_name: str = ""  # the type's `gen_ai.provider.name` (traces), from the registry
    # mock only: pacing of the built-in demo answer
    ttft_ms: float = 120.0
    token_delay_ms: float = 15.0
