"""Provider type -> what serves it. The only place that lists the provider types.

Each kind names what its config must carry, its default forwarded headers and, for the built-in `mock`,
the answer played in process instead of a network request; `CELLS` is the support matrix. Translators
are built once per config (`build_translators`), at load and on every reload.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.providers.base import Translator, UpstreamRequest
from gateway.providers.chat_anthropic import AnthropicChat
from gateway.providers.chat_azure import AzureChat
from gateway.providers.chat_bedrock import BedrockChat
from gateway.providers.chat_gemini import GeminiChat
from gateway.providers.chat_mock import MockChat
from gateway.providers.chat_openai import OpenAIChat
from gateway.providers.chat_vertex import VertexChat
from gateway.providers.convert.bedrock_endpoint import bedrock_base_url
from gateway.providers.convert.google_chat import GEMINI_API
from gateway.providers.convert.vertex_endpoint import vertex_base_url
from gateway.providers.demo import MockScript, mock_script
from gateway.providers.messages_anthropic import AnthropicMessages
from gateway.providers.messages_azure import AzureMessages
from gateway.providers.messages_bedrock import BedrockMessages
from gateway.providers.messages_gemini import GeminiMessages
from gateway.providers.messages_mock import MockMessages
from gateway.providers.messages_openai import OpenAIMessages
from gateway.providers.messages_vertex import VertexMessages
from gateway.providers.responses_anthropic import AnthropicResponses
from gateway.providers.responses_azure import AzureResponses
from gateway.providers.responses_bedrock import BedrockResponses
from gateway.providers.responses_gemini import GeminiResponses
from gateway.providers.responses_mock import MockResponses
from gateway.providers.responses_openai import openai_responses
from gateway.providers.responses_vertex import VertexResponses
from gateway.providers.settings import ProviderConfig

InProcess = Callable[[ProviderConfig, str, bytes], MockScript]
TranslatorFactory = Callable[[ProviderConfig], Translator]


@dataclass(frozen=True, slots=True)
class ProviderKind:
    remote: bool = True  # needs `base_url`
    requires: tuple[str, ...] = ()  # config keys the type cannot work without
    in_process: InProcess | None = None  # answered without a network request
    # client headers passed through by default (`forward_headers` replaces the list); never a key
    forward_headers: tuple[str, ...] = ("x-request-id",)
    genai_name: str = ""  # `gen_ai.provider.name` in traces (OTel GenAI semantic conventions)
    auth: str = ""  # its requests are signed: the kind of `upstream.signing.SIGNERS` ("sigv4", "google")
    prefill: bool = False  # continues a trailing assistant message natively (a deployment's default,
    # docs/continuation.md)
    # the `base_url` when the config gives none (a cloud's public endpoint, from the provider's settings)
    default_base_url: Callable[[ProviderConfig], str] | None = None
    # a server of this type may lack the Responses API: `responses: false` bridges it (docs/responses-bridge.md)
    responses_optional: bool = False


PROVIDERS: dict[str, ProviderKind] = {
    # not `openai-organization` and `openai-project` by default: with them a client picks which of the
    # provider key's organisations and projects is billed for its traffic (docs/reference.md,
    # `forward_headers`); an operator who wants that lists them, or pins one in `headers`
    "openai": ProviderKind(genai_name="openai", responses_optional=True, forward_headers=("x-request-id",)),
    # anthropic-version too: on the native Messages path the client's version is the one its body and
    # parser speak; a translated request always carries the configured one (the translator sets it)
    "anthropic": ProviderKind(genai_name="anthropic", prefill=True,
                              forward_headers=("anthropic-version", "anthropic-beta", "x-request-id")),
    "azure": ProviderKind(requires=("api_version",), genai_name="azure.ai.openai"),
    # region and credentials: `ProviderConfig.aws`; the client's anthropic-beta goes into Claude's body
    "bedrock": ProviderKind(genai_name="aws.bedrock", auth="sigv4", forward_headers=("anthropic-beta", "x-request-id"),
                            default_base_url=bedrock_base_url),
    "gemini": ProviderKind(requires=("api_key",), genai_name="gcp.gemini", default_base_url=lambda _: GEMINI_API),
    # anthropic-beta: Claude Code's betas, passed on to Claude on Vertex (`messages_vertex`)
    "vertex": ProviderKind(requires=("project", "location"), genai_name="gcp.vertex_ai", auth="google",
                           forward_headers=("anthropic-beta", "x-request-id"), default_base_url=vertex_base_url),
    "mock": ProviderKind(remote=False, in_process=mock_script, forward_headers=(), genai_name="llm_gateway.mock"),
}
PROVIDER_TYPES: tuple[str, ...] = tuple(PROVIDERS)

# The support matrix, one translator per cell: (client schema, provider type). A cell is named by the file
# its translator is defined in, `providers/<schema>_<type>.py`, so the folder listing is the matrix. The
# schema is the wire format a client API speaks (`ClientApi.schema`: token counting speaks the Messages
# API's, embeddings go to the chat cell); a missing cell means the type does not serve that schema, and
# the API's requests never go to its deployments.
TRANSLATORS: tuple[TranslatorFactory, ...] = (
    OpenAIChat, AnthropicChat, AzureChat, MockChat, BedrockChat,
    openai_responses, AnthropicResponses, AzureResponses, MockResponses,
    OpenAIMessages, AnthropicMessages, AzureMessages, MockMessages, BedrockMessages,
    GeminiChat, GeminiMessages, VertexChat, VertexMessages,
    BedrockResponses, GeminiResponses, VertexResponses,
)


def cell_of(factory: TranslatorFactory) -> tuple[str, str]:
    """(schema, provider type) of a translator, from its module `gateway.providers.<schema>_<type>`."""
    schema, _, ptype = factory.__module__.rpartition(".")[2].partition("_")
    return schema, ptype


CELLS: dict[tuple[str, str], TranslatorFactory] = {cell_of(f): f for f in TRANSLATORS}


@dataclass(frozen=True, slots=True)
class Translators:
    """One translator per configured provider and schema its type serves."""

    cells: dict[tuple[str, str], Translator]  # (schema, provider name)

    def get(self, schema: str, provider: str) -> Translator | None:
        return self.cells.get((schema, provider))


def register(provider_type: str, kind: ProviderKind, cells: Mapping[str, TranslatorFactory]) -> None:
    """A provider type whose cells live outside this package (a plugin, or a test's scripted type): its
    kind and its cells by schema, before the config is parsed. A type of the gateway's own is a line in
    `PROVIDERS` and its cells in `TRANSLATORS` instead (docs/architecture.md, "Adding a provider type")."""
    PROVIDERS[provider_type] = kind
    for schema, factory in cells.items():
        CELLS[(schema, provider_type)] = factory


def unregister(provider_type: str) -> None:
    """Undo `register`."""
    PROVIDERS.pop(provider_type, None)
    for cell in [c for c in CELLS if c[1] == provider_type]:
        del CELLS[cell]


def build_translators(providers: Mapping[str, ProviderConfig]) -> Translators:
    cells: dict[tuple[str, str], Translator] = {}
    for name, cfg in providers.items():
        if cfg.type not in PROVIDERS:
            raise ValueError(f'providers.{name}.type: provider type "{cfg.type}" is not available')
        for (schema, ptype), factory in CELLS.items():
            if ptype == cfg.type:
                cells[(schema, name)] = factory(cfg)
    return Translators(cells)


def auth_of(provider_type: str) -> str:
    kind = PROVIDERS.get(provider_type)
    return kind.auth if kind is not None else ""


def in_process(provider: ProviderConfig, req: UpstreamRequest) -> MockScript | None:
    """The answer of a provider played in process (the built-in demo), or None for a network one."""
    kind = PROVIDERS.get(provider.type)
    if kind is None or kind.in_process is None:
        return None
    return kind.in_process(provider, req.url, req.body)
