"""A usage estimate for an answer the provider reported no usage for (a stream that broke before its
usage chunk; servers that never send one, such as llama.cpp or Ollama without `include_usage`), or only
part of it (an Anthropic stream cut after `message_start`, which counts the input but not the output).

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


def charged(so_far: Usage | None, estimate: Usage) -> Usage:
    """What a stream that ended before its final usage is charged: the provider's counts so far are a
    floor (Anthropic's `message_start` has the whole input and an output token or two), raised to the
    estimate where it counts more: the input when none was reported, the output when more text came than
    the reported output counts. `so_far` itself when the estimate adds nothing."""
    if so_far is None:
        return estimate
    output = max(so_far.output, estimate.output)
    if so_far.input > 0:
        if output == so_far.output:
            return so_far
        return Usage(so_far.input, output, so_far.cached_input, so_far.cache_creation_input, so_far.reasoning,
                     so_far.cache_creation_input_1h)
    return Usage(estimate.input, output, reasoning=so_far.reasoning)


def estimated_part(charged_usage: Usage, so_far: Usage | None) -> tuple[int, int]:
    """The input and output tokens of `charged_usage` (what `charged` made of `so_far`) that are the
    estimate's, not the provider's: `llm_gateway_estimated_tokens_total` counts them."""
    if so_far is None:
        return charged_usage.input, charged_usage.output
    return max(charged_usage.input - so_far.input, 0), max(charged_usage.output - so_far.output, 0)
