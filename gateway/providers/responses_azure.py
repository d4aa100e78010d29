"""The Responses API to Azure OpenAI (`{base_url}/openai/responses?api-version=`): passed through, as to OpenAI."""

from __future__ import annotations

from urllib.parse import quote

from gateway.providers.chat_azure import AzureChat
from gateway.providers.convert.responses_pass_through import ResponsesPassThrough
from gateway.providers.settings import ProviderConfig


class _AzureRoot(AzureChat):
    """Azure's `api-key` header; the Responses API takes the deployment in `model`, not in the path."""

    def url(self, path: str, model: str) -> str:
        return f"{self.provider.base_url}/openai{path}?api-version={quote(self.provider.api_version or '', safe='')}"


class AzureResponses(ResponsesPassThrough):
    """Provider type `azure`."""

    def __init__(self, provider: ProviderConfig) -> None:
        super().__init__(_AzureRoot(provider))
