"""Anthropic cache breakpoints on a Messages body (`providers.convert.cache_markers`, docs/caching.md), the
markers carried from Chat and Responses clients, and the `prompt_cache` / cache price config."""

from __future__ import annotations

import copy
import sys
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import ConfigError, parse_config
from gateway.core.body_scan import walked
from gateway.core.events import Usage
from gateway.core.json_body import MAX_DEPTH, DepthCheck
from gateway.observe.metrics import usage_cost
from gateway.providers.base import MARKER, MARKER_NEEDLES
from gateway.providers.convert.anthropic_request import anthropic_body
from gateway.providers.convert.cache_markers import fit, marker
from gateway.providers.convert.responses_chat_request import chat_body

E: Any = {"type": "ephemeral"}
H: Any = {"type": "ephemeral", "ttl": "1h"}


def body_with(markers: int) -> dict[str, Any]:
    return {"tools": [{"name": "t", "input_schema": {}, "cache_control": H}],
            "system": [{"type": "text", "text": "s", "cache_control": H}],
            "messages": [{"role": "user" if i % 2 == 0 else "assistant",
                          "content": [{"type": "text", "text": f"m{i}", "cache_control": E}]}
                         for i in range(markers - 2)]}


def blocks(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every tool, system block and message block, with the blocks in its `content` lists before it (the
    prefix's order), down to the 4 levels of `content` below a message `fit` walks; named m{i}.{j}.{k}..."""
    out = [(f"tools[{i}]", t) for i, t in enumerate(body.get("tools", ()))]
    system = body.get("system")
    out += [(f"system[{i}]", b) for i, b in enumerate(system if isinstance(system, list) else ())]
    for i, m in enumerate(body["messages"]):
        content = m["content"]
        out += _inside(f"m{i}", content if isinstance(content, list) else [], 1)
    return out


def _inside(name: str, content: list[Any], depth: int) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for j, b in enumerate(content):
        inner = b.get("content")
        out += _inside(f"{name}.{j}", inner, depth + 1) if depth < 4 and isinstance(inner, list) else []
        out.append((f"{name}.{j}", b))
    return out


def marked(body: dict[str, Any]) -> list[str]:
    return [name for name, b in blocks(body) if "cache_control" in b]


def tool_result(*texts: str, marked: tuple[int, ...], cc: Any = E) -> dict[str, Any]:
    """A tool_result whose content blocks at `marked` carry `cc` (Claude Code marks them so)."""
    return {"type": "tool_result", "tool_use_id": "c", "content": [
        {"type": "text", "text": t, **({"cache_control": cc} if k in marked else {})} for k, t in enumerate(texts)]}


def test_four_markers_pass_untouched_and_more_are_dropped_from_the_oldest_without_changing_the_client_body() -> None:
    four = body_with(4)
    assert fit(dict(four), auto=True) == 0
    client = body_with(7)
    before = copy.deepcopy(client)
    out = dict(client)
    assert fit(out, auto=False) == 3
    assert marked(out) == ["m1.0", "m2.0", "m3.0", "m4.0"]  # the newest four: the next turn reads from them
    assert client == before


def test_markers_inside_a_tool_result_count_toward_the_four_and_are_dropped_in_prefix_order() -> None:
    at_limit: dict[str, Any] = {**body_with(2), "messages": [
        {"role": "user", "content": [tool_result("out", marked=(0,))]},
        {"role": "user", "content": [{"type": "text", "text": "next", "cache_control": E}]}]}
    before = copy.deepcopy(at_limit)
    assert fit(at_limit, auto=True) == 0 and at_limit == before  # four, one of them nested: as sent
    # the audit's body: tools, system, a text, a text inside a tool_result, one more text
    five: dict[str, Any] = {**body_with(3), "messages": [
        *body_with(3)["messages"], {"role": "user", "content": [tool_result("out", marked=(0,))]},
        {"role": "user", "content": [{"type": "text", "text": "next", "cache_control": E}]}]}
    assert fit(five, auto=False) == 1
    assert marked(five) == ["system[0]", "m0.0", "m1.0.0", "m2.0"]
    # nested markers come before their tool_result's own one; the client's body stays as it came
    client: dict[str, Any] = {**body_with(2), "messages": [
        {"role": "user", "content": [{**tool_result("a", "b", "c", marked=(0, 2)), "cache_control": E}]},
        {"role": "assistant", "content": [{"type": "text", "text": "x", "cache_control": E}]},
        {"role": "user", "content": [{"type": "text", "text": "y", "cache_control": E}]}]}
    before = copy.deepcopy(client)
    out = dict(client)
    assert fit(out, auto=False) == 3
    assert marked(out) == ["m0.0.2", "m0.0", "m1.0", "m2.0"]
    assert out["messages"][0]["content"][0]["content"][0] == {"type": "text", "text": "a"}
    assert client == before


def search_result(*texts: str, marked: tuple[int, ...] = (), cc: Any = None) -> dict[str, Any]:
    """A search_result (inside a tool_result's content: two levels below the message) carrying `cc`, its
    texts at `marked` (three levels below) carrying E."""
    return {"type": "search_result", "source": "s", "title": "t", **({"cache_control": cc} if cc else {}),
            "content": [{"type": "text", "text": t, **({"cache_control": E} if k in marked else {})}
                        for k, t in enumerate(texts)]}


def in_tool_result(*content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": list(content)}]}


def test_a_marker_on_a_search_result_in_a_tool_result_or_on_a_text_in_it_counts_toward_the_four() -> None:
    for fifth, name in ((search_result("found", cc=E), "m2.0.0"), (search_result("a", "b", marked=(1,)), "m2.0.0.1")):
        client: dict[str, Any] = {**body_with(4), "messages": [*body_with(4)["messages"], in_tool_result(fifth)]}
        before = copy.deepcopy(client)
        out = dict(client)
        assert fit(out, auto=False) == 1
        assert marked(out) == ["system[0]", "m0.0", "m1.0", name]  # the oldest, the tool's, dropped
        assert client == before


def test_a_marker_three_levels_deep_is_seen_and_auto_adds_none() -> None:
    body: dict[str, Any] = {"tools": [{"name": "t"}], "system": "rules", "messages": [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "t", "input": {}}]},
        in_tool_result(search_result("a", "b", marked=(1,)))]}
    before = copy.deepcopy(body)
    assert fit(body, auto=True) == 0
    assert body == before and marked(body) == ["m2.0.0.1"]


def chain(levels: int) -> dict[str, Any]:
    """A block with `levels` levels of `content` nested in it, each one marked."""
    block: dict[str, Any] = {"type": "text", "text": "bottom", "cache_control": E}
    for _ in range(levels - 1):
        block = {"type": "search_result", "content": [block], "cache_control": E}
    return block


def test_markers_are_looked_for_four_levels_of_content_deep_and_no_deeper() -> None:
    client: dict[str, Any] = {"messages": [
        {"role": "user", "content": [chain(50)]}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": t, "cache_control": E} for t in "ab"]}]}
    before = copy.deepcopy(client)
    out = dict(client)
    # the chain's top four levels and the two texts: six; the oldest two (the chain's 4th and 3rd) dropped
    assert fit(out, auto=False) == 2
    assert marked(out) == ["m0.0.0", "m0.0", "m2.0", "m2.1"] and client == before
    fourth = out["messages"][0]["content"][0]["content"][0]["content"][0]["content"][0]
    assert "cache_control" not in fourth and fourth["content"][0]["cache_control"] == E  # the 5th: not seen
    assert fourth["content"] is client["messages"][0]["content"][0]["content"][0]["content"][0]["content"][0][
        "content"]  # nor copied
    # deeper than Python's recursion limit, marked at the bottom only: not walked there, so no RecursionError
    bottom = {"type": "text", "text": "bottom", "cache_control": E}
    for _ in range(sys.getrecursionlimit() + 100):
        bottom = {"type": "search_result", "content": [bottom]}
    hostile: dict[str, Any] = {"messages": [{"role": "user", "content": [bottom]}]}
    messages = hostile["messages"]
    assert fit(hostile, auto=False) == 0 and hostile["messages"] is messages


def test_a_one_hour_marker_after_a_five_minute_one_deeper_in_the_prefix_is_sent_as_five_minutes() -> None:
    # prefix order: the search_result's texts (the first 5m, then 1h), then the search_result itself (1h)
    found = {**search_result("a", "b", cc=H), "content": [{"type": "text", "text": "a", "cache_control": E},
                                                         {"type": "text", "text": "b", "cache_control": H}]}
    client: dict[str, Any] = {"tools": [{"name": "t", "cache_control": H}], "messages": [
        in_tool_result(found), {"role": "user", "content": [{"type": "text", "text": "next"}]}]}
    before = copy.deepcopy(client)
    out = dict(client)
    assert fit(out, auto=False) == 0
    result = out["messages"][0]["content"][0]["content"][0]
    assert [b["cache_control"] for b in result["content"]] == [E, E] and result["cache_control"] == E
    assert out["tools"][0]["cache_control"] == H and client == before
    assert out["messages"][1] is client["messages"][1]  # an untouched message is not copied


CC = st.sampled_from([None, E, H])


def _node(cc: Any, inner: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "search_result" if inner else "text", "text": "x", **({"cache_control": cc} if cc else {}),
            **({"content": inner} if inner else {})}


TREES = st.recursive(st.builds(_node, CC, st.just([])), lambda kids: st.builds(_node, CC, st.lists(kids, max_size=3)),
                     max_leaves=10)


@given(st.lists(CC, max_size=2), st.lists(CC, max_size=2), st.lists(st.lists(TREES, min_size=1, max_size=3),
                                                                    max_size=4))
def test_markers_at_any_depth_are_fit_in_prefix_order(tools: list[Any], system: list[Any],
                                                      messages: list[list[dict[str, Any]]]) -> None:
    """Whatever the nesting: the newest four markers within the walked depth stay, the rest are dropped and
    counted, no 1-hour marker follows a shorter one, and the client's body is as it came."""
    client: dict[str, Any] = {"tools": [_node(cc, []) for cc in tools], "system": [_node(cc, []) for cc in system],
                              "messages": [{"role": "user", "content": c} for c in messages]}
    before = copy.deepcopy(client)
    seen = marked(client)
    out = dict(client)
    dropped = fit(out, auto=False)
    assert client == before
    assert dropped == max(0, len(seen) - 4) and marked(out) == seen[dropped:]
    ttls = [b["cache_control"].get("ttl") for _, b in blocks(out) if "cache_control" in b]
    assert "1h" not in ttls[next((k for k, t in enumerate(ttls) if t != "1h"), len(ttls)):]


def test_markers_on_a_chat_tool_messages_parts_count_toward_the_four_too() -> None:
    part: Any = {"type": "text", "text": "out", "cache_control": E}
    body = anthropic_body({"messages": [
        {"role": "system", "content": [{"type": "text", "text": "s", "cache_control": H}]},
        {"role": "user", "content": [{"type": "text", "text": "u", "cache_control": E}]},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                              "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": [part, part]},
        {"role": "user", "content": [{"type": "text", "text": "next", "cache_control": E}]}],
        "tools": [{"type": "function", "function": {"name": "f"}, "cache_control": H}]}, "claude", stream=False)
    assert fit(body, auto=False) == 2
    assert marked(body) == ["m0.0", "m2.0.0", "m2.0.1", "m2.1"]  # the tool result and the user text: one turn


def test_a_nested_one_hour_marker_after_a_five_minute_one_is_sent_as_five_minutes() -> None:
    body: dict[str, Any] = {"system": [{"type": "text", "text": "s", "cache_control": E}], "messages": [
        {"role": "user", "content": [{**tool_result("a", "b", marked=(1,), cc=H), "cache_control": H}]}]}
    assert fit(body, auto=False) == 0
    result = body["messages"][0]["content"][0]
    assert result["content"][1]["cache_control"] == E and result["cache_control"] == E


def test_auto_adds_nothing_when_the_only_marker_is_inside_a_tool_result() -> None:
    body: dict[str, Any] = {"tools": [{"name": "t"}], "system": "rules", "messages": [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "t", "input": {}}]},
        {"role": "user", "content": [tool_result("out", marked=(0,))]}]}
    before = copy.deepcopy(body)
    assert fit(body, auto=True) == 0
    assert body == before and marked(body) == ["m2.0.0"]


def test_a_one_hour_marker_after_a_five_minute_one_is_sent_as_five_minutes() -> None:
    body: dict[str, Any] = {"tools": [{"name": "t", "cache_control": E}],
                            "system": [{"type": "text", "text": "s", "cache_control": H}],
                            "messages": [{"role": "user", "content": "hi"}]}
    fit(body, auto=False)
    assert body["system"][0]["cache_control"] == E and body["tools"][0]["cache_control"] == E


def test_auto_marks_tools_system_and_the_last_two_user_turns_only_when_the_client_marked_nothing() -> None:
    body: dict[str, Any] = {
        "tools": [{"name": "a"}, {"name": "b"}], "system": "rules",
        "messages": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "x"},
                     {"role": "user", "content": [{"type": "text", "text": "two"}]},
                     {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"},
                                                       {"type": "tool_use", "id": "c", "name": "a", "input": {}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "r"}]}]}
    before = copy.deepcopy(body)
    out = dict(body)
    assert fit(out, auto=True) == 0
    assert marked(out) == ["tools[1]", "system[0]", "m2.0", "m4.0"]
    assert out["system"] == [{"type": "text", "text": "rules", "cache_control": E}]
    assert body == before
    off = dict(body)
    fit(off, auto=False)
    assert off == before
    client = copy.deepcopy(body)
    client["messages"][0]["content"] = [{"type": "text", "text": "one", "cache_control": E}]
    fit(client, auto=True)
    assert marked(client) == ["m0.0"]  # the client's own marker: nothing added


def test_auto_marks_no_empty_text_block_at_the_end_of_the_system_prompt() -> None:
    """Anthropic refuses a marker on an empty text block: the system prompt's end is its last block that
    takes one, as a user turn's is."""
    body: dict[str, Any] = {"system": [{"type": "text", "text": "rules"}, {"type": "text", "text": ""}],
                            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                                                      {"type": "text", "text": ""}]}]}
    fit(body, auto=True)
    assert marked(body) == ["system[0]", "m0.0"]


def test_markers_from_chat_parts_and_tools_take_anthropics_form() -> None:
    out = anthropic_body({"messages": [
        {"role": "system", "content": [{"type": "text", "text": "s", "cache_control": {"type": "x", "ttl": "2h"}}]},
        {"role": "user", "content": [{"type": "text", "text": "u", "cache_control": H}]}],
        "tools": [{"type": "function", "function": {"name": "f"}, "cache_control": {"type": "ephemeral"}}]},
        "claude", stream=False)
    assert out["system"][0]["cache_control"] == E
    assert out["messages"][0]["content"][0]["cache_control"] == H
    assert out["tools"][0]["cache_control"] == E
    assert marker("yes") is None


def test_the_responses_bridge_keeps_markers_on_parts_items_and_tools() -> None:
    out = chat_body({"input": [
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "rules", "cache_control": H}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a", "cache_control": E},
                                                        {"type": "input_text", "text": "b"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "plain"}]},
        {"type": "function_call_output", "call_id": "c", "output": "r", "cache_control": E}],
        "tools": [{"type": "function", "name": "f", "parameters": {}, "cache_control": H}],
        "prompt_cache_key": "s1", "prompt_cache_retention": "24h"})
    system, user, plain, tool = out["messages"]
    assert system == {"role": "system", "content": [{"type": "text", "text": "rules", "cache_control": H}]}
    assert user["content"][0] == {"type": "text", "text": "a", "cache_control": E}
    assert plain == {"role": "user", "content": "plain"}  # no marker: joined as before
    assert tool["cache_control"] == E and out["tools"][0]["cache_control"] == H
    assert (out["prompt_cache_key"], out["prompt_cache_retention"]) == ("s1", "24h")
    anthropic = anthropic_body(out, "claude", stream=False)
    assert anthropic["system"][0]["cache_control"] == H and anthropic["tools"][0]["cache_control"] == H
    assert anthropic["messages"][-1]["content"][-1]["cache_control"] == E


def test_a_marker_on_a_part_of_a_tool_output_reaches_the_tool_results_content() -> None:
    """Like a chat `tool` message's marked parts (Claude Code marks the blocks inside a tool_result): kept as
    text parts, not joined away with the marker; an unmarked output is joined as before."""
    out = chat_body({"input": [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "head"}, {"type": "input_text", "text": "tail", "cache_control": H}]},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "x"},
                                                                    {"type": "input_text", "text": "y"}]}]})
    marked, plain = (m for m in out["messages"] if m["role"] == "tool")
    assert marked["content"] == [{"type": "text", "text": "head"}, {"type": "text", "text": "tail", "cache_control": H}]
    assert plain["content"] == "xy"
    results = [b for m in anthropic_body(out, "claude", stream=False)["messages"] for b in m["content"]
               if b["type"] == "tool_result"]
    assert results[0]["content"][-1] == {"type": "text", "text": "tail", "cache_control": H}
    assert results[1]["content"] == "xy"


def _config(model: dict[str, Any], price: dict[str, Any] | None = None) -> Any:
    return parse_config({"auth": {"allow_unauthenticated": True}, "providers": {"a": {
        "type": "anthropic", "base_url": "http://127.0.0.1:9", "api_key": "k"}},
        "models": [{"name": "m", "deployments": [{"provider": "a", "model": "claude", "price": price or {}}],
                    **model}]}, env={})


def test_prompt_cache_config_and_cache_prices() -> None:
    assert _config({}).models["m"].auto_breakpoints is False
    assert _config({"prompt_cache": {"breakpoints": False}}).models["m"].auto_breakpoints is False
    assert _config({"prompt_cache": {"breakpoints": "auto"}}).models["m"].auto_breakpoints is True
    with pytest.raises(ConfigError, match="breakpoints"):
        _config({"prompt_cache": {"breakpoints": "always"}})
    priced = _config({}, {"input": 3, "cache_write": 3.75, "cache_creation_input_1h": 6})
    price = priced.models["m"].deployments[0].price
    assert (price.cache_creation_input, price.cache_creation_input_1h, price.cached_input) == (3.75, 6.0, None)
    with pytest.raises(ConfigError, match="cache_write"):
        _config({}, {"cache_write": 1, "cache_creation_input": 1})
    # 100 uncached, 1000 read at input (no cached_input price), 50 written for 5m, 20 for an hour
    usage = Usage(input=1170, output=10, cached_input=1000, cache_creation_input=70, cache_creation_input_1h=20)
    want = (100 * 3 + 1000 * 3 + 50 * 3.75 + 20 * 6) / 1e6
    assert usage_cost(usage, price) == pytest.approx(want)


def test_an_unset_one_hour_write_price_is_the_input_price() -> None:
    """docs/caching.md: every cache price left unset is `input`, the 1-hour writes' too (not `cache_write`);
    one that is set, 0 included, is its own."""
    # 1000 read at input (no cached_input price), 50 written for 5 minutes, 20 for an hour, 10 out
    usage = Usage(input=1070, output=10, cached_input=1000, cache_creation_input=70, cache_creation_input_1h=20)
    unset = _config({}, {"input": 3, "output": 15, "cache_write": 3.75}).models["m"].deployments[0].price
    assert unset.cache_creation_input_1h is None
    assert usage_cost(usage, unset) == pytest.approx((1000 * 3 + 50 * 3.75 + 20 * 3 + 10 * 15) / 1e6)
    free = _config({}, {"input": 3, "output": 15, "cache_write": 3.75, "cache_creation_input_1h": 0})
    assert usage_cost(usage, free.models["m"].deployments[0].price) == pytest.approx(
        (1000 * 3 + 50 * 3.75 + 10 * 15) / 1e6)


def may_carry_markers(raw: bytes) -> bool:
    """The byte rule a big body's split parse searches with (`core.json_split`, `MARKER_NEEDLES`)."""
    return any(needle in raw for needle in MARKER_NEEDLES)


def walks_find_a_marker(raw: bytes) -> bool:
    """What the walks of a parsed body find (`pipeline.request.read_json`): at once (a small body) and a
    slice at a time (a bigger one) agree, and are exact: the key however spelled, never a string's text."""
    body = orjson.loads(raw)
    check = DepthCheck(body, MAX_DEPTH, 2, MARKER)
    while not check.step():
        pass
    assert check.marked == walked(body, 0, MARKER).marked
    return check.marked


@pytest.mark.parametrize("raw, byte_rule, walks", [
    (b'{"messages": [{"role": "user", "content": "hi"}]}', False, False),
    (b'{"system": [{"type": "text", "text": "s", "cache_control": {}}]}', True, True),
    (b'{"cache_control": {"type": "ephemeral"}, "messages": []}', True, True),  # the top level's own
    (b'{"c": {"cache\\u005fcontrol": {}}}', True, True),  # an escape spells it
    (b'{"c": {"\\u0063ache_control": {}}}', True, True),
    (b'{"c": {"\\u0063ache_contro": {}}}', True, False),  # the byte rule's harmless yes
    (b'{"text": "\\u4e2d\\u6587 unescaped u"}', False, False),  # escapes of non-ASCII cannot spell it
    (b'{"text": "a \\"cache_control\\" in prose"}', False, False),  # inside a string
    (b'{"text": "cache_control"}', True, False),  # a value, not a key
])
def test_a_body_is_walked_for_markers_only_when_it_may_hold_one(raw: bytes, byte_rule: bool, walks: bool) -> None:
    assert may_carry_markers(raw) is byte_rule
    assert walks_find_a_marker(raw) is walks


def test_a_body_known_to_carry_no_marker_is_not_walked_by_fit() -> None:
    unmarked: dict[str, Any] = {"system": "rules", "messages": [{"role": "user", "content": "hi"}]}
    out = dict(unmarked)
    assert fit(out, auto=False, scan=False) == 0 and out == unmarked
    fit(out, auto=True, scan=False)
    assert marked(out) == ["system[0]", "m0.0"]


def test_a_top_level_cache_control_counts_as_the_newest_breakpoint_and_stops_auto() -> None:
    body = {**body_with(4), "cache_control": E}
    assert fit(body, auto=True) == 1
    assert marked(body) == ["system[0]", "m0.0", "m1.0"] and body["cache_control"] == E
    automatic: dict[str, Any] = {"cache_control": E, "system": "s", "messages": [{"role": "user", "content": "hi"}]}
    fit(automatic, auto=True)
    assert marked(automatic) == []  # the client asked for Anthropic's own placement: nothing added


def test_a_top_level_one_hour_marker_after_a_five_minute_block_marker_is_sent_as_five_minutes() -> None:
    """The top-level breakpoint lands on the last block, after every block's own: a 1-hour one after a
    5-minute one is refused as a block's would be; after 1-hour ones only, or alone, it keeps its TTL."""
    client = {"cache_control": H, "system": [{"type": "text", "text": "s", "cache_control": E}],
              "messages": [{"role": "user", "content": "hi"}]}
    body = copy.deepcopy(client)
    assert fit(body, auto=False) == 0
    assert body["cache_control"] == E and client["cache_control"] == H  # the client's body as it came
    long_only = {**body_with(3), "cache_control": H}
    long_only["messages"] = []
    fit(long_only, auto=False)
    assert long_only["cache_control"] == H
    alone = {"cache_control": H, "messages": [{"role": "user", "content": "hi"}]}
    fit(alone, auto=True)
    assert alone["cache_control"] == H


def test_a_null_cache_control_is_no_marker() -> None:
    body = body_with(4)
    body["messages"] = [*body["messages"], {"role": "user", "content": [{"type": "text", "text": "x",
                                                                          "cache_control": None}]}]
    assert fit(body, auto=False) == 0
    assert marked(body) == ["tools[0]", "system[0]", "m0.0", "m1.0", "m2.0"]  # untouched, None included


@given(st.lists(st.booleans(), min_size=len("cache_control"), max_size=len("cache_control")), st.booleans())
def test_the_key_however_its_letters_are_escaped_may_be_there(escaped: list[bool], upper: bool) -> None:
    """JSON may spell any letter of a key as `\\u00XX` (hex digits of either case): every spelling parses to
    the key, and `may_carry_markers` says so of each."""
    spelled = "".join(f"\\u{ord(c):04X}" if e and upper else f"\\u{ord(c):04x}" if e else c
                      for c, e in zip("cache_control", escaped, strict=True))
    raw = ('{"system": [{"type": "text", "text": "s", "' + spelled + '": {"type": "ephemeral"}}]}').encode()
    assert "cache_control" in orjson.loads(raw)["system"][0]
    assert may_carry_markers(raw) is True
    assert walks_find_a_marker(raw) is True
