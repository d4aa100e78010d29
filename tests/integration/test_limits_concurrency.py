"""A hostile tenant against its own limits, through the gateway on 127.0.0.1 with the official SDK and the
scripted upstream, on memory state and on a real redis-server (docs/keys-teams-spend.md, Budgets;
docs/reference.md, `auth.keys[].tpm`):

- many requests at once cannot pass a budget by more than the last one admitted below it: each admitted
  request holds its estimated cost until its real cost is counted:
  test_requests_admitted_together_hold_their_estimated_cost_against_the_budget
- a stream that ends minutes after its admission is charged to `tpm` in the minute it ends, not in a
  bucket that has left the window: test_a_long_streams_real_usage_counts_in_the_minute_it_ends
- the whole prompt (system, tools, instructions) is reserved against `tpm`, not only the messages:
  test_the_reservation_counts_the_whole_prompt

Synchronisation is by the upstream's `Gate` (an answer held until the test opens it) and by counting what
the upstream and the clients have seen, never by a sleep.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import openai
import orjson
import pytest

from gateway.config import parse_config
from gateway.config.types import Config
from tests import anthropic_scripts as a
from tests.chat_scripts import USAGE, chunk, completion, usage_chunk
from tests.fake_upstream import FakeUpstream, Gate, Script, sse
from tests.harness import GatewayServer
from tests.redis_server import RedisServer

PATH = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
PRICE = {"input": 1000, "output": 1000}  # USAGE's 18 tokens cost $0.018
COST = 18 * 1000 / 1_000_000
T0 = 1_700_000_040.0  # the start of a minute


@pytest.fixture(params=["memory", "redis"])
def state(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    if request.param == "memory":
        yield {"backend": "memory"}
        return
    with RedisServer() as redis:
        # a wide deadline: a busy test machine must not turn shared counting local (docs/scale-out.md)
        yield {"backend": "redis", "redis_url": redis.url, "timeout_ms": 1000}


def config(url: str, state: dict[str, Any], key: dict[str, Any]) -> Config:
    return parse_config({
        "auth": {"keys": [{"name": "tenant", "key": "key-t", **key}]},
        "state": state,
        "providers": {"up": {"type": "openai", "base_url": f"{url}/v1",
                             "timeouts": {"connect_s": 2, "first_token_s": 20, "idle_s": 20, "total_s": 60}},
                      "ant": {"type": "anthropic", "base_url": f"{url}/ant", "api_key": "sk-ant"}},
        "models": [{"name": "m", "retry": {"max_attempts": 1},
                    "deployments": [{"provider": "up", "model": "x", "price": PRICE}]},
                   {"name": "claude", "deployments": [{"provider": "ant", "model": "claude-x"}]}],
    }, env={})


def sdk(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="key-t", max_retries=0, timeout=30)


def outcome(gw: GatewayServer, **kw: Any) -> str:
    try:
        sdk(gw).chat.completions.create(model="m", messages=HI, **kw)  # type: ignore[arg-type]
    except openai.APIStatusError as exc:
        return str(exc.code)
    return "ok"


def until(cond: Callable[[], bool], what: str, within_s: float = 20.0) -> None:
    """Wait for what other threads make true (requests reaching the upstream, refusals read)."""
    deadline = time.monotonic() + within_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)  # polling counts the scripted upstream and the clients keep: no event to wait on


def test_requests_admitted_together_hold_their_estimated_cost_against_the_budget(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], state: dict[str, Any]) -> None:
    """Twelve requests at once with 2.5 requests' budget: before, every one passed the check before any was
    charged (12 admitted, $0.216 spent of $0.045); now each admitted one holds its estimate (here above its
    real cost), so the budget is passed by at most the last request admitted below it. Those refused for
    what the others hold are told to come back in a second (the budget is not used up: they might fit
    once the others are charged), not that the budget is spent until midnight."""
    budget = 2.5 * COST
    gw = make_gateway(config(upstream.base_url, state, {"budget_usd": budget}))
    gate = Gate(timeout_s=30)
    answer = completion("ok")
    upstream.defaults[PATH] = Script([gate, *answer.parts], headers=answer.headers)
    n = 12
    refused: list[tuple[str, str | None, str | None]] = []
    lock = threading.Lock()

    def one(_: int) -> str:
        try:  # an estimate of at least 20 tokens: above the 18 it costs
            sdk(gw).chat.completions.create(model="m", messages=HI, max_tokens=20)  # type: ignore[arg-type]
        except openai.APIStatusError as exc:
            with lock:
                refused.append((str(exc.code), exc.response.headers.get("retry-after"),
                                exc.response.headers.get("x-should-retry")))
            return str(exc.code)
        return "ok"

    with ThreadPoolExecutor(n) as pool:
        results = pool.map(one, range(n))
        until(lambda: len(upstream.received) + len(refused) == n, "every request admitted or refused")
        admitted = len(upstream.received)
        gate.opened.set()
        got = list(results)
    assert got.count("ok") == admitted and set(refused) == {("rate_limit_exceeded", "1", None)}
    assert admitted <= 3, f"{admitted} admitted at once against a budget of 2.5 requests"
    upstream.defaults[PATH] = answer
    later = [outcome(gw, max_tokens=20) for _ in range(3)]  # one at a time: each charged before the next
    assert "budget_exceeded" in later
    spent = (admitted + later.index("budget_exceeded")) * COST
    assert budget <= spent < budget + COST, "passed by more than the last request admitted below it"


def long_stream(gate: Gate, tokens: int) -> Script:
    """A stream held at `gate` after its first token, then ending with a usage of `tokens` output tokens."""
    usage = {**USAGE, "completion_tokens": tokens, "total_tokens": USAGE["prompt_tokens"] + tokens}
    return Script([sse(chunk({"role": "assistant", "content": "a"})), gate, sse(chunk({}, "stop")),
                   sse(usage_chunk(usage)), b"data: [DONE]\n\n"])


def test_a_long_streams_real_usage_counts_in_the_minute_it_ends(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], state: dict[str, Any]) -> None:
    """Admitted at T0 with a small reservation, ended at T0 + 150 s having used 5,000 tokens against a tpm of
    1,000: the key is over its tpm then. Before, the real usage went to the reservation's minute, out of
    the window by then (in Redis: expired), and the key went on as if the stream had cost nothing."""
    gw = make_gateway(config(upstream.base_url, state, {"tpm": 1000}))
    assert gw.app is not None
    clock = {"now": T0}
    gw.app.runtime.clock = lambda: clock["now"]
    gate = Gate(timeout_s=30)
    upstream.enqueue(PATH, long_stream(gate, 5000))
    stream = sdk(gw).chat.completions.create(model="m", messages=HI, stream=True, max_tokens=10)
    first = next(iter(stream))
    assert first.choices[0].delta.content == "a"
    clock["now"] = T0 + 150  # two and a half minutes later
    gate.opened.set()
    list(stream)
    upstream.defaults[PATH] = completion("ok")
    assert outcome(gw, max_tokens=10) == "rate_limit_exceeded"


def test_the_reservation_counts_the_whole_prompt(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
                                                 state: dict[str, Any]) -> None:
    """Tools of ~2,000 tokens beside a one-word message (as an agent's first turn sends them; a Messages
    request's `system`, a Responses request's `instructions` alike): before, only the messages were
    estimated and the reservation was 18 tokens. And an answer of `n` choices is reserved `n` times."""
    gw = make_gateway(config(upstream.base_url, state, {"tpm": 100_000}))
    upstream.defaults[PATH] = completion("ok")
    tools = [{"type": "function", "function": {"name": "f", "description": "d " * 4000,
                                               "parameters": {"type": "object"}}}]
    body = orjson.dumps({"model": "m", "max_tokens": 10, "messages": HI, "tools": tools})
    assert len(body) > 8000
    raw = sdk(gw).chat.completions.with_raw_response.create(model="m", max_tokens=10, messages=HI,
                                                              tools=tools)  # type: ignore[arg-type]
    reserved = 100_000 - int(raw.headers["x-ratelimit-remaining-tokens"])
    assert reserved >= 2000, reserved
    # eight choices of up to 100 tokens each: 800 tokens of answer (before, 100)
    upstream.defaults[PATH] = completion("ok", n=8)
    raw = sdk(gw).chat.completions.with_raw_response.create(model="m", max_tokens=100, messages=HI, n=8)
    assert 100_000 - 18 - int(raw.headers["x-ratelimit-remaining-tokens"]) >= 800  # the first settled at 18


@pytest.mark.parametrize(("limits", "kw"), [({"rpm": 2}, {}), ({"tpm": 200}, {"max_tokens": 60})])
def test_retry_after_is_the_whole_seconds_until_the_window_admits_the_request(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], state: dict[str, Any],
        limits: dict[str, int], kw: dict[str, Any]) -> None:
    """RFC 9110 §10.2.3: a non-negative integer of seconds, here at least 1. Coming back after it is
    admitted; it is never more than a second late (rounded up), so two seconds before it is refused
    again (no other traffic meanwhile)."""
    gw = make_gateway(config(upstream.base_url, state, limits))
    assert gw.app is not None
    clock = {"now": T0 + 10}
    gw.app.runtime.clock = lambda: clock["now"]
    upstream.defaults[PATH] = completion("ok", usage={"prompt_tokens": 40, "completion_tokens": 40})
    refused: openai.RateLimitError | None = None
    for _ in range(5):
        try:
            sdk(gw).chat.completions.create(model="m", messages=HI, **kw)  # type: ignore[arg-type]
        except openai.RateLimitError as exc:
            refused = exc
            break
    assert refused is not None and refused.code == "rate_limit_exceeded"
    retry_after = refused.response.headers["retry-after"]
    assert retry_after.isdigit() and int(retry_after) >= 1, retry_after
    clock["now"] = T0 + 10 + int(retry_after) - 2
    assert outcome(gw, **kw) == "rate_limit_exceeded"
    clock["now"] = T0 + 10 + int(retry_after)
    assert outcome(gw, **kw) == "ok"


def test_tpm_counts_the_providers_whole_usage_cached_input_included(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], state: dict[str, Any]) -> None:
    """Anthropic reports cache reads and writes beside `input_tokens`: `tpm` counts them all, as the
    provider's usage is normalised (`input` includes cached input: docs/reference.md, tpm)."""
    gw = make_gateway(config(upstream.base_url, state, {"tpm": 100_000}))
    assert gw.app is not None
    gw.app.runtime.clock = lambda: T0 + 1  # both requests in one minute
    usage = {"input_tokens": 20, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 500,
             "output_tokens": 12}
    upstream.enqueue("/ant/v1/messages", a.message_body([{"type": "text", "text": "ok"}], usage=usage),
                     a.message_body([{"type": "text", "text": "ok"}], usage=usage))
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="key-t", max_retries=0)
    first = client.messages.with_raw_response.create(model="claude", max_tokens=10, messages=HI)  # type: ignore[arg-type]
    reserved = 100_000 - int(first.headers["x-ratelimit-remaining-tokens"])
    second = client.messages.with_raw_response.create(model="claude", max_tokens=10, messages=HI)  # type: ignore[arg-type]
    assert 100_000 - int(second.headers["x-ratelimit-remaining-tokens"]) == 1532 + reserved


def test_streams_at_once_are_admitted_only_as_far_as_their_reservations_fit_the_tpm(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], state: dict[str, Any]) -> None:
    """Twenty streams at once, all held open after their first token: each reserved its estimate when
    admitted (one step: the window's check and count), so those admitted reserve at most the tpm whatever
    they then use; the rest are refused before reaching the upstream. When they end having used 500
    tokens each, the key is over its tpm."""
    gw = make_gateway(config(upstream.base_url, state, {"tpm": 1000}))
    assert gw.app is not None
    gw.app.runtime.clock = lambda: T0 + 1
    gate = Gate(timeout_s=30)
    upstream.defaults[PATH] = long_stream(gate, 500)
    n, lock = 20, threading.Lock()
    refused: list[str] = []
    reserved: list[int] = []

    def one(_: int) -> str:
        try:
            with sdk(gw).chat.completions.with_streaming_response.create(
                    model="m", messages=HI, stream=True, max_tokens=100) as raw:
                with lock:
                    reserved.append(1000 - int(raw.headers["x-ratelimit-remaining-tokens"]))
                return "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
        except openai.APIStatusError as exc:
            with lock:
                refused.append(str(exc.code))
            return str(exc.code)

    with ThreadPoolExecutor(n) as pool:
        results = pool.map(one, range(n))
        until(lambda: len(upstream.received) + len(refused) == n, "every stream admitted or refused")
        admitted = len(upstream.received)
        gate.opened.set()
        got = list(results)
    assert got.count("a") == admitted and set(refused) == {"rate_limit_exceeded"}
    assert max(reserved) <= 1000 and admitted * 100 < 1000, (admitted, reserved)
    assert outcome(gw, max_tokens=100) == "rate_limit_exceeded"  # they used 511 tokens each
