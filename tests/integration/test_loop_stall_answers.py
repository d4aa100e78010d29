"""Whole answers masked and whole texts judged do not stall the event loop (CONTRACT §5.3, issue #27).

A hostile (or just verbose) upstream answers a non-stream request with a body of megabytes dense with
candidates (seconds of masking), or a client sends a prompt of megabytes that a `regex` guardrail must
judge whole, while a paced chat stream and a /healthz poller run beside it (`tests/loop_probe.py`): the
loop's own CPU time in the worst stream gap and the worst /healthz wait inside the heavy request stays
under 100 ms, and the answer is exactly what one-shot masking or checking gives. The window is gated:
the heavy request is sent once the stream flows, and ends when the SDK has its answer (or, for an
input that passes, when the upstream has the prompt).

Each case checks that its work was heavy (> 0.5 s: the masking's time; for a guardrail, its one-shot
check timed here, as sliced checks of these texts happen to be much cheaper) so that, done in one call
(as before: masking and checks ran in one call on the loop), the bound would fail: with
`pipeline.slicer.INLINE_CHARS` raised above the texts' size, every case fails, the loop stalled for
seconds in one gap.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from gateway.config import parse_config
from gateway.core.policy.guard import TextGuard
from tests import anthropic_scripts as a
from tests.chat_scripts import completion
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer, LoopThread
from tests.loop_probe import BOUND_S, Probes, paced_stream
from tests.responses_scripts import Answer, body_script

# bounds how long the event loop stalls: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
SECRET = "sk-proj-AbCdEf0123456789GhIjKlMnOpQrStUv"
# every word opens an IBAN candidate: the costliest text for `secrets` + `pii` (bench/REDACTION.md)
HOSTILE = "DE89 " * 200_000 + SECRET  # 1 MB
SSN = r"\b\d{3}-\d{2}-\d{4}\b"
NEAR_MISSES = "123-45 " * 400_000  # 2.8 MB: every word a candidate of SSN, none a match
TIMEOUTS = {"connect_s": 5, "first_token_s": 60, "idle_s": 60, "total_s": 120}


def config(url: str) -> Any:
    def model(name: str, provider: str = "up", **extra: Any) -> dict[str, Any]:
        return {"name": name, "deployments": [{"provider": provider, "model": "x"}], **extra}

    return parse_config({
        "server": {"keepalive_after_s": 60},
        "auth": {"allow_unauthenticated": True},
        "providers": {"up": {"type": "openai", "base_url": f"{url}/v1", "api_key": "sk-up", "timeouts": TIMEOUTS},
                      "claude": {"type": "anthropic", "base_url": url, "api_key": "sk-ant", "timeouts": TIMEOUTS}},
        "models": [model("m"), model("masked", redaction="p"), model("claude", "claude", redaction="p"),
                   model("in-guard", guardrails=["ssn-in"]), model("out-guard", guardrails=["ssn-out"])],
        "redaction": {"profiles": {"p": {"rules": ["secrets", "pii"]}}},
        "guardrails": [{"name": "ssn-in", "type": "regex", "patterns": [SSN], "stage": "input"},
                       {"name": "ssn-out", "type": "regex", "patterns": [SSN], "stage": "output", "mode": "hold"}],
    }, env={})


@pytest.fixture
def gw(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> GatewayServer:
    return make_gateway(config(upstream.base_url))


def openai_client(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=180)


def one_shot_cost(text: str) -> float:
    """CPU seconds of the guardrail's one-shot check of `text` (what ran in one call on the loop before)."""
    guard = TextGuard.compile("ssn", "regex", [], [SSN])
    t0 = time.thread_time()
    guard.check(text)
    return time.thread_time() - t0


def heavy(servers: LoopThread, gw: GatewayServer, what: str, request: Callable[[], float | None],
          one_shot_s: float | None = None) -> None:
    """Run `request` beside the probes; it returns when its heavy work ended (None: when it returned).
    The work must be heavy: its one-shot cost `one_shot_s`, else the time it took, over 0.5 s."""
    probes = Probes(openai_client(gw), gw.port, servers.cpu_time)
    t0 = probes.start()
    try:
        t_end = request()
        t1 = t_end if t_end is not None else time.monotonic()
    finally:
        probes.stop()
    cost = one_shot_s if one_shot_s is not None else t1 - t0
    assert cost > 0.5, f"{what}: the work was heavy enough to have stalled the loop when done in one call"
    gap, check = probes.report(what, t0, t1)
    assert gap < BOUND_S, f"{what}: the loop ran 100 ms or more without serving the stream"
    assert check < BOUND_S, f"{what}: the loop ran 100 ms or more before answering /healthz"


def test_a_chat_body_of_megabytes_of_candidates_is_masked_without_stalling_the_loop(
        servers: LoopThread, upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(CHAT, paced_stream(9000), completion(HOSTILE * 2))
    got: list[str | None] = []

    def request() -> None:
        answer = openai_client(gw).chat.completions.create(model="masked", messages=[{"role": "user", "content": "hi"}])
        got.append(answer.choices[0].message.content)

    heavy(servers, gw, "chat body, 2 MB", request)
    text = got[0] or ""
    assert SECRET not in text and text.count("[REDACTED:openai_key]") == 2, "the whole answer was masked"
    assert gw.sample("llm_gateway_redactions_total", rule="openai_key") == 2


def test_a_responses_body_of_megabytes_of_candidates_is_masked_without_stalling_the_loop(
        servers: LoopThread, upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(CHAT, paced_stream(9000))
    upstream.enqueue(RESPONSES, body_script(Answer().message([HOSTILE]).message(["ok " + SECRET])))
    got: list[str] = []

    def request() -> None:
        got.append(openai_client(gw).responses.create(model="masked", input="hi").output_text)

    heavy(servers, gw, "Responses body, 1 MB", request)
    assert SECRET not in got[0] and got[0].endswith("ok [REDACTED:openai_key]"), "every output text was masked"
    assert got[0].count("[REDACTED:openai_key]") == 2


def test_a_messages_body_of_megabytes_of_candidates_is_masked_without_stalling_the_loop(
        servers: LoopThread, upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(CHAT, paced_stream(9000))
    upstream.enqueue(a.PATH, a.message_body([{"type": "text", "text": HOSTILE},
                                             {"type": "thinking", "thinking": SECRET, "signature": "sig"}]))
    got: list[Any] = []

    def request() -> None:
        c = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="x", max_retries=0, timeout=180)
        got.append(c.messages.create(model="claude", max_tokens=64, messages=[{"role": "user", "content": "hi"}]))

    heavy(servers, gw, "Messages body, 1 MB", request)
    text, thinking = got[0].content
    assert SECRET not in text.text and text.text.endswith("[REDACTED:openai_key]")
    assert thinking.thinking == "[REDACTED:openai_key]" and thinking.signature == "sig"


def test_a_regex_input_guardrail_judges_megabytes_without_stalling_the_loop(
        servers: LoopThread, upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(CHAT, paced_stream(9000), completion("fine"))
    client = openai_client(gw)

    def passes() -> float:  # below the fake upstream's 1 MiB limit on a request body
        prompt = NEAR_MISSES[:1_000_000]
        answer = client.chat.completions.create(model="in-guard", messages=[{"role": "user", "content": prompt}])
        assert answer.choices[0].message.content == "fine"
        return upstream.received[-1].at  # the verdict came before the upstream call

    heavy(servers, gw, "regex input guardrail, 1 MB, passes", passes, one_shot_cost(NEAR_MISSES[:1_000_000]))

    def refuses() -> None:  # the violation is at the very end: the whole text is judged
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="in-guard",
                                           messages=[{"role": "user", "content": NEAR_MISSES + "123-45-6789"}])
        assert info.value.code == "guardrail_blocked"

    upstream.enqueue(CHAT, paced_stream(9000))
    heavy(servers, gw, "regex input guardrail, 2.8 MB, refuses", refuses, one_shot_cost(NEAR_MISSES))
    assert len(upstream.bodies(CHAT)) == 3, "a refused prompt never left"


def test_a_hold_guardrail_judges_a_body_of_megabytes_without_stalling_the_loop(
        servers: LoopThread, upstream: FakeUpstream, gw: GatewayServer) -> None:
    upstream.enqueue(CHAT, paced_stream(9000), completion(NEAR_MISSES + "123-45-6789"))

    def request() -> None:
        with pytest.raises(openai.BadRequestError) as info:
            openai_client(gw).chat.completions.create(model="out-guard", messages=[{"role": "user", "content": "hi"}])
        assert info.value.code == "guardrail_blocked" and info.value.param == "ssn-out"

    heavy(servers, gw, "regex hold guardrail on a body, 2.8 MB", request, one_shot_cost(NEAR_MISSES))
