"""Provider type -> translator. The only place that knows the list of provider types."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gateway.config.types import ProviderConfig
from gateway.providers.base import ChatTranslator
from gateway.providers.chat_anthropic import AnthropicChat
from gateway.providers.chat_azure import AzureChat
from gateway.providers.chat_openai import OpenAIChat
from gateway.providers.mock import MockChat

_CHAT: dict[str, Callable[[ProviderConfig], ChatTranslator]] = {
    "openai": OpenAIChat,
    "mock": MockChat,
    "anthropic": AnthropicChat,
    "azure": AzureChat,
}


def register_chat(provider_type: str, factory: Callable[[ProviderConfig], ChatTranslator]) -> None:
    _CHAT[provider_type] = factory


def chat_translators(providers: Mapping[str, ProviderConfig]) -> dict[str, ChatTranslator]:
    """One translator per configured provider, built once at config load."""
    out: dict[str, ChatTranslator] = {}
    for name, cfg in providers.items():
        factory = _CHAT.get(cfg.type)
        if factory is None:
            raise ValueError(f'providers.{name}.type: provider type "{cfg.type}" is not available')
        out[name] = factory(cfg)
    return out
