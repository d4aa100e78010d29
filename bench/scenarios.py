"""The benchmark scenarios (issue "Performance") and the targets each measures.

Targets: `direct` (the load generator straight to the fake upstream: the TTFT baseline and the ceiling
of client + upstream), `gateway` (redaction `secrets`+`pii` on when the redaction core exists),
`gateway-noredact`, `gateway-w2` (`--workers 2`, redaction as `gateway`) and `nginx` (a plain relay).
With `--tracing`, S1 and S2 also measure `gateway-traced` (every request traced at sampling 1.0, spans
exported to `bench/otlp_sink.py`) and `gateway-traced-down` (the same, with its collector down).
`gateway-faults` (S2f) is `gateway` with a first deployment that starts answering 503 half-way through
each round (`bench/upstream.py`'s faults), falling back to the plain one; each round in a fresh process,
so the first failure after start happens under load. Every gateway target runs under the loop-lag probe
(`bench/loop_lag.py`); each table shows the lag's p99 and max.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Scenario:
    key: str
    title: str
    targets: tuple[str, ...]
    concurrency: int
    chunks: int
    chunk_chars: int = 8
    ttft_ms: float = 0.0
    gap_ms: float = 0.0
    tail_ms: float = 0.0
    words: bool = False  # deltas split as tokenizers do (" word"), not in fixed-size slices
    nospace: bool = False  # text without any whitespace (bench/textgen.py)
    requests: int = 0  # per round; 0: bounded by duration_s
    duration_s: float = 0.0
    ramp_s: float = 0.0
    rounds: int = 2
    fresh: bool = False  # measure each target in a freshly started process (memory scenarios)
    warmup: int = 64  # requests before measuring (pool, imports, caches), not counted
    api: str = "chat"  # "messages": Anthropic Messages requests, to the gateway's native `anthropic` model
    reload_every_s: float = 0.0  # >0: SIGHUP the gateway this often during each round (a config reload)
    faults_at: float = 0.0  # >0: the upstream's faults are armed this far into each round (0..1)
    hostile: str = ""  # a kind of bench/hostile.py's clients, sending beside the load in each round


FULL: tuple[Scenario, ...] = (
    Scenario("S1", "latency: 8 concurrent, TTFT 50 ms, 20 small chunks 5 ms apart",
             ("direct", "gateway", "gateway-noredact", "nginx"), concurrency=8, chunks=20, ttft_ms=50, gap_ms=5,
             requests=200, rounds=2, warmup=32),
    Scenario("S1w", "latency, word tokens: S1 with one word per delta, leading space (\" word\")",
             ("direct", "gateway", "gateway-noredact", "nginx"), concurrency=8, chunks=20, ttft_ms=50, gap_ms=5,
             words=True, requests=150, rounds=2, warmup=32),
    Scenario("S2", "throughput: 128 concurrent, 50 chunks, no delay",
             ("direct", "gateway", "gateway-noredact", "gateway-w2", "nginx"), concurrency=128, chunks=50,
             duration_s=4, rounds=6, warmup=256),  # 6 short rounds: the machine's speed drifts by 10-20% in seconds
    Scenario("S2r", "S2 with a SIGHUP config reload every 2 s", ("gateway",), concurrency=128, chunks=50,
             duration_s=8, rounds=2, warmup=256, reload_every_s=2.0),
    Scenario("S2f", "S2 with upstream failures starting mid-run (first deployment 503s from half-way, fallback)",
             ("gateway-faults",), concurrency=128, chunks=50, duration_s=8, rounds=2, warmup=256, fresh=True,
             faults_at=0.5),
    # S2 beside one kind of hostile client (bench/hostile.py), for the loop-lag probe: what one client's
    # input within the limits costs every other stream on the loop
    *(Scenario(key, f"S2 while a client sends {what}", ("gateway",), concurrency=128, chunks=50, duration_s=8,
               rounds=2, warmup=256, hostile=kind)
      for key, kind, what in (
          ("S2hb", "bigstring", "10 MiB bodies of one JSON string"),
          ("S2hd", "deep", "10 MiB bodies of arrays nested 120 deep"),
          ("S2hs", "slowloris", "request heads a byte every 0.5 s on 64 connections"),
          ("S2hn", "nospace", "stream requests answered with 1 MiB without whitespace (redaction on)"))),
    Scenario("S2t", "S2 with the chunked terminator 1 ms after [DONE], written on its own (as many servers do)",
             ("gateway", "nginx"), concurrency=128, chunks=50, tail_ms=1, duration_s=6, rounds=1, warmup=256),
    Scenario("S3", "long streams: 32 concurrent, 1000 chunks, no delay",
             ("direct", "gateway", "nginx"), concurrency=32, chunks=1000, duration_s=8, rounds=2, warmup=32),
    Scenario("S3n", "long streams without whitespace: S3 with the words glued together (no whitespace at all)",
             ("gateway", "gateway-noredact", "nginx"), concurrency=32, chunks=1000, duration_s=8, rounds=2,
             warmup=32, nospace=True),
    # the Messages API beside S2/S3: the same answers as Anthropic streams, native Anthropic->Anthropic
    Scenario("M2", "Messages API throughput: S2 as Anthropic Messages streams (native anthropic deployment)",
             ("direct", "gateway", "nginx"), concurrency=128, chunks=50, duration_s=4, rounds=4, warmup=256,
             api="messages"),
    Scenario("M3", "Messages API long streams: S3 as Anthropic Messages streams (native anthropic deployment)",
             ("direct", "gateway", "nginx"), concurrency=32, chunks=1000, duration_s=8, rounds=2, warmup=32,
             api="messages"),
    Scenario("S3p", "long streams, paced: 32 concurrent, 1000 chunks 1 ms apart (one chunk per read)",
             ("gateway", "nginx"), concurrency=32, chunks=1000, gap_ms=1, duration_s=6, rounds=2, warmup=32),
    # opened over 15 s (333 new streams/s: within the gateway's request rate on one core, so the TTFT
    # figures show holding streams, not a queue of new ones), each 20 s long: all open from 15 s to 20 s
    Scenario("S4", "many open streams: 5000 concurrent slow streams (20 chunks 1 s apart, opened over 15 s)",
             ("gateway", "nginx"), concurrency=5000, chunks=20, ttft_ms=100, gap_ms=1000, requests=5000,
             ramp_s=15, rounds=1, fresh=True, warmup=16),
)


def quick(s: Scenario) -> Scenario:
    """`--quick`: the same shapes, a few seconds each (a smoke run, not a measurement)."""
    if s.key == "S4":
        return replace(s, concurrency=300, requests=300, chunks=6, gap_ms=300, ramp_s=0.5, warmup=8)
    return replace(s, rounds=1, requests=min(s.requests, 40), duration_s=min(s.duration_s, 1.5),
                   warmup=min(s.warmup, 16), reload_every_s=min(s.reload_every_s, 0.5))


def select(keys: list[str] | None, is_quick: bool) -> list[Scenario]:
    chosen = [s for s in FULL if not keys or s.key in keys]
    return [quick(s) for s in chosen] if is_quick else chosen
