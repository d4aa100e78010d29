"""`previous_response_id` is bound to its creator (issue #55, finding 4; docs/responses-bridge.md,
ownership): a response id the gateway relayed from an OpenAI Responses upstream, streamed or not, works
for the key that created it and for another key of the same team; for any other caller, and for an id
with no record, it is a 404 in the Responses error shape and the upstream is never asked. On the
embedded memory state and on a real redis-server (shared by two replicas, a hash-tagged key with the
configured TTL); a bridged backend keeps its 400.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import redis
from structlog.testing import capture_logs

from gateway.config import parse_config
from gateway.state.redis import owner_key
from tests.control_plane import ADMIN_KEY, admin_call
from tests.fake_upstream import FakeUpstream
from tests.harness import GatewayServer
from tests.redis_server import RedisServer
from tests.responses_scripts import Answer, body_script, stream_script

ALICE, BOB = "gw-key-alice-0001", "gw-key-bob-00001"
RESP = "/oai/v1/responses"
CLAUDE = "/ant/v1/messages"
TTL_S = 3600
TIMEOUTS = {"connect_s": 2, "first_token_s": 10, "idle_s": 10, "total_s": 30}


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture(params=["memory", "redis"])
def state(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "memory":
        return {"backend": "memory", "response_owner_ttl_s": TTL_S}
    server: RedisServer = request.getfixturevalue("redis_server")
    redis.Redis(port=server.port).flushall()
    return {"backend": "redis", "redis_url": server.url, "response_owner_ttl_s": TTL_S, "timeout_ms": 1000}


def config(url: str, state: dict[str, Any], store_url: str) -> Any:
    return parse_config({
        "auth": {"keys": [{"name": "alice", "key": ALICE}, {"name": "bob", "key": BOB}]},
        "state": state,
        "providers": {
            "oai": {"type": "openai", "base_url": f"{url}/oai/v1", "api_key": "sk-oai-SECRET", "timeouts": TIMEOUTS},
            "claude": {"type": "anthropic", "base_url": f"{url}/ant", "api_key": "sk-ant-SECRET",
                       "timeouts": TIMEOUTS},
        },
        "models": [{"name": "m", "deployments": [{"provider": "oai", "model": "up"}]},
                   {"name": "bridged", "deployments": [{"provider": "claude", "model": "c"}]}],
        "admin": {"keys": [{"name": "platform", "key": ADMIN_KEY}]},
        "store": {"url": store_url, "poll_s": 0.2},
    }, env={})


@pytest.fixture
def make(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], state: dict[str, Any],
         tmp_path: Path) -> Callable[[], GatewayServer]:
    return lambda: make_gateway(config(upstream.base_url, state, f"sqlite:///{tmp_path}/gw.db"))


def client(gw: GatewayServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0, timeout=20)


def create(upstream: FakeUpstream, gw: GatewayServer, key: str, rid: str, *, stream: bool) -> str:
    """A response the upstream names `rid`, asked for by `key`: its id as the client read it."""
    answer = Answer(rid).message(["Hello."])
    if stream:
        upstream.enqueue(RESP, stream_script(answer.stream_events()))
        with client(gw, key).responses.stream(model="m", input="hi") as s:
            return s.get_final_response().id
    upstream.enqueue(RESP, body_script(answer))
    return client(gw, key).responses.create(model="m", input="hi").id


def follow_up(upstream: FakeUpstream, gw: GatewayServer, key: str, rid: str) -> str:
    upstream.enqueue(RESP, body_script(Answer(rid + "-next").message(["Again."])))
    return client(gw, key).responses.create(model="m", input="and then?", previous_response_id=rid).output_text


def refused(gw: GatewayServer, key: str, rid: str) -> dict[str, Any]:
    with pytest.raises(openai.NotFoundError) as info:
        client(gw, key).responses.create(model="m", input="and then?", previous_response_id=rid)
    body: Any = info.value.body
    return dict(body)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_a_response_id_works_for_its_creator_only(upstream: FakeUpstream, make: Callable[[], GatewayServer],
                                                 stream: bool) -> None:
    gw = make()
    rid = create(upstream, gw, ALICE, "resp_alice_1", stream=stream)
    assert rid == "resp_alice_1"
    assert follow_up(upstream, gw, ALICE, rid) == "Again."
    assert upstream.bodies(RESP)[-1]["previous_response_id"] == rid
    asked = len(upstream.bodies(RESP))
    with capture_logs() as logs:
        err = refused(gw, BOB, rid)
        unknown = refused(gw, ALICE, "resp_never_relayed")
    assert err == {"message": "Previous response with id 'resp_alice_1' not found.",
                   "type": "invalid_request_error", "param": "previous_response_id",
                   "code": "previous_response_not_found"}
    assert unknown["code"] == "previous_response_not_found"
    assert len(upstream.bodies(RESP)) == asked, "the upstream was never asked"
    assert [e["reason"] for e in logs if e["event"] == "request"] == [
        "response_not_owned", "previous_response_not_found"]


def test_keys_of_one_team_share_their_responses(upstream: FakeUpstream, make: Callable[[], GatewayServer]) -> None:
    gw = make()
    assert admin_call(gw.port, "POST", "teams", {"name": "ml"})[0] == 201
    k1, k2, solo = (admin_call(gw.port, "POST", "keys", body)[1]["key"]
                    for body in ({"name": "k1", "team": "ml"}, {"name": "k2", "team": "ml"}, {"name": "solo"}))
    rid = create(upstream, gw, k1, "resp_team_1", stream=True)
    assert follow_up(upstream, gw, k2, rid) == "Again.", "another key of the same team"
    asked = len(upstream.bodies(RESP))
    for outsider in (solo, ALICE):
        assert refused(gw, outsider, rid)["code"] == "previous_response_not_found"
    mine = create(upstream, gw, ALICE, "resp_alice_2", stream=False)
    asked += 1
    assert refused(gw, k1, mine)["code"] == "previous_response_not_found", "a key without a team shares nothing"
    assert len(upstream.bodies(RESP)) == asked


def test_a_revoked_keys_name_reused_owns_nothing(upstream: FakeUpstream, make: Callable[[], GatewayServer]) -> None:
    """A revoked key's name may be reused (docs/keys-teams-spend.md): the new key is another principal, as it
    starts with no spend, so the old key's response ids are not its own."""
    gw = make()
    old = admin_call(gw.port, "POST", "keys", {"name": "k1"})[1]["key"]
    rid = create(upstream, gw, old, "resp_old_k1", stream=False)
    assert admin_call(gw.port, "DELETE", "keys/k1")[0] == 200
    status, made = admin_call(gw.port, "POST", "keys", {"name": "k1"})
    assert status == 201
    asked = len(upstream.bodies(RESP))
    assert refused(gw, made["key"], rid)["code"] == "previous_response_not_found"
    assert len(upstream.bodies(RESP)) == asked, "the upstream was never asked"


def test_a_team_recreated_under_its_name_shares_nothing(upstream: FakeUpstream,
                                                        make: Callable[[], GatewayServer]) -> None:
    """A team deleted and created again under its name is a new team (its counters start from nothing): the
    old team's response ids are not the new one's."""
    gw = make()
    assert admin_call(gw.port, "POST", "teams", {"name": "ml"})[0] == 201
    k1 = admin_call(gw.port, "POST", "keys", {"name": "k1", "team": "ml"})[1]["key"]
    rid = create(upstream, gw, k1, "resp_old_team", stream=True)
    assert admin_call(gw.port, "DELETE", "keys/k1")[0] == 200
    assert admin_call(gw.port, "DELETE", "teams/ml")[0] == 200
    assert admin_call(gw.port, "POST", "teams", {"name": "ml"})[0] == 201
    k2 = admin_call(gw.port, "POST", "keys", {"name": "k2", "team": "ml"})[1]["key"]
    asked = len(upstream.bodies(RESP))
    assert refused(gw, k2, rid)["code"] == "previous_response_not_found"
    assert len(upstream.bodies(RESP)) == asked


def test_a_conversation_is_unknown(upstream: FakeUpstream, make: Callable[[], GatewayServer]) -> None:
    """An OpenAI conversation (`conversation`) is state the upstream keeps for the provider's account: the
    gateway creates none (it serves no /v1/conversations), so none is any key's, and one named by id is
    unknown (404), never read or written upstream for a caller who does not own it."""
    gw = make()
    for conversation in ("conv_of_someone_else", {"id": "conv_of_someone_else"}):
        with pytest.raises(openai.NotFoundError) as info:
            client(gw, ALICE).responses.create(model="m", input="what did we say?",
                                               extra_body={"conversation": conversation})
        body: Any = info.value.body
        assert body == {"message": "Conversation with id 'conv_of_someone_else' not found.",
                        "type": "invalid_request_error", "param": "conversation",
                        "code": "conversation_not_found"}
    assert upstream.bodies(RESP) == [], "the upstream was never asked"


def test_an_answer_not_stored_upstream_is_not_recorded(upstream: FakeUpstream,
                                                       make: Callable[[], GatewayServer]) -> None:
    gw = make()
    upstream.enqueue(RESP, body_script(Answer("resp_unstored").message(["Hello."])))
    rid = client(gw, ALICE).responses.create(model="m", input="hi", store=False).id
    assert refused(gw, ALICE, rid)["code"] == "previous_response_not_found"
    assert len(upstream.bodies(RESP)) == 1


def test_a_bridged_backend_keeps_its_400(upstream: FakeUpstream, make: Callable[[], GatewayServer]) -> None:
    gw = make()
    rid = create(upstream, gw, ALICE, "resp_alice_3", stream=False)
    with pytest.raises(openai.BadRequestError) as info:
        client(gw, ALICE).responses.create(model="bridged", input="and then?", previous_response_id=rid)
    body: Any = info.value.body
    assert body["param"] == "previous_response_id" and body["code"] == "invalid_request"
    assert upstream.bodies(CLAUDE) == []


def test_a_wrong_type_is_a_400(upstream: FakeUpstream, make: Callable[[], GatewayServer]) -> None:
    gw = make()
    with pytest.raises(openai.BadRequestError) as info:
        client(gw, ALICE).responses.create(model="m", input="hi", previous_response_id=7)  # type: ignore[arg-type]
    body: Any = info.value.body
    assert body["param"] == "previous_response_id"
    assert upstream.bodies(RESP) == []


def test_replicas_share_ownership_through_redis(upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer],
                                                redis_server: RedisServer, tmp_path: Path) -> None:
    state = {"backend": "redis", "redis_url": redis_server.url, "response_owner_ttl_s": TTL_S,
             "timeout_ms": 1000}
    first, second = (make_gateway(config(upstream.base_url, state, f"sqlite:///{tmp_path}/{name}.db"))
                     for name in ("a", "b"))
    rid = create(upstream, first, ALICE, "resp_{shared}", stream=True)
    raw = redis.Redis.from_url(redis_server.url)
    key = owner_key(rid)
    assert key.startswith("llmgw:owner:{") and key.endswith("}"), "hash-tagged, as the other keys are"
    deadline = time.monotonic() + 2  # the write runs after the first token: poll for it, bounded
    while raw.pttl(key) < 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert 0 < raw.pttl(key) <= TTL_S * 1000
    assert follow_up(upstream, second, ALICE, rid) == "Again."
    asked = len(upstream.bodies(RESP))
    assert refused(second, BOB, rid)["code"] == "previous_response_not_found"
    assert len(upstream.bodies(RESP)) == asked
