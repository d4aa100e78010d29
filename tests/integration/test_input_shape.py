"""A request whose prompt is not of its API's shape is refused before any upstream call, in every client API,
whether or not something reads the prompt's texts (`pipeline.serve` gathers them only for input
redaction and input guardrails; the shape is checked either way)."""

from __future__ import annotations

import http.client
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer

CASES = [
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}, "not an object"]},
     "each message must be an object", "messages"),
    ("/v1/chat/completions", {"model": "m", "messages": "hi"}, "messages must be an array", "messages"),
    ("/v1/messages", {"model": "m", "max_tokens": 8, "messages": [7]}, "each message must be an object",
     "messages"),
    ("/v1/responses", {"model": "m", "input": [{"role": "user", "content": "hi"}, ["nested"]]},
     "each input item must be an object", "input"),
    ("/v1/responses", {"model": "m", "input": 7}, "input must be a string or an array", "input"),
]
GUARDED = {"guardrails": [{"name": "no-pineapple", "type": "terms", "stage": "input", "terms": ["pineapple"]}],
           "models": [{"name": "m", "guardrails": ["no-pineapple"],
                       "deployments": [{"provider": "up", "model": "up-model"}]}]}


def post(gw: GatewayServer, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        conn.request("POST", path, orjson.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, orjson.loads(resp.read())
    finally:
        conn.close()


@pytest.mark.parametrize("guarded", [False, True], ids=["nothing reads the texts", "an input guardrail"])
@pytest.mark.parametrize(("path", "body", "message", "param"), CASES)
def test_a_prompt_of_the_wrong_shape_is_a_400_before_any_upstream_call(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], guarded: bool, path: str,
        body: dict[str, Any], message: str, param: str) -> None:
    gw = make_gateway(**(GUARDED if guarded else {}))
    status, answer = post(gw, path, body)
    error = answer.get("error", answer)
    assert status == 400, answer
    assert message in str(error.get("message")), answer
    assert upstream.received == []
