"""Redaction and guardrails end to end (CONTRACT §5) with the official openai SDK."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import openai
import orjson
import pytest

from gateway.config import parse_config
from gateway.config.types import Config, CustomRule
from tests.chat_scripts import chunk, completion, text_stream, usage_chunk
from tests.fake_upstream import FakeUpstream, Script, json_script, sse
from tests.harness import GatewayServer, LoopThread

PATH = "/v1/chat/completions"
KEY = "sk-proj-Zq8vN3xT5bW1kR7mY2cP9dL4fH6jS0gA1eU3iO5"
ANSWER = f"Sure. Your key is {KEY} and the ticket ACME-123456 is open. Mail ops@example.com for help.\n"
MASKED = ("Sure. Your key is [REDACTED:openai_key] and the ticket [REDACTED:ticket] is open. "
          "Mail [REDACTED:email] for help.\n")


def config(url: str, *, guardrails: list[dict[str, Any]] | None = None, redaction: str = "p") -> Any:
    return parse_config({
        "auth": {"allow_unauthenticated": True},
        "providers": {"up": {"type": "openai", "base_url": f"{url}/v1"}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "x"}], "redaction": redaction,
                    "guardrails": [g["name"] for g in guardrails or []]}],
        "guardrails": guardrails or [],
        "redaction": {"profiles": {"p": {"rules": ["secrets", "pii"],
                                         "custom": [{"name": "ticket", "pattern": "ACME-[0-9]{6}"}]}}},
    }, env={})


def sdk(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=20)


def pieces(text: str, sizes: tuple[int, ...] = (1, 2, 3)) -> list[str]:
    out, i, n = [], 0, 0
    while i < len(text):
        size = sizes[n % len(sizes)]
        out.append(text[i:i + size])
        i, n = i + size, n + 1
    return out


def stream_text(gw: GatewayServer) -> tuple[list[str], BaseException | None]:
    got: list[str] = []
    try:
        for c in sdk(gw).chat.completions.create(model="m", stream=True,
                                                 messages=[{"role": "user", "content": "hello"}]):
            if c.choices and c.choices[0].delta.content:
                got.append(c.choices[0].delta.content)
    except openai.APIError as exc:
        return got, exc
    return got, None


def test_secret_split_into_tiny_deltas_is_masked_whole_and_like_the_body(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(PATH, text_stream(pieces(ANSWER)), completion(ANSWER))
    got, err = stream_text(gw)
    assert err is None
    assert "".join(got) == MASKED
    for piece in got:
        for i in range(len(KEY) - 5):
            assert KEY[i:i + 6] not in piece, "no emitted piece carries any part of the secret"
    body = sdk(gw).chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
    assert body.choices[0].message.content == MASKED
    assert gw.sample("llm_gateway_redactions_total", rule="openai_key") == 2
    assert gw.sample("llm_gateway_redactions_total", rule="ticket") == 2


def test_openai_envelope_with_padding_and_escapes_is_masked_and_keeps_its_fields(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    """OpenAI's own chunk shape: per-chunk `obfuscation` padding and a fingerprint. Plain deltas take the
    byte-level read and are spliced (core.chat_shape); deltas with quotes or line breaks take the parse.
    The client reads the same masked text either way, and every chunk keeps the upstream's fields."""
    text = ANSWER.replace("Sure.", 'Sure, "quoted".\n')
    parts = [sse(chunk({"role": "assistant", "content": ""}))]
    parts += [sse(chunk({"content": p}, system_fingerprint="fp_7", obfuscation=f"pad{n}"))
              for n, p in enumerate(pieces(text, (1, 4, 2, 7)))]
    parts += [sse(chunk({}, "stop")), sse(usage_chunk()), b"data: [DONE]\n\n"]
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(PATH, Script(parts))
    got: list[str] = []
    for c in sdk(gw).chat.completions.create(model="m", stream=True, messages=[{"role": "user", "content": "x"}]):
        if c.choices and c.choices[0].delta.content:
            got.append(c.choices[0].delta.content)
            assert c.system_fingerprint == "fp_7" and str(c.to_dict().get("obfuscation")).startswith("pad")
    assert "".join(got) == MASKED.replace("Sure.", 'Sure, "quoted".\n')
    assert all(KEY[i:i + 6] not in piece for piece in got for i in range(len(KEY) - 5))


@pytest.mark.parametrize("reads", [1, 3, 7])
def test_a_stream_that_comes_in_a_few_reads_is_masked_whole(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], reads: int) -> None:
    """Many chunks per upstream read: the relay reads the learned envelope's chunks as runs (quoted and
    multi-line deltas among them) and the secret, split across deltas and reads, never leaves."""
    text = ANSWER.replace("Sure.", 'Sure, "quoted" \\ and\nmore.')
    events = [sse(chunk({"role": "assistant", "content": ""}))]
    events += [sse(chunk({"content": p})) for p in pieces(text, (1, 3, 2, 5))]
    events += [sse(chunk({}, "stop")), sse(usage_chunk()), b"data: [DONE]\n\n"]
    size = -(-len(events) // reads)
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(PATH, Script([b"".join(events[i:i + size]) for i in range(0, len(events), size)]))
    got, err = stream_text(gw)
    assert err is None
    assert "".join(got) == MASKED.replace("Sure.", 'Sure, "quoted" \\ and\nmore.')
    assert all(KEY[i:i + 6] not in piece for piece in got for i in range(len(KEY) - 5))
    assert gw.sample("llm_gateway_redactions_total", rule="openai_key") == 1


def tokens(text: str) -> dict[str, Any]:
    """`logprobs` as a server lists them when the client asks: every token, its bytes, its alternatives."""
    return {"content": [{"token": t, "logprob": -0.1, "bytes": list(t.encode()),
                         "top_logprobs": [{"token": t, "logprob": -0.1, "bytes": list(t.encode())}]}
                        for t in (text[i:i + 4] for i in range(0, len(text), 4))], "refusal": None}


def test_logprobs_never_spell_out_a_masked_secret(upstream: FakeUpstream,
                                                  make_gateway: Callable[..., GatewayServer]) -> None:
    """A client that asks for `logprobs` gets the answer's tokens listed one by one: in a stream of
    chunks of several tokens (vLLM, batching servers) and in a body. Where the text was masked they are
    the secret in clear, so they go; the masked text is what the client reads."""
    parts = [sse(chunk({"role": "assistant", "content": ""}))]
    for p in pieces(ANSWER, (9, 14, 5)):
        obj = chunk({"content": p})
        obj["choices"][0]["logprobs"] = tokens(p)
        parts.append(sse(obj))
    parts += [sse(chunk({}, "stop")), b"data: [DONE]\n\n"]
    body = orjson.loads(completion(ANSWER).parts[0])  # type: ignore[arg-type]
    body["choices"][0]["logprobs"] = tokens(ANSWER)
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(PATH, Script(parts), json_script(body))
    listed: list[str] = []  # every token the client was shown, in order
    text = ""
    for c in sdk(gw).chat.completions.create(model="m", stream=True, logprobs=True,
                                             messages=[{"role": "user", "content": "x"}]):
        if c.choices:
            text += c.choices[0].delta.content or ""
            listed += [t.token for t in (c.choices[0].logprobs.content or [])] if c.choices[0].logprobs else []
    answer = sdk(gw).chat.completions.create(model="m", logprobs=True, messages=[{"role": "user", "content": "x"}])
    assert text == answer.choices[0].message.content == MASKED
    assert KEY[:12] not in "".join(listed) and "ACME-123456" not in "".join(listed)
    assert listed, "chunks released as they came keep theirs"
    assert answer.choices[0].logprobs is not None and answer.choices[0].logprobs.content == []
    assert [b.get("logprobs") for b in upstream.bodies(PATH)] == [True, True], "the request is passed on"


def test_reasoning_details_are_masked_like_the_reasoning(upstream: FakeUpstream,
                                                        make_gateway: Callable[..., GatewayServer]) -> None:
    """OpenRouter repeats the reasoning in `reasoning_details` entries, in a stream and in a body: the
    client reads every copy masked, as the `reasoning` field beside it."""
    thought = f"The user pasted {KEY} earlier, ticket ACME-123456.\n"
    masked = "The user pasted [REDACTED:openai_key] earlier, ticket [REDACTED:ticket].\n"
    parts = [sse(chunk({"role": "assistant", "content": ""}))]
    parts += [sse(chunk({"reasoning": p, "reasoning_details": [{"type": "reasoning.text", "text": p, "index": 0}]}))
              for p in pieces(thought, (3, 8, 5))]
    parts += [sse(chunk({"content": "Done."})), sse(chunk({}, "stop")), b"data: [DONE]\n\n"]
    body = orjson.loads(completion("Done.").parts[0])  # type: ignore[arg-type]
    body["choices"][0]["message"].update(reasoning=thought, reasoning_details=[
        {"type": "reasoning.text", "text": thought, "index": 0},
        {"type": "reasoning.summary", "summary": thought, "index": 1}])
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(PATH, Script(parts), json_script(body))
    reasoning, details, wire = "", "", ""
    for c in sdk(gw).chat.completions.create(model="m", stream=True, messages=[{"role": "user", "content": "x"}]):
        wire += orjson.dumps(c.to_dict()).decode()
        delta = c.to_dict()["choices"][0]["delta"] if c.choices else {}
        reasoning += delta.get("reasoning") or ""
        details += "".join(e.get("text") or "" for e in delta.get("reasoning_details") or [])
    answer = sdk(gw).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}]).to_dict()
    wire += orjson.dumps(answer).decode()
    assert reasoning == details == masked
    message: Any = answer["choices"][0]["message"]
    assert message["reasoning"] == masked
    assert [e.get("text") or e.get("summary") for e in message["reasoning_details"]] == [masked, masked]
    assert all(KEY[i:i + 6] not in wire for i in range(len(KEY) - 5)) and "ACME-123456" not in wire


def test_reasoning_under_both_names_is_masked_and_cached_once(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    """A server that writes the reasoning under both names (`reasoning_content` and `reasoning`): each is
    masked as a body's field is, and the answer kept in the cache has it once, masked, for the next hit."""
    aws = "AKIAIOSFODNN7EXAMPLE"  # its rule ends on a boundary: two copies back to back match nowhere
    parts = [sse(chunk({"role": "assistant", "content": ""}))]
    parts += [sse(chunk({"reasoning_content": p, "reasoning": p})) for p in ["id ", aws[:9], aws[9:], " ok"]]
    parts += [sse(chunk({"content": "Done."})), sse(chunk({}, "stop")), b"data: [DONE]\n\n"]
    gw = make_gateway(config(upstream.base_url))
    upstream.enqueue(PATH, Script(parts))
    masked = "id [REDACTED:aws_access_key_id] ok"
    for attempt in ("upstream", "cache"):
        seen: dict[str, str] = {}
        for c in sdk(gw).chat.completions.create(model="m", stream=True, extra_headers={"x-gateway-cache": "on"},
                                                 messages=[{"role": "user", "content": "x"}]):
            for field, text in (c.to_dict()["choices"][0]["delta"] if c.choices else {}).items():
                if isinstance(text, str):
                    seen[field] = seen.get(field, "") + text
        assert seen["reasoning_content"] == masked, attempt
        assert seen.get("reasoning", masked) == masked, attempt
        assert aws[:9] not in str(seen) and aws[9:] not in str(seen), attempt
    assert len(upstream.bodies(PATH)) == 1, "the second answer came from the cache"


def test_redaction_off_forwards_text_untouched(upstream: FakeUpstream,
                                               make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, redaction="off"))
    upstream.enqueue(PATH, text_stream(pieces(ANSWER)))
    assert "".join(stream_text(gw)[0]) == ANSWER


TERM = {"name": "nightingale", "type": "terms", "terms": ["project nightingale"]}
REGEX = {"name": "codename", "type": "regex", "patterns": ["NIGHT-[0-9]{3}"]}
BAD_ANSWER = "The plan is simple. Project Nightingale starts on Monday, NIGHT-042 too.\n"
GOOD_ANSWER = "The plan is simple. Nothing secret here at all today.\n"


def webhook(upstream: FakeUpstream) -> dict[str, Any]:
    return {"name": "hook", "type": "webhook", "url": f"{upstream.base_url}/guard", "timeout_s": 2}


@pytest.mark.parametrize("kind", ["terms", "regex", "webhook"])
def test_input_guardrail_refuses_before_any_upstream_call(upstream: FakeUpstream, kind: str,
                                                          make_gateway: Callable[..., GatewayServer]) -> None:
    g = {"terms": TERM, "regex": REGEX, "webhook": webhook(upstream)}[kind] | {"stage": "input"}
    gw = make_gateway(config(upstream.base_url, guardrails=[g]))
    upstream.defaults["/guard"] = json_script({"allow": False, "reason": "not allowed"})
    with pytest.raises(openai.BadRequestError) as info:
        sdk(gw).chat.completions.create(model="m", messages=[{"role": "user", "content": BAD_ANSWER}])
    assert info.value.code == "guardrail_blocked" and info.value.param == g["name"]
    assert upstream.bodies(PATH) == []
    if kind == "webhook":
        sent = upstream.bodies("/guard")[0]
        assert sent == {"stage": "input", "model": "m", "text": BAD_ANSWER}
    assert gw.sample("llm_gateway_guardrail_verdicts_total", guardrail=g["name"], stage="input",
                     verdict="block") == 1


@pytest.mark.parametrize("kind", ["terms", "regex", "webhook"])
@pytest.mark.parametrize("mode", ["stream", "hold", "audit"])
def test_output_guardrail_modes(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
                                kind: str, mode: str) -> None:
    g = {"terms": TERM, "regex": REGEX, "webhook": webhook(upstream)}[kind] | {"stage": "both", "mode": mode}
    gw = make_gateway(config(upstream.base_url, guardrails=[g]))
    upstream.defaults["/guard"] = json_script({"allow": True, "reason": ""})
    upstream.enqueue(PATH, text_stream(pieces(GOOD_ANSWER, (3, 4, 5))))
    got, err = stream_text(gw)
    assert err is None and "".join(got) == GOOD_ANSWER, "an allowed answer streams whole"

    upstream.defaults["/guard"] = json_script({"allow": False, "reason": "policy"})
    upstream.enqueue("/guard", json_script({"allow": True, "reason": ""}))  # the input check passes
    upstream.enqueue(PATH, text_stream(pieces(BAD_ANSWER, (3, 4, 5))))
    got, err = stream_text(gw)
    text = "".join(got)
    assert isinstance(err, openai.APIError) and "guardrail" in err.message
    windowed = mode == "stream" and kind != "webhook"  # a webhook judges the whole answer
    if windowed:
        term = "Project Nightingale" if kind == "terms" else "NIGHT-042"
        cut = BAD_ANSWER.index(term)
        assert BAD_ANSWER[:cut].startswith(text), "only text before the violation is released"
        assert term.split()[-1] not in text and term[:5] not in text[cut - 5:]
    elif mode == "hold" or (mode == "stream" and kind == "webhook"):
        assert text == "", "hold (and a webhook in stream mode): nothing before the verdict"
    else:
        assert text == BAD_ANSWER, "audit streams freely, then refuses at the end"
    assert gw.sample("llm_gateway_guardrail_verdicts_total", guardrail=g["name"], stage="output",
                     verdict="block") == 1


def test_failing_webhook_blocks(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    g = webhook(upstream) | {"stage": "input"}
    gw = make_gateway(config(upstream.base_url, guardrails=[g]))
    upstream.defaults["/guard"] = json_script({"oops": True}, status=500)
    with pytest.raises(openai.BadRequestError) as info:
        sdk(gw).chat.completions.create(model="m", messages=[{"role": "user", "content": "anything"}])
    assert info.value.code == "guardrail_blocked"
    upstream.defaults["/guard"] = json_script({"allow": "yes"})  # no boolean verdict: also blocks
    with pytest.raises(openai.BadRequestError):
        sdk(gw).chat.completions.create(model="m", messages=[{"role": "user", "content": "anything"}])


def test_non_stream_output_guardrail_refuses_with_an_error(upstream: FakeUpstream,
                                                           make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url, guardrails=[TERM | {"stage": "output", "mode": "stream"}]))
    upstream.enqueue(PATH, completion(BAD_ANSWER))
    with pytest.raises(openai.BadRequestError) as info:
        sdk(gw).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert info.value.code == "guardrail_blocked" and "Nightingale" not in info.value.message


def test_inputs_are_masked_before_they_leave_when_asked(upstream: FakeUpstream,
                                                        make_gateway: Callable[..., GatewayServer]) -> None:
    cfg = config(upstream.base_url)
    profile = cfg.redaction_profiles["p"]
    cfg = dataclasses.replace(cfg, redaction_profiles=MappingProxyType(
        {"p": dataclasses.replace(profile, inputs=True)}))
    gw = make_gateway(cfg)
    upstream.enqueue(PATH, completion("ok"))
    sdk(gw).chat.completions.create(model="m", messages=[
        {"role": "user", "content": f"my key is {KEY}"},
        {"role": "user", "content": [{"type": "text", "text": "write to ops@example.com"}]}])
    sent = upstream.bodies(PATH)[0]["messages"]
    assert sent[0]["content"] == "my key is [REDACTED:openai_key]"
    assert sent[1]["content"][0]["text"] == "write to [REDACTED:email]"


def with_custom_rule(cfg: Config, name: str, pattern: str) -> Config:
    profile = cfg.redaction_profiles["p"]
    custom = (*profile.custom, CustomRule(name, pattern))
    return dataclasses.replace(cfg, redaction_profiles=MappingProxyType(
        {"p": dataclasses.replace(profile, custom=custom)}))


def ask_cached(gw: GatewayServer, stream: bool) -> tuple[str, BaseException | None]:
    """One request with the cache on: the text read, and the error that ended it, if any."""
    on, hi = {"x-gateway-cache": "on"}, [{"role": "user", "content": "hi"}]
    got: list[str] = []
    try:
        if not stream:
            body = sdk(gw).chat.completions.create(model="m", messages=hi, extra_headers=on)
            return body.choices[0].message.content or "", None
        for c in sdk(gw).chat.completions.create(model="m", messages=hi, stream=True, extra_headers=on):
            if c.choices and c.choices[0].delta.content:
                got.append(c.choices[0].delta.content)
    except openai.APIError as exc:
        return "".join(got), exc
    return "".join(got), None


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("change", ["guardrail", "redaction"])
def test_an_answer_cached_before_a_reload_never_bypasses_a_rule_it_adds(
        upstream: FakeUpstream, servers: LoopThread, make_gateway: Callable[..., GatewayServer],
        change: str, stream: bool) -> None:
    """The cache key did not cover the policy: after a reload (SIGHUP) that added a guardrail or a
    redaction rule, the same request was served the answer cached before it, unjudged and unmasked by
    the new rule, for up to `cache.ttl_s`. The key now carries the model's policy fingerprint."""
    cfg = config(upstream.base_url)
    gw = make_gateway(cfg)
    upstream.defaults[PATH] = text_stream(pieces(BAD_ANSWER, (3, 4, 5))) if stream else completion(BAD_ANSWER)
    assert ask_cached(gw, stream) == (BAD_ANSWER, None)
    assert ask_cached(gw, stream) == (BAD_ANSWER, None) and len(upstream.bodies(PATH)) == 1, "cached"
    if change == "guardrail":
        new = config(upstream.base_url, guardrails=[TERM | {"stage": "output", "mode": "hold"}])
    else:
        new = with_custom_rule(cfg, "codename", "NIGHT-[0-9]{3}")

    async def reload() -> None:
        assert gw.app is not None
        await gw.app.reload(new)

    servers.run(reload())
    text, err = ask_cached(gw, stream)
    assert len(upstream.bodies(PATH)) == 2, "the answer cached under the old policy was not served"
    if change == "guardrail":
        assert isinstance(err, openai.APIError) and "guardrail nightingale" in err.message
        assert "Nightingale" not in text
    else:
        assert err is None and text == BAD_ANSWER.replace("NIGHT-042", "[REDACTED:codename]")
        assert ask_cached(gw, stream) == (text, None) and len(upstream.bodies(PATH)) == 2, "cached anew"


@pytest.mark.parametrize("kind", ["hold", "webhook"])
def test_a_held_answer_past_its_bound_fails_closed(upstream: FakeUpstream, kind: str,
                                                   make_gateway: Callable[..., GatewayServer]) -> None:
    """A held answer (`mode: hold`, a webhook in stream mode) had no bound of its own: only `total_s` and the
    upstream's rate. Past `sink.HOLD_MAX_BYTES` (32 MiB) the hold fails closed: nothing of the answer is
    sent, the stream ends with the API's error event naming the guardrail, and
    the guardrail's verdict is a block (the webhook is never asked: the answer never ended)."""
    g = TERM | {"stage": "output", "mode": "hold"} if kind == "hold" else webhook(upstream) | {"stage": "output"}
    gw = make_gateway(config(upstream.base_url, guardrails=[g], redaction="off"))
    upstream.defaults["/guard"] = json_script({"allow": True, "reason": ""})
    mib = "x" * (1 << 20)
    upstream.enqueue(PATH, text_stream([mib] * 40))  # ~40 MiB of chunks, more than the bound
    got, err = stream_text(gw)
    assert got == [], "nothing held went out"
    assert isinstance(err, openai.APIError) and err.message.startswith(
        f"refused by guardrail {g['name']}: the answer passed 32 MiB before its verdict")
    assert upstream.bodies("/guard") == []
    assert gw.sample("llm_gateway_guardrail_verdicts_total", guardrail=g["name"], stage="output",
                     verdict="block") == 1
