"""The benchmark's own parts work: the load generator against the fake upstream on 127.0.0.1 (no nginx,
no gateway, no timing assertions; speed is measured only by `make bench`)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import structlog

from bench import servers
from bench.bench_sse_reads import READS, cases_for, chat_body, decoder_feed
from bench.fixed_cost import Tally, report, split
from bench.loadgen import LoadSpec, _MessagesText, _SSEText, run_load
from bench.log_line import measure as log_line_figures
from bench.procstat import usage, user_sys_s
from bench.redis_flap import measure as flap_figures
from bench.run import python_build
from bench.textgen import expected_text, messages_events, stream_events
from bench.upstream import start_upstream
from bench.ws_size import per_turn_us


async def test_loadgen_against_fake_upstream() -> None:
    server = await start_upstream()
    port = server.sockets[0].getsockname()[1]
    try:
        spec = LoadSpec(url=f"http://127.0.0.1:{port}/v1/chat/completions", concurrency=2, requests=5,
                        ttft_ms=1, chunks=7, chunk_chars=5, gap_ms=1)
        result = await run_load(spec)
    finally:
        server.close()
        await server.wait_closed()
    assert result.errors == {}
    assert result.ok == 5
    assert len(result.ttft_s) == len(result.total_s) == 5
    assert all(0 < f <= t for f, t in zip(result.ttft_s, result.total_s, strict=True))
    assert result.chunks_seen == 5 * (1 + 7 + 1 + 1)  # role, deltas, finish, [DONE]


def test_stream_events_assemble_to_the_expected_text_at_any_split() -> None:
    data = b"".join(stream_events(3, 9, 6, "m", True))
    for cut in range(0, len(data), 37):
        parser = _SSEText()
        parser.feed(data[:cut])
        parser.feed(data[cut:])
        assert parser.done and not parser.error
        assert "".join(parser.parts) == expected_text(3, 9, 6)


def test_procstat_reads_this_process() -> None:
    u = usage(os.getpid())
    assert u.procs >= 1 and u.rss_kib > 0 and u.hwm_kib >= u.rss_kib and u.cpu_s > 0


def test_procstat_reads_user_and_system_time_apart() -> None:
    user0, sys0 = user_sys_s(os.getpid())
    deadline = time.perf_counter() + 0.1  # a clock read without a system call (the vDSO's)
    while time.perf_counter() < deadline:  # spend user time, which the tick-granular counter then shows
        sum(range(10_000))
    user1, sys1 = user_sys_s(os.getpid())
    assert user1 > user0 and sys1 >= sys0 >= 0


def test_fixed_cost_splits_a_request_into_its_fixed_part_and_its_chunks() -> None:
    assert split((1, 0.30), (51, 0.40)) == pytest.approx((0.298, 0.002))
    with pytest.raises(ValueError):
        split((5, 0.3), (5, 0.4))
    tallies = {(name, n): Tally(user_s=u, sys_s=0.5 * u, requests=1000) for name, n, u in
               (("nginx", 1, 0.01), ("nginx", 51, 0.03), ("gateway", 1, 0.2), ("gateway", 51, 0.3))}
    table = report(tallies, ["nginx", "gateway"], [1, 51])
    assert "| gateway | 1 | 0.2000 | 0.1000 | 0.3000 | 20.00x |" in table
    assert "| gateway | 0.2970 (0.1980, 0.0990) | 3.00 (2.00, 1.00) |" in table


async def test_loadgen_messages_against_fake_upstream() -> None:
    server = await start_upstream()
    port = server.sockets[0].getsockname()[1]
    try:
        spec = LoadSpec(url=f"http://127.0.0.1:{port}/v1/messages", concurrency=2, requests=4, ttft_ms=1,
                        chunks=6, chunk_chars=5, gap_ms=1, api="messages")
        result = await run_load(spec)
    finally:
        server.close()
        await server.wait_closed()
    assert result.errors == {} and result.ok == 4
    assert result.chunks_seen == 4 * (3 + 6 + 3)  # start, ping, block start; deltas; block stop, delta, stop


def test_messages_events_assemble_to_the_expected_text_at_any_split() -> None:
    data = b"".join(messages_events(3, 9, 6, "m"))
    for cut in range(0, len(data), 37):
        parser = _MessagesText()
        parser.feed(data[:cut])
        parser.feed(data[cut:])
        assert parser.done and not parser.error
        assert "".join(parser.parts) == expected_text(3, 9, 6)


def test_the_big_event_bench_feeds_every_core_to_the_end() -> None:
    """`bench.bench_sse_reads` runs (no timing here: it asserts each core wrote the big event out)."""
    size = 20_000
    big = chat_body(size)[1]
    assert decoder_feed(big, 1024) == 1
    for name, run in cases_for(size).items():
        for read in READS:
            assert run(big, read) > 0, name


def test_nospace_text_has_no_whitespace_and_assembles() -> None:
    from bench.textgen import pieces

    parts = pieces(5, 200, 8, nospace=True)
    assert len(parts) == 200 and all(len(p) == 8 for p in parts)
    assert not any(ch.isspace() for ch in "".join(parts))
    data = b"".join(stream_events(5, 200, 8, "m", True, nospace=True))
    parser = _SSEText()
    parser.feed(data)
    assert parser.done and "".join(parser.parts) == expected_text(5, 200, 8, nospace=True)


async def test_the_fake_upstreams_faults_fail_only_its_fail_prefix_while_armed() -> None:
    import aiohttp

    from bench import upstream

    server = await start_upstream()
    base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    body = {"model": "m", "stream": True, "messages": [], "bench": {"chunks": 2}}
    try:
        async with aiohttp.ClientSession() as session:
            async def status(path: str) -> int:
                async with session.post(base + path, json=body) as r:
                    await r.read()
                    return r.status

            assert await status("/fail/v1/chat/completions") == 200
            assert await status("/faults/arm") == 200
            assert await status("/fail/v1/chat/completions") == 503
            assert await status("/v1/chat/completions") == 200
            assert await status("/faults/disarm") == 200
            assert await status("/fail/v1/chat/completions") == 200
    finally:
        upstream._FAULTS["armed"] = False
        server.close()
        await server.wait_closed()


async def test_the_loop_lag_probe_writes_ticks_that_samples_reads_back(tmp_path: Path) -> None:
    from bench.loop_lag import FLUSH_EVERY, Probe, samples

    flushed = asyncio.Event()
    t0 = time.time() - 1.0  # the probe writes times to the ms: a tick in the first ms may read as before t0
    probe = Probe(asyncio.get_running_loop(), str(tmp_path / "lag"), on_flush=flushed.set)
    probe.start()
    await asyncio.wait_for(flushed.wait(), 30)
    probe.close()
    got = samples(tmp_path / "lag", t0, time.time() + 1.0)  # the last tick's time may round up past now
    assert len(got) == FLUSH_EVERY
    assert all(0 <= own <= late for late, own in got)
    assert samples(tmp_path / "lag", 0, t0 - 1) == []


def test_bedrock_bench_cases_relay_the_whole_answer() -> None:
    """Every case of bench.bench_bedrock runs and writes the answer (no timing)."""
    from bench.bench_bedrock import cases

    outs = {name: fn() for name, fn in cases(50).items()}
    assert all(n > 0 for n in outs.values())
    assert outs["messages, SSE (anthropic)"] > 50 * len(" word")


async def test_the_hostile_clients_bodies_are_within_the_limits_and_get_answered() -> None:
    import orjson

    from bench.hostile import BODY_BYTES, Target, body_of, exchange

    for kind in ("bigstring", "deep"):
        body = body_of(kind)
        assert len(body) <= BODY_BYTES and orjson.loads(body)["stream"] is True
    server = await start_upstream()
    port = server.sockets[0].getsockname()[1]
    try:  # the fake upstream stands in for the gateway: the client reads a whole stream, then a 404
        assert await exchange(Target.of(f"http://127.0.0.1:{port}/v1/chat/completions"), body_of("nospace")) == "200"
        assert await exchange(Target.of(f"http://127.0.0.1:{port}/nowhere"), b"{}") == "404"
    finally:
        server.close()
        await server.wait_closed()


def test_the_report_says_how_its_interpreter_is_linked() -> None:
    """Read from the process's mappings; checked here against the dynamic loader's view of the binary."""
    needed = subprocess.run(["ldd", sys.executable], capture_output=True, text=True, check=True).stdout
    said = python_build()
    assert said.startswith(sys.executable)
    assert ("libpython shared" in said) == ("libpython" in needed)


def test_the_bench_config_takes_a_slice_and_its_base_copy_drops_it(tmp_path: Path) -> None:
    """`--sched-slice-us`: the gateway accepts the bench's config with the setting, and the `-base` target's
    copy is the same config without it (an older checkout may not know the key)."""
    plain = servers.gateway_config(8000, redaction=False)
    config = tmp_path / "gateway.yaml"
    config.write_text(servers.gateway_config(8000, redaction=False, sched_slice_us=250))
    assert "sched_slice_us: 250" in config.read_text()
    assert servers.check_config(config) == ""
    assert servers.without_slice(config, "gateway-base").read_text() == plain


@pytest.mark.parametrize("escapes", [False, True])
def test_the_ws_size_bench_counts_what_it_times_writing_out(escapes: bool) -> None:
    """`bench.ws_size` times the count and the write-out over the same conversation: both give its size."""
    assert per_turn_us(4, 50, escapes, True)[1] == per_turn_us(4, 50, escapes, False)[1] > 4 * 50


def test_the_log_line_bench_times_both_ways_on_both_chains_and_puts_logging_back() -> None:
    """`bench.log_line` measures four cells, then leaves stdout and structlog's configuration as it found them."""
    stdout, processors = sys.stdout, structlog.get_config()["processors"]
    figures = log_line_figures(50, 1)
    assert sorted(figures) == ["log.info, chain before", "log.info, chain now",
                               "write_info, chain before", "write_info, chain now"]
    assert all(len(runs) == 1 and runs[0] > 0 for runs in figures.values())
    assert sys.stdout is stdout and structlog.get_config()["processors"] is processors


async def test_the_redis_flap_bench_sees_redis_go_and_come_back() -> None:
    """`bench.redis_flap` against a real redis-server: its stalls send the backend local (operations pay
    the deadline) and it comes back to shared counting between them."""
    figures = await flap_figures(2.5, 0.3, 1.0)
    assert figures["ops"] > 50 and figures["switches_back"] >= 1 and figures["paid_deadline"] >= 1
