"""Redaction of a real model's stream, and /metrics after the run compared with what the clients got.

This module runs after test_clients.py; its last test reads the whole session's ledger."""

from __future__ import annotations

import re
import time

from tests.e2e import clients
from tests.e2e.conftest import (
    GATEWAY_KEY,
    MODEL,
    PROVIDER,
    REDACTED_MODEL,
    WORD,
    WORD_PATTERN,
    Ledger,
    Stack,
    chat_request,
    sample,
)
from tests.e2e.processes import LLAMA_MODEL_ALIAS

PROMPT = f"Repeat after me: {WORD}, {WORD}, {WORD}."
MASK = "[REDACTED:word]"


def test_custom_rule_masks_the_word_in_the_real_stream(stack: Stack, ledger: Ledger) -> None:
    body = chat_request(PROMPT, stream=True, max_tokens=32)
    direct = clients.python_stream(clients.sdk(stack.llama_url, "unused"), LLAMA_MODEL_ALIAS, body)
    hits = len(re.findall(WORD_PATTERN, direct.text))
    assert hits, f"the model must say the word for this test to mean anything: {direct.text!r}"
    before = sample(stack.scrape(), "llm_gateway_redactions_total", rule="word")

    gw = clients.sdk(stack.gateway_url, GATEWAY_KEY)
    plain = clients.python_stream(gw, MODEL, body)
    ledger.record(MODEL, True, plain.usage)
    masked = clients.python_stream(gw, REDACTED_MODEL, body)
    ledger.record(REDACTED_MODEL, True, masked.usage)

    assert plain.text == direct.text, "the model without a profile is not masked"
    assert masked.deltas > 1
    assert not re.search(WORD_PATTERN, masked.text)
    assert masked.text == re.sub(WORD_PATTERN, MASK, direct.text)
    assert sample(stack.scrape(), "llm_gateway_redactions_total", rule="word") - before == hits


def test_custom_rule_masks_the_word_in_a_non_streamed_answer(stack: Stack, ledger: Ledger) -> None:
    body = chat_request(PROMPT, max_tokens=32)
    direct = clients.python_complete(clients.sdk(stack.llama_url, "unused"), LLAMA_MODEL_ALIAS, body)
    assert re.search(WORD_PATTERN, direct.text), direct.text
    masked = clients.python_complete(clients.sdk(stack.gateway_url, GATEWAY_KEY), REDACTED_MODEL, body)
    ledger.record(REDACTED_MODEL, False, masked.usage)
    assert masked.text == re.sub(WORD_PATTERN, MASK, direct.text)


Scrape = dict[tuple[str, frozenset[tuple[str, str]]], float]


def expected_metrics(ledger: Ledger, model: str) -> dict[str, float]:
    served = [s for s in ledger.served if s.model == model]
    with_usage = [s.usage for s in served if s.usage is not None]
    return {
        "ttft_observations": sum(s.stream for s in served),
        "streams_ok": sum(s.stream for s in served),
        "non_streams_ok": sum(not s.stream for s in served),
        "usage_missing": sum(s.usage is None for s in served),
        "input_tokens": sum(u[0] for u in with_usage),
        "output_tokens": sum(u[1] for u in with_usage),
    }


def scraped_metrics(scraped: Scrape, model: str) -> dict[str, float]:
    def requests(stream: str) -> float:
        return sample(scraped, "llm_gateway_requests_total", api="chat", model=model, stream=stream, outcome="ok")

    return {
        "ttft_observations": sample(scraped, "llm_gateway_time_to_first_token_seconds_count",
                                    api="chat", model=model, provider=PROVIDER),
        "streams_ok": requests("true"),
        "non_streams_ok": requests("false"),
        "usage_missing": sample(scraped, "llm_gateway_usage_missing_total", model=model, provider=PROVIDER),
        "input_tokens": sample(scraped, "llm_gateway_tokens_total", model=model, provider=PROVIDER, type="input"),
        "output_tokens": sample(scraped, "llm_gateway_tokens_total", model=model, provider=PROVIDER, type="output"),
    }


def test_metrics_after_the_run_match_what_the_clients_got(stack: Stack, ledger: Ledger) -> None:
    """TTFT observations equal the streamed requests; usage is counted as the server reported it: tokens
    where it sent usage, `usage_missing` where it sent none (its streams), never invented numbers."""
    gw = clients.sdk(stack.gateway_url, GATEWAY_KEY)  # one of each here, so the test also stands alone
    ledger.record(MODEL, True, clients.python_stream(gw, MODEL, chat_request("Say hello.", 16, True)).usage)
    ledger.record(MODEL, False, clients.python_complete(gw, MODEL, chat_request("Say hello.", 16)).usage)

    want = {model: expected_metrics(ledger, model) for model in (MODEL, REDACTED_MODEL)}
    # Usage of a stream is recorded as it closes, which may be just after the client read [DONE]:
    # wait (bounded) for the counters to settle on the expected values, then compare for real.
    deadline = time.monotonic() + 5
    while True:
        scraped = stack.scrape()
        got = {model: scraped_metrics(scraped, model) for model in want}
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # bounded polling: a counter offers no event to wait on
    assert got == want
    assert want[MODEL]["non_streams_ok"] >= 1 and want[MODEL]["input_tokens"] > 0
    # The cost counter stays at zero: no price is configured, and nothing is guessed.
    assert sample(scraped, "llm_gateway_cost_usd_total", model=MODEL, provider=PROVIDER) == 0
