"""The client APIs the gateway serves, as values (`core.api.ClientApi`): the one place their names,
routes, key headers and error shapes are spelled. The pipeline, the metrics and the tracer take these."""

from __future__ import annotations

from gateway.core.api import ClientApi

BOTH = ("true", "false")
# GenAI's operations: the Responses and Messages APIs (and token counting) are chat operations
CHAT = ClientApi("chat", "/v1/chat/completions", BOTH, "chat", "chat", title="Chat Completions")
RESPONSES = ClientApi("responses", "/v1/responses", BOTH, "chat", "responses", title="Responses")
EMBEDDINGS = ClientApi("embeddings", "/v1/embeddings", ("false",), "embeddings", "chat")  # the chat cell embeds
MESSAGES = ClientApi("messages", "/v1/messages", BOTH, "chat", "messages", x_api_key=True, anthropic_errors=True,
                     title="Messages")
COUNT_TOKENS = ClientApi("count_tokens", "/v1/messages/count_tokens", ("false",), "chat", "messages",
                         x_api_key=True, anthropic_errors=True, ttft_series=False)  # counting has no first token
CLIENT_APIS = (CHAT, RESPONSES, EMBEDDINGS, MESSAGES, COUNT_TOKENS)
