"""The Responses API to Azure OpenAI (`{base_url}/openai/responses?api-version=`): passed through, as to OpenAI."""

from __future__ import annotations

from urllib.parse import quote

from gateway.providers.chat_azure import AzureChat
from gateway.providers.responses_openai import ResponsesRequests


class AzureResponses(AzureChat, ResponsesRequests):
    """Provider type `azure`: Azure's `api-key` header; the deployment goes in `model`, not the path."""

    def _url(self, path: str, model: str) -> str:
        return f"{self.provider.base_url}/openai{path}?api-version={quote(self.provider.api_version or '', safe='')}"
