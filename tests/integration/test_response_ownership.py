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
from gateway.state import lua
from gateway.state.base import MAX_OWNED_ITEMS_PER_TENANT, MAX_RESPONSE_OWNERS_PER_TENANT
from gateway.state.redis import owner_key
from tests.control_plane import ADMIN_KEY, admin_call
from tests.fake_upstream import FakeUpstream, Gate, Script
from tests.harness import GatewayServer
from tests.redis_server import RedisServer
from tests.responses_scripts import Answer, body_script, frame, stream_script
from tests.scaleout_load import script_sha

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
    # the refusals' lines (the follow-up's own line is written after its answer, so it may land in here)
    assert [e["reason"] for e in logs if e["event"] == "request" and e["status"] == 404] == [
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


# ---- output items named by id (`item_reference`): the tenant that was given them, no other

def items_answer(rid: str, tag: str) -> Answer:
    """A reasoning item, a message and a function call, their ids `rs_<tag>0`, `msg_<tag>1`, `fc_<tag>2`."""
    return Answer(rid, items=tag).reasoning(["hm"]).message(["Hello."]).function_call("f", "call_1", ['{"a"', ": 1}"])


def create_items(upstream: FakeUpstream, gw: GatewayServer, key: str, rid: str, tag: str, *, stream: bool,
                 **extra: Any) -> list[str]:
    """A response with three output items, asked for by `key`: their ids as the client read them. A stream
    stops after its first token until the client has read it: its other items come later (their ids are
    recorded at its end, not at the first token)."""
    answer = items_answer(rid, tag)
    if stream:
        events = answer.stream_events()
        first = next(i for i, e in enumerate(events) if e["type"].endswith(".delta")) + 1
        gate = Gate()
        upstream.enqueue(RESP, Script([*map(frame, events[:first]), gate, *map(frame, events[first:])]))
        with client(gw, key).responses.stream(model="m", input="hi", **extra) as s:
            for event in s:
                if event.type.endswith(".delta"):
                    gate.opened.set()
            return [item.id for item in s.get_final_response().output if item.id]
    upstream.enqueue(RESP, body_script(answer))
    return [item.id for item in client(gw, key).responses.create(model="m", input="hi", **extra).output if item.id]


def naming(*ids: str, typed: bool = True) -> list[Any]:
    """An input naming stored items, with the `type` or without it (openai's `ItemReference`: optional)."""
    refs = [{"type": "item_reference", "id": i} if typed else {"id": i} for i in ids]
    return [{"role": "user", "content": "and these?"}, *refs]


def answered(upstream: FakeUpstream, gw: GatewayServer, key: str, items: list[Any], model: str = "m") -> str:
    upstream.enqueue(RESP, body_script(Answer("resp_named").message(["Named."])))
    return client(gw, key).responses.create(model=model, input=items).output_text


def item_refused(gw: GatewayServer, key: str, items: list[Any], model: str = "m") -> dict[str, Any]:
    with pytest.raises(openai.NotFoundError) as info:
        client(gw, key).responses.create(model=model, input=items)
    body: Any = info.value.body
    return dict(body)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_output_items_are_named_by_their_tenant_only(upstream: FakeUpstream, make: Callable[[], GatewayServer],
                                                     stream: bool) -> None:
    """Alice's items work for Alice at once (a follow-up right after the stream's end); for Bob each is a
    404 in the Responses error shape, typed or not, on a bridged model too, and no upstream is asked."""
    gw = make()
    ids = create_items(upstream, gw, ALICE, f"resp_items_{stream}", "a", stream=stream)
    assert ids == ["rs_a0", "msg_a1", "fc_a2"]
    assert answered(upstream, gw, ALICE, naming(*ids)) == "Named."
    assert upstream.bodies(RESP)[-1]["input"][1:] == [{"type": "item_reference", "id": i} for i in ids]
    assert answered(upstream, gw, ALICE, naming("msg_a1", typed=False)) == "Named."
    asked = len(upstream.bodies(RESP))
    with capture_logs() as logs:
        err = item_refused(gw, BOB, naming("msg_a1"))
        untyped = item_refused(gw, BOB, naming("fc_a2", typed=False))
        mixed = item_refused(gw, ALICE, naming("rs_a0", "msg_never_relayed", "msg_a1"))
        bridged = item_refused(gw, BOB, naming("msg_a1"), model="bridged")
    assert err == {"message": "Item with id 'msg_a1' not found.", "type": "invalid_request_error",
                   "param": "input", "code": "item_not_found"}
    assert untyped["message"] == "Item with id 'fc_a2' not found."
    assert mixed["message"] == "Item with id 'msg_never_relayed' not found.", "the first not the caller's"
    assert bridged["code"] == "item_not_found", "whatever the provider"
    assert len(upstream.bodies(RESP)) == asked and upstream.bodies(CLAUDE) == [], "no upstream was asked"
    # the refusals' lines (an answered request's is written after its answer, so it may land in here)
    assert [e["reason"] for e in logs if e["event"] == "request" and e["status"] == 404] == ["item_not_found"] * 4


def test_keys_of_one_team_share_their_items(upstream: FakeUpstream, make: Callable[[], GatewayServer]) -> None:
    gw = make()
    assert admin_call(gw.port, "POST", "teams", {"name": "ml"})[0] == 201
    k1, k2, solo = (admin_call(gw.port, "POST", "keys", body)[1]["key"]
                    for body in ({"name": "k1", "team": "ml"}, {"name": "k2", "team": "ml"}, {"name": "solo"}))
    ids = create_items(upstream, gw, k1, "resp_team_items", "t", stream=True)
    assert answered(upstream, gw, k2, naming(*ids)) == "Named.", "another key of the same team"
    asked = len(upstream.bodies(RESP))
    for outsider in (solo, ALICE):
        assert item_refused(gw, outsider, naming(ids[1]))["code"] == "item_not_found"
    assert len(upstream.bodies(RESP)) == asked


def test_items_of_an_answer_not_stored_upstream_are_not_recorded(upstream: FakeUpstream,
                                                                make: Callable[[], GatewayServer]) -> None:
    gw = make()
    ids = create_items(upstream, gw, ALICE, "resp_unstored_items", "u", stream=True, store=False)
    assert item_refused(gw, ALICE, naming(ids[1]))["code"] == "item_not_found"
    with pytest.raises(openai.BadRequestError) as info:
        client(gw, ALICE).responses.create(model="m", input=[{"type": "item_reference", "id": 7}])  # type: ignore[list-item]
    body: Any = info.value.body
    assert body["param"] == "input"
    assert len(upstream.bodies(RESP)) == 1


def test_websocket_mode_refuses_another_keys_items(upstream: FakeUpstream, make: Callable[[], GatewayServer]) -> None:
    """WebSocket mode serves each `response.create` through the same serve path: Bob's reference to an
    item of Alice's is an `error` event (404, `item_not_found`) and the connection stays usable; Alice names
    the items of her socket's last response in the next turn."""
    gw = make()
    upstream.enqueue(RESP, stream_script(items_answer("resp_ws_items", "w").stream_events()),
                     stream_script(Answer("resp_ws_next").message(["Named."]).stream_events()))
    with client(gw, ALICE).responses.connect() as alice, client(gw, BOB).responses.connect() as bob:
        alice.response.create(model="m", input="hi")
        first = ws_events(alice)
        ids = [item.id for item in first[-1].response.output]
        assert first[-1].type == "response.completed" and ids == ["rs_w0", "msg_w1", "fc_w2"]
        bob.response.create(model="m", input=naming("msg_w1"))
        refusal = ws_events(bob)
        assert [(e.type, e.code, e.status) for e in refusal] == [("error", "item_not_found", 404)]  # type: ignore[union-attr]
        alice.response.create(model="m", input=naming("fc_w2"), previous_response_id=first[-1].response.id)
        assert ws_events(alice)[-1].type == "response.completed"
    sent = upstream.bodies(RESP)
    assert len(sent) == 2, "Bob's turn reached no upstream"
    assert sent[1]["input"][-1] == {"type": "item_reference", "id": "fc_w2"}


def ws_events(conn: Any) -> list[Any]:
    got = []
    for event in conn:
        got.append(event)
        if event.type in ("response.completed", "response.failed", "response.incomplete", "error"):
            return got
    return got


def test_items_ride_on_the_owner_write_and_a_request_naming_none_reads_nothing(
        upstream: FakeUpstream, make_gateway: Callable[..., GatewayServer], redis_server: RedisServer,
        tmp_path: Path) -> None:
    """On Redis (every command a script runs is one EVALSHA in the slow log, at a threshold of 0): a
    streamed answer's items go in the one script call that counts its id, and a request that names no
    item makes no read of them (lua.OWNED_ITEMS), while one that names some makes one."""
    raw = redis.Redis.from_url(redis_server.url)
    raw.flushall()
    state = {"backend": "redis", "redis_url": redis_server.url, "response_owner_ttl_s": TTL_S, "timeout_ms": 1000}
    gw = make_gateway(config(upstream.base_url, state, f"sqlite:///{tmp_path}/gw.db"))
    raw.config_set("slowlog-max-len", 10_000)
    raw.config_set("slowlog-log-slower-than", 0)
    try:
        raw.slowlog_reset()
        ids = create_items(upstream, gw, ALICE, "resp_logged", "l", stream=True)
        assert follow_up(upstream, gw, ALICE, "resp_logged") == "Again."
        assert answered(upstream, gw, ALICE, naming(ids[0])) == "Named."
        calls = [e["command"].decode().split(" ") for e in reversed(raw.slowlog_get(10_000))]
    finally:
        raw.config_set("slowlog-log-slower-than", 10_000)
    own, read = script_sha(lua.OWN_RESPONSE), script_sha(lua.OWNED_ITEMS)
    writes = [c[5:] for c in calls if c[:2] == ["EVALSHA", own]]
    assert writes[0] == ["resp_logged", str(TTL_S * 1000), str(MAX_RESPONSE_OWNERS_PER_TENANT),
                         str(MAX_OWNED_ITEMS_PER_TENANT), *ids], "the items in the call that counts the id"
    assert [w[0] for w in writes] == ["resp_logged", "resp_logged-next", "resp_named"], "one call a response"
    assert [c[1] for c in calls if c[0] == "EVALSHA"].count(read) == 1, "only the request naming an item reads"
