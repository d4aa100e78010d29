"""Input redaction of a worst-case prompt does not stall the event loop (CONTRACT §5.3, issue #27 item 2).

While one request's prompt (1 MB dense with candidates of the costliest rule, seconds of CPU) is masked,
a concurrent stream keeps flowing and /healthz keeps answering: every inter-chunk gap of the stream and
every /healthz answer inside the masking stays under 100 ms of the event loop's time. The measurement
window is gated: the big request is sent once the stream is flowing (an event set by its reader), and
the masking is over when the upstream receives the masked prompt (its arrival time, recorded by the fake
upstream).

The bound is on what the loop's thread ran (its CPU time, `LoopThread.cpu_time`) between two chunks and
during one /healthz: a stall is the loop running something else that long (before the fix: ~8 s in one
gap). Wall-clock gaps also hold the time the OS gave other processes, which on a shared test machine
(load 7 on 2 cores) reaches hundreds of ms whatever the gateway does; they are printed, not bounded
(`tests/loop_probe.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from gateway.config import parse_config
from tests.chat_scripts import completion
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer, LoopThread
from tests.loop_probe import BOUND_S, Probes, paced_stream

# bounds the event loop's steps: run with no other test beside it (scripts/test-phases.sh)
pytestmark = pytest.mark.alone

PATH = "/v1/chat/completions"
SECRET = "sk-proj-AbCdEf0123456789GhIjKlMnOpQrStUv"
# every word opens an IBAN candidate: the costliest text for `secrets` + `pii` (bench/REDACTION.md)
HOSTILE = "DE89 " * 200_000 + SECRET


def config(url: str) -> Any:
    return parse_config({
        "server": {"keepalive_after_s": 60},
        "auth": {"allow_unauthenticated": True},
        "providers": {"up": {"type": "openai", "base_url": f"{url}/v1", "api_key": "sk-up",
                             "timeouts": {"connect_s": 5, "first_token_s": 60, "idle_s": 60, "total_s": 120}}},
        "models": [{"name": "m", "deployments": [{"provider": "up", "model": "up-model"}], "redaction": "inputs"}],
        "redaction": {"profiles": {"inputs": {"rules": ["secrets", "pii"], "inputs": True}}},
    }, env={})


def test_a_worst_case_input_redaction_does_not_stall_other_streams_or_healthz(
        servers: LoopThread, upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer]) -> None:
    gw = make_gateway(config(upstream.base_url))
    client = openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0, timeout=120)
    upstream.enqueue(PATH, paced_stream(6000), completion("masked"))
    probes = Probes(client, gw.port, servers.cpu_time)
    t_sent = probes.start()
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": HOSTILE}])
    probes.stop()

    assert answer.choices[0].message.content == "masked"
    got = upstream.received[-1]
    sent = got.body["messages"][0]["content"]
    assert SECRET not in sent and sent.endswith("[REDACTED:openai_key]"), "the prompt was masked, all of it"
    t_masked = got.at  # the masked prompt reached the upstream: the masking is over
    assert t_masked - t_sent > 0.5, "the masking was heavy enough to have stalled the loop before the fix"

    gap, check = probes.report("masking", t_sent, t_masked)
    assert gap < BOUND_S, "the loop ran 100 ms or more without serving the stream"
    assert check < BOUND_S, "the loop ran 100 ms or more before answering /healthz"
