"""Learn-once facts (gateway.core.policy.learned): scoped to one deployment and API, expiring."""

from __future__ import annotations

from gateway.core.policy.learned import Fact, FactKey, LearnedFacts
from gateway.core.sse import looks_like_sse
from gateway.core.usage_estimate import estimate_usage, tokens_of

A_CHAT = FactKey("p/model-a", "chat", Fact.NO_STREAM)


def test_a_fact_is_scoped_to_its_deployment_and_api() -> None:
    facts = LearnedFacts()
    assert facts.learn(A_CHAT, now=0.0, ttl_s=10.0) is True
    assert facts.knows(A_CHAT, 1.0)
    assert not facts.knows(FactKey("p/model-b", "chat", Fact.NO_STREAM), 1.0)
    assert not facts.knows(FactKey("p/model-a", "responses", Fact.NO_STREAM), 1.0)
    assert not facts.knows(FactKey("p/model-a", "chat", Fact.NO_STREAM_OPTIONS), 1.0)


def test_a_fact_expires_and_is_reported_once() -> None:
    facts = LearnedFacts()
    facts.learn(A_CHAT, now=0.0, ttl_s=10.0)
    assert facts.expire(9.9) == []
    assert not facts.knows(A_CHAT, 10.0), "not in force at its expiry, even before expire() ran"
    assert facts.expire(10.0) == [A_CHAT]
    assert facts.expire(11.0) == [] and facts.in_force(11.0) == []


def test_learning_again_extends_and_is_not_news() -> None:
    facts = LearnedFacts()
    facts.learn(A_CHAT, now=0.0, ttl_s=10.0)
    assert facts.learn(A_CHAT, now=5.0, ttl_s=10.0) is False
    assert facts.expire(12.0) == [] and facts.knows(A_CHAT, 14.0)
    assert facts.learn(A_CHAT, now=20.0, ttl_s=10.0) is True, "after the expiry it is news again"


def test_an_event_stream_is_told_from_its_first_bytes() -> None:
    for head in (b"data: {}", b"event: x\ndata: 1", b": keepalive\n", b"\xef\xbb\xbfdata: 1", b"\r\n\r\ndata:",
                 b"id: 1", b"retry: 10"):
        assert looks_like_sse(head), head
    for head in (b'{"id": "x"}', b"  {", b"[1]", b"", b"<html>", b"datum"):
        assert not looks_like_sse(head), head


def test_the_usage_estimate_is_a_token_per_four_bytes_rounded_up() -> None:
    assert [tokens_of(n) for n in (0, 1, 4, 5, -3)] == [0, 1, 1, 2, 0]
    u = estimate_usage(prompt_bytes=40, output_bytes=9)
    assert (u.input, u.output, u.cached_input, u.reasoning) == (10, 3, 0, 0)
