"""The independent TTFT clients of `bench.ttft_probe` (issue #34, point 4) work: their decoding at every
split, and each client against the fake upstream on 127.0.0.1 (no timing assertions: speed is measured
only by running the probe)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from bench import servers
from bench.affinity import split_cpus
from bench.procstat import tree
from bench.raw_client import ChunkedSSE, Habits, run_clients
from bench.ttft_probe import Round, check_targets, habits_of, pin, report
from bench.upstream import _SSE_HEAD, answer_steps, start_upstream

BODY = {"model": "m", "stream": True, "bench": {"ttft_ms": 0, "chunks": 4, "chunk_chars": 5, "gap_ms": 1, "seed": 3}}


def test_chunked_sse_finds_the_first_content_event_at_every_split() -> None:
    frames = [data for _, data in answer_steps(BODY)]
    answer = _SSE_HEAD + b"".join(frames)
    # the first HTTP chunk carries the role event and the first delta; the decoder takes a chunk whole
    first_content_end = len(_SSE_HEAD) + len(frames[0])
    for cut in range(len(answer) + 1):
        parser = ChunkedSSE()
        seen_at_cut = parser.feed(answer[:cut])
        assert seen_at_cut == (cut >= first_content_end), cut
        assert parser.feed(answer[cut:])
        assert parser.ended and parser.status == 200


def test_chunked_sse_ignores_the_role_event_and_done() -> None:
    role = b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    done = b"data: [DONE]\n\n"
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in (role, done)) + b"0\r\n\r\n"
    parser = ChunkedSSE()
    assert not parser.feed(_SSE_HEAD + body)
    assert parser.ended and not parser.content_seen


@pytest.mark.parametrize("habits", [Habits(), Habits(new_conn=True), Habits(new_conn=True, nodelay=False, split=True),
                                    Habits(split=True), Habits(procs=True), Habits(new_conn=True, procs=True),
                                    Habits(pause_s=0.01)])
async def test_raw_client_against_the_fake_upstream(habits: Habits) -> None:
    server = await start_upstream()
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    try:
        got = await asyncio.to_thread(run_clients, "raw", url, habits, 3, 2)
    finally:
        server.close()
        await server.wait_closed()
    assert got.errors == 0
    assert len(got.ttft_ms) == len(got.ttfb_ms) == 3
    assert all(0 < b <= f for b, f in zip(got.ttfb_ms, got.ttft_ms, strict=True))
    assert (got.cpu_s > 0) == habits.procs  # the worker processes report their own CPU; threads are ours


async def test_pyrelay_passes_the_stream_through_unchanged(tmp_path: Path) -> None:
    """The floor target, as the probe starts it (its own process, on uvloop): what the raw reader gets
    through it is what the upstream sent, request after request on a keep-alive connection per worker."""
    upstream = await start_upstream()
    up_port = upstream.sockets[0].getsockname()[1]
    relay = None
    try:
        relay = await asyncio.to_thread(servers.start_pyrelay, tmp_path, up_port)
        got = await asyncio.to_thread(run_clients, "raw", relay.url, Habits(), 4, 2)
    finally:
        if relay is not None:
            await asyncio.to_thread(relay.stop)
        upstream.close()
        await upstream.wait_closed()
    assert got.errors == 0 and len(got.ttft_ms) == 4


async def test_sdk_client_against_the_fake_upstream() -> None:
    server = await start_upstream()
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    try:
        got = await asyncio.to_thread(run_clients, "sdk", url, Habits(), 2, 1)
    finally:
        server.close()
        await server.wait_closed()
    assert got.errors == 0 and len(got.ttft_ms) == 2 and all(t > 0 for t in got.ttft_ms)


def test_harness_names() -> None:
    assert habits_of("raw:new:split:nagle") == ("raw", Habits(new_conn=True, nodelay=False, split=True))
    assert habits_of("loadgen")[0] == "loadgen"
    assert habits_of("sdk:procs") == ("sdk", Habits(procs=True))
    assert habits_of("raw:idle") == ("raw", Habits(pause_s=1.0))
    for unknown in ("raw:fast", "loadgen:procs"):
        with pytest.raises(SystemExit):
            habits_of(unknown)


def test_report_gives_the_added_ttft_per_round() -> None:
    results = {("raw", "direct"): [Round([50.0, 51.0, 52.0]), Round([50.0, 50.0, 50.0])],
               ("raw", "gw"): [Round([51.0, 52.0, 53.0]), Round([52.0, 52.0, 52.0])]}
    table = report(results, ["raw"], ["direct", "gw"])
    row = next(line for line in table.splitlines() if "| gw |" in line)
    assert "**1.50** (1.00, 2.00)" in row


@pytest.mark.parametrize("targets", [["gateway"], ["direct", "gateway-base"], ["direct", "nginx-base"],
                                     ["direct", "gateway-traced"]])
def test_targets_are_checked_before_anything_starts(targets: list[str]) -> None:
    with pytest.raises(SystemExit):
        check_targets(targets, None)


def test_a_base_target_runs_the_given_checkout(tmp_path: Path) -> None:
    targets = ["direct", "gateway-noredact", "gateway-noredact-base", "gateway-base", "nginx"]
    assert check_targets(targets, tmp_path) == ["gateway-noredact-base", "gateway-base"]


def test_a_base_target_may_differ_by_interpreter_alone() -> None:
    targets = ["direct", "gateway-noredact", "gateway-noredact-base"]
    assert check_targets(targets, None, "/opt/other/bin/python") == ["gateway-noredact-base"]


def test_pin_gives_the_relay_the_last_cpu() -> None:
    assert split_cpus({0, 1}) == ({1}, {0})
    assert split_cpus({0, 2, 5}) == ({5}, {0, 2})
    with pytest.raises(SystemExit):
        split_cpus({3})


def _affinities(pid: int) -> list[set[int]]:
    return [os.sched_getaffinity(int(tid)) for p in tree(pid) for tid in os.listdir(f"/proc/{p}/task")]


def test_pin_moves_every_thread_of_the_relay_and_keeps_the_rest_apart(tmp_path: Path) -> None:
    """`--pin` on started processes: every thread of the relay on its CPU, the fake upstream and this
    process (whose threads the clients are) on the others; this process's affinity is put back after."""
    cpus = os.sched_getaffinity(0)
    upstream = servers.start_upstream(tmp_path)
    relay = None
    try:
        relay = servers.start_pyrelay(tmp_path, upstream.port)
        if len(cpus) < 2:  # a one-CPU machine has no layout to give: refused, nothing moved
            with pytest.raises(SystemExit):
                pin({"direct": upstream, "pyrelay": relay})
            assert all(a == cpus for a in _affinities(relay.pid))
            return
        pin({"direct": upstream, "pyrelay": relay})
        relay_cpus, rest = split_cpus(cpus)
        assert set(map(frozenset, _affinities(relay.pid))) == {frozenset(relay_cpus)}
        assert set(map(frozenset, _affinities(upstream.pid))) == {frozenset(rest)}
        own = {frozenset(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")}
        assert own == {frozenset(rest)}
    finally:
        for tid in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(tid), cpus)
        if relay is not None:
            relay.stop()
        upstream.stop()
