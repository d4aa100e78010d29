"""Provider type -> what serves it. The only place that lists the provider types.

Each kind names its translator per client schema (a missing one means the type does not serve that
API), what its config must carry, and, for the built-in `mock`, the answer played in process instead of
a network request. Built once per config (`build_translators`), at load and on every reload.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.providers.base import ChatTranslator, MessagesTranslator, ResponsesTranslator, UpstreamRequest
from gateway.providers.chat_anthropic import AnthropicChat
from gateway.providers.chat_azure import AzureChat
from gateway.providers.chat_mock import MockChat
from gateway.providers.chat_openai import OpenAIChat
from gateway.providers.demo import MockScript, mock_script
from gateway.providers.messages_anthropic import AnthropicMessages
from gateway.providers.messages_azure import AzureMessages
from gateway.providers.messages_mock import MockMessages
from gateway.providers.messages_openai import OpenAIMessages
from gateway.providers.responses_azure import AzureResponses
from gateway.providers.responses_mock import MockResponses
from gateway.providers.responses_openai import OpenAIResponses
from gateway.providers.settings import ProviderConfig

InProcess = Callable[[ProviderConfig, str, bytes], MockScript]


@dataclass(frozen=True, slots=True)
class ProviderKind:
    chat: Callable[[ProviderConfig], ChatTranslator]
    responses: Callable[[ProviderConfig], ResponsesTranslator] | None = None  # None: no Responses API
    messages: Callable[[ProviderConfig], MessagesTranslator] | None = None  # None: no Messages API
    remote: bool = True  # needs `base_url`
    requires: tuple[str, ...] = ()  # config keys the type cannot work without
    in_process: InProcess | None = None  # answered without a network request
    # client headers passed through by default (`forward_headers` replaces the list); never a key
    forward_headers: tuple[str, ...] = ("x-request-id",)
    genai_name: str = ""  # `gen_ai.provider.name` in traces (OTel GenAI semantic conventions)


PROVIDERS: dict[str, ProviderKind] = {
    "openai": ProviderKind(OpenAIChat, OpenAIResponses, OpenAIMessages, genai_name="openai",
                           forward_headers=("openai-organization", "openai-project", "x-request-id")),
    # anthropic-version too: on the native Messages path the client's version is the one its body and
    # parser speak; a translated request always carries the configured one (the translator sets it)
    "anthropic": ProviderKind(AnthropicChat, messages=AnthropicMessages, genai_name="anthropic",
                              forward_headers=("anthropic-version", "anthropic-beta", "x-request-id")),
    "azure": ProviderKind(AzureChat, AzureResponses, AzureMessages, requires=("api_version",),
                          genai_name="azure.ai.openai"),
    "mock": ProviderKind(MockChat, MockResponses, MockMessages, remote=False, in_process=mock_script,
                         forward_headers=(), genai_name="llm_gateway.mock"),
}
PROVIDER_TYPES: tuple[str, ...] = tuple(PROVIDERS)


@dataclass(frozen=True, slots=True)
class Translators:
    """One translator per configured provider and client schema; `responses` and `messages` hold only
    the providers whose type serves that API."""

    chat: dict[str, ChatTranslator]
    responses: dict[str, ResponsesTranslator]
    messages: dict[str, MessagesTranslator]


def register(provider_type: str, kind: ProviderKind) -> None:
    PROVIDERS[provider_type] = kind


def build_translators(providers: Mapping[str, ProviderConfig]) -> Translators:
    chat: dict[str, ChatTranslator] = {}
    responses: dict[str, ResponsesTranslator] = {}
    messages: dict[str, MessagesTranslator] = {}
    for name, cfg in providers.items():
        kind = PROVIDERS.get(cfg.type)
        if kind is None:
            raise ValueError(f'providers.{name}.type: provider type "{cfg.type}" is not available')
        chat[name] = kind.chat(cfg)
        if kind.responses is not None:
            responses[name] = kind.responses(cfg)
        if kind.messages is not None:
            messages[name] = kind.messages(cfg)
    return Translators(chat, responses, messages)


def in_process(provider: ProviderConfig, req: UpstreamRequest) -> MockScript | None:
    """The answer of a provider played in process (the built-in demo), or None for a network one."""
    kind = PROVIDERS.get(provider.type)
    if kind is None or kind.in_process is None:
        return None
    return kind.in_process(provider, req.url, req.body)
