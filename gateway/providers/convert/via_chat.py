"""What every cell built on a provider's chat cell shares (`MessagesViaChat`, `ResponsesViaChat`): the
chat cell's framing, its `stream_options` and its error classification; the cell translates the rest."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.core.events import Failure
from gateway.providers.base import Framing, Translator


class ViaChat:
    def __init__(self, chat: Translator) -> None:
        self.chat = chat

    @property
    def framing(self) -> Framing:
        return self.chat.framing

    @property
    def sends_stream_options(self) -> bool:
        return self.chat.sends_stream_options

    def classify_http_error(self, status: int, headers: Mapping[str, str], body: bytes) -> Failure:
        return self.chat.classify_http_error(status, headers, body)
