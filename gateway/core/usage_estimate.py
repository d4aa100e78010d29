"""A usage estimate for an answer the provider reported no usage for (a stream that broke before its
usage chunk; servers that never send one, such as llama.cpp or Ollama without `include_usage`).

Rate limits (`tpm`) and budgets must still be charged, or such traffic would be free and unlimited; the
`llm_gateway_tokens_total` metric and cost dashboards keep provider-reported counts only, and the log
line says `estimated: true`.

The method: one token per 4 bytes of UTF-8, rounded up, for the prompt (its JSON) and for the answer
(every text kind, tool names and arguments). Four bytes is about one token of English for the GPT and
Claude tokenizers; CJK text is about one token per character (3 bytes), so this counts it a little low,
and code a little high. It is an estimate, meant to be within tens of percent, never a bill.
"""

from __future__ import annotations

from gateway.core.events import Usage

BYTES_PER_TOKEN = 4


def tokens_of(size_bytes: int) -> int:
    return -(-max(size_bytes, 0) // BYTES_PER_TOKEN)


def estimate_usage(prompt_bytes: int, output_bytes: int) -> Usage:
    return Usage(input=tokens_of(prompt_bytes), output=tokens_of(output_bytes))


def reported(usage: Usage | None) -> Usage | None:
    """The provider's usage, or None when it reported nothing. Counts of not one input or output token
    are a translation's placeholder, never a count (every prompt has tokens): the `message_start` a
    Messages answer must open with before anything is known, the `message_delta` that ends the answer of
    a chat upstream that sent no usage, a Converse stream's start."""
    return usage if usage is not None and (usage.input > 0 or usage.output > 0) else None

