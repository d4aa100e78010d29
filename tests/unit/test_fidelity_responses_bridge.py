"""Protocol fidelity of the Responses bridge (CONTRACT §10): for any valid chat stream, cut into any reads,
what openai-python's own `Stream` and `ResponseStreamState` make of the gateway's Responses bytes equals the
bridge's conversion of the same server's whole answer (the non-stream body, read by the same translator).

The chat streams are `upstream_gen.chat_events`: reasoning, text or a refusal, parallel tool calls whose
fragments interleave (with or without `index`), usage on the finish chunk, apart or absent, `[DONE]` or
not (then the bytes' end brings the terminal event). A translated answer may cut its text into more items
than the body's (a tool call ends the open text item), so it is compared kind by kind: all reasoning, all
message text, all refusal text, and the calls (call_id, name, arguments) in order; plus status, usage, and
one lifecycle numbered without a gap whose ids never change."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.responses.filter import ResponsesOutputFilter
from gateway.core.responses.stream import ResponsesStream
from gateway.core.stages import StageFactory
from gateway.providers.base import bound
from gateway.providers.registry import CELLS
from gateway.providers.settings import ProviderConfig
from tests.unit.fidelity import drive, fidelity
from tests.unit.model_safety import safety
from tests.unit.sdk_read import openai_response
from tests.unit.upstream_gen import chat_answers, chat_events, framed, reads

CHAT_ONLY = ProviderConfig("llama", "openai", "http://127.0.0.1:9/v1", "sk-x", responses=False)
BRIDGE = bound(CELLS[("responses", "openai")](CHAT_ONLY), {"model": "m", "input": "hi"})


def through_gateway(pieces: list[bytes], factory: StageFactory | None = None) -> list[bytes]:
    stream = ResponsesStream(BRIDGE.stream_parser(), "llama/m")
    filt = ResponsesOutputFilter(factory)
    out = drive(stream, filt, pieces)
    assert stream.failed is None and stream.terminal is not None, "the answer ended whole"
    return [*out, stream.drain(), stream.tail(), stream.finish()]


def by_kind(output: list[dict[str, Any]]) -> tuple[str, str, str, list[tuple[str, str, str]]]:
    """(reasoning, text, refusal, calls): the output items without their boundaries."""
    def parts(item_type: str, part_type: str, key: str) -> str:
        return "".join(p.get(key) or "" for item in output if item["type"] == item_type
                       for p in item.get("content") or () if p.get("type") == part_type)

    calls = [(i["call_id"], i["name"], i["arguments"]) for i in output if i["type"] == "function_call"]
    return (parts("reasoning", "reasoning_text", "text"), parts("message", "output_text", "text"),
            parts("message", "refusal", "refusal"), calls)


@fidelity(150)
@given(st.data())
def test_a_chat_stream_reads_as_the_response_of_its_completion(data: st.DataObject) -> None:
    answer = data.draw(chat_answers())
    raw = data.draw(framed(data.draw(chat_events(answer))))
    state, got = openai_response(through_gateway(data.draw(reads(raw))))
    want = BRIDGE.parse_body(orjson.dumps(answer.completion())).obj
    final = got[-1]
    assert final.type in ("response.completed", "response.incomplete")
    done = final.response.model_dump(mode="json", exclude_none=True)
    assert by_kind(done["output"]) == by_kind(want["output"])
    assert (done["id"], done["status"], done.get("usage")) == (want["id"], want["status"], want.get("usage"))
    assert done.get("incomplete_details") == want.get("incomplete_details")
    snapshot = [o.model_dump(mode="json", exclude_none=True) for o in state.snapshot.output]
    assert [c for c in by_kind(snapshot)[3]] == by_kind(want["output"])[3], "the SDK's own accumulation"
    assert by_kind(snapshot)[1] == by_kind(want["output"])[1]
    assert [e.sequence_number for e in got] == list(range(len(got))), "numbered without a gap"
    assert {e.response.id for e in got if e.type.startswith("response.") and hasattr(e, "response")} == {done["id"]}
    ids = [e.item.id for e in got if e.type == "response.output_item.added"]
    assert len(ids) == len(set(ids)) == len(done["output"]), "one item per output index, each id once"


@fidelity(60)
@given(st.data())
def test_through_a_redaction_window_with_nothing_to_mask_the_bridged_response_is_the_same(
        data: st.DataObject) -> None:
    answer = data.draw(chat_answers(max_tools=2))
    raw = data.draw(framed(data.draw(chat_events(answer))))
    run = safety(False).start()
    assert run is not None
    _state, got = openai_response(through_gateway(data.draw(reads(raw)), run.factory))
    if run.redaction_counts():
        return  # the random text happened to hold something a rule masks: not this property's case
    want = BRIDGE.parse_body(orjson.dumps(answer.completion())).obj
    done = got[-1].response.model_dump(mode="json", exclude_none=True)
    assert by_kind(done["output"]) == by_kind(want["output"])
