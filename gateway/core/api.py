"""A client API as a value: what the shared pipeline, the metrics and the tracer need to know of one
(issue #29). The values are `apis/catalog.py`'s; nothing below apis/ spells an API's name."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClientApi:
    name: str  # the `api` metric label and log field, the key of its learned facts and cache entries
    path: str  # its route (POST)
    streams: tuple[str, ...]  # the `stream` label values its requests take ("true", "false")
    operation: str  # the GenAI `gen_ai.operation.name` of its spans
    schema: str  # the wire schema it speaks: its row of the providers' support matrix (`registry.CELLS`)
    x_api_key: bool = False  # the gateway key may come in `x-api-key` (Anthropic's clients send it there)
    anthropic_errors: bool = False  # its errors are in Anthropic's shape (`{"type": "error", ...}`)
    ttft_series: bool = True  # its TTFT series exist at zero from the start (not for token counting)
    title: str = ""  # its name in prose ("the Messages API")

    @property
    def streamed(self) -> bool:
        return "true" in self.streams
