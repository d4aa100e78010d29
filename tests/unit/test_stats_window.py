"""The rolling window behind GET /admin/v1/stats (gateway/observe/stats_window.py): counts per model in
one-minute buckets, an hour at most, bounded samples, nearest-rank percentiles; the gateway's overhead
(docs/overhead.md) beside the time to first token."""

from __future__ import annotations

from gateway.observe.stats_window import BUCKET_S, MAX_MODELS, SAMPLES, RollingStats


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def test_counts_errors_and_percentiles_per_model() -> None:
    w = RollingStats(Clock(), seed=1)
    for i in range(1, 101):
        w.request("a", "ok" if i % 10 else "upstream_error")
        w.first_token("a", i / 1000)
    w.request("b", "client_error")  # the client's mistake is no gateway error
    w.request("b", "timeout")
    a, b = w.snapshot(3600)
    assert (a.model, a.requests, a.errors, a.error_rate) == ("a", 100, 10, 0.1)
    assert (a.ttft_p50_s, a.ttft_p95_s) == (0.05, 0.095)
    assert (b.model, b.requests, b.errors, b.ttft_p50_s) == ("b", 2, 1, None)


def test_old_minutes_leave_the_window_and_an_hour_old_bucket_is_reused() -> None:
    clock = Clock()
    w = RollingStats(clock)
    w.request("a", "ok")
    clock.t += 5 * BUCKET_S
    w.request("a", "ok")
    assert w.snapshot(3600)[0].requests == 2
    assert w.snapshot(60)[0].requests == 1  # this minute only
    clock.t += 56 * BUCKET_S  # the first minute is now over an hour old
    assert w.snapshot(3600)[0].requests == 1
    clock.t += 3600
    assert w.snapshot(3600) == []
    w.request("a", "ok")
    assert w.snapshot(3600)[0].requests == 1


def test_samples_and_models_are_bounded() -> None:
    w = RollingStats(Clock(), seed=2)
    for i in range(SAMPLES * 10):
        w.request("a", "ok")
        w.first_token("a", float(i))
    ring = w._models["a"]
    assert max(len(b.ttft) for b in ring if b is not None) == SAMPLES
    p50 = w.snapshot(60)[0].ttft_p50_s
    assert p50 is not None and SAMPLES < p50 < SAMPLES * 9  # a sample of the whole minute, not its start
    for i in range(MAX_MODELS + 10):
        w.request(f"m{i}", "ok")
    assert len(w._models) == MAX_MODELS


def test_overhead_p50_is_of_the_requests_that_measured_one() -> None:
    w = RollingStats(Clock(), seed=3)
    for i in range(1, 11):
        w.request("a", "ok")
        w.overhead("a", i / 10_000)  # a whole answer: an overhead, no streamed first token
    w.request("a", "upstream_error")  # a failure measures none, and weighs nothing in the p50
    w.request("hits", "ok")  # cache hits only: a first token, no overhead
    w.first_token("hits", 0.002)
    a, hits = w.snapshot(3600)
    assert (a.requests, a.ttft_p50_s, a.overhead_p50_s) == (11, None, 0.0005)
    assert (hits.ttft_p50_s, hits.overhead_p50_s) == (0.002, None)


def test_overhead_leaves_the_window_with_its_minute() -> None:
    clock = Clock()
    w = RollingStats(clock)
    w.request("a", "ok")
    w.overhead("a", 0.004)
    clock.t += 2 * BUCKET_S
    w.request("a", "ok")
    w.overhead("a", 0.001)
    assert w.snapshot(3600)[0].overhead_p50_s == 0.001  # nearest rank of two: the lower
    assert w.snapshot(60)[0].overhead_p50_s == 0.001
    w.request("a", "ok")
    clock.t += 2 * BUCKET_S
    w.request("a", "ok")
    assert w.snapshot(60)[0].overhead_p50_s is None  # this minute's request measured none


def test_overhead_samples_are_bounded_apart_from_the_first_tokens() -> None:
    w = RollingStats(Clock(), seed=4)
    w.request("a", "ok")
    w.first_token("a", 9.0)
    for i in range(SAMPLES * 10):
        w.overhead("a", float(i))
    [b] = [b for b in w._models["a"] if b is not None]
    assert (len(b.overhead), b.ttft, b.seen) == (SAMPLES, [9.0], 1)
    p50 = w.snapshot(60)[0].overhead_p50_s
    assert p50 is not None and SAMPLES < p50 < SAMPLES * 9  # a sample of the whole minute
