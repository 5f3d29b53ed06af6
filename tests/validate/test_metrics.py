"""Metric math against hand-computed values, following bench_serving's definitions."""

from __future__ import annotations

import pytest

from validate.load import random_ids
from validate.metrics import RequestResult, compute_metrics, peak_buckets


def _two_ok_one_failed() -> list[RequestResult]:
    r1 = RequestResult(
        success=True,
        prompt_len=10,
        output_len=4,
        start_time=100.0,
        ttft=0.1,
        itl=[0.05, 0.05, 0.1],
        latency=0.3,
        text_chars=8,
    )
    r2 = RequestResult(
        success=True,
        prompt_len=10,
        output_len=3,
        start_time=100.9,
        ttft=0.2,
        itl=[0.1, 0.1],
        latency=0.5,
        text_chars=6,
    )
    r3 = RequestResult(success=False, prompt_len=10, error="HTTP 500")
    return [r1, r2, r3]


def test_counts_and_throughputs_use_successful_requests_only():
    m = compute_metrics(_two_ok_one_failed(), duration_s=2.0)
    assert (m.completed, m.failed) == (2, 1)
    assert (m.total_input, m.total_output) == (20, 7)
    assert m.request_throughput == pytest.approx(1.0)
    assert m.input_throughput == pytest.approx(10.0)
    assert m.output_throughput == pytest.approx(3.5)
    assert m.total_throughput == pytest.approx(13.5)
    assert m.concurrency == pytest.approx((0.3 + 0.5) / 2.0)  # sum(E2E) / duration
    assert m.first_error == "HTTP 500"


def test_latency_stats_ms():
    m = compute_metrics(_two_ok_one_failed(), duration_s=2.0)
    # TTFT [0.1, 0.2]: mean 150 ms, median 150, p99 = 0.1 + 0.99 * 0.1 (linear interpolation)
    assert m.mean_ttft_ms == pytest.approx(150.0)
    assert m.median_ttft_ms == pytest.approx(150.0)
    assert m.p99_ttft_ms == pytest.approx(199.0)
    # ITL pooled over requests: [.05, .05, .1, .1, .1]
    assert m.mean_itl_ms == pytest.approx(80.0)
    assert m.median_itl_ms == pytest.approx(100.0)
    assert m.p99_itl_ms == pytest.approx(100.0)
    # TPOT = (E2E - TTFT) / (out - 1): r1 0.2/3, r2 0.3/2
    assert m.mean_tpot_ms == pytest.approx((0.2 / 3 + 0.15) / 2 * 1000)
    assert m.p99_tpot_ms == pytest.approx((0.2 / 3 + 0.99 * (0.15 - 0.2 / 3)) * 1000)
    assert m.mean_e2e_latency_ms == pytest.approx(400.0)
    assert m.p99_e2e_latency_ms == pytest.approx(498.0)


def test_peak_output_and_concurrency_in_one_second_buckets():
    # r1 tokens at 0.1, 0.15, 0.2, 0.3 -> bucket 0 (4); r2 starts 0.9: tokens 1.1, 1.2, 1.3 -> bucket 1 (3)
    # in flight: r1 covers second 0; r2 covers seconds 0..1 -> peak 2
    peak_tok, peak_conc = peak_buckets(_two_ok_one_failed())
    assert peak_tok == 4.0
    assert peak_conc == 2


def test_tpot_skips_single_token_outputs_and_empty_run_is_zero():
    one = RequestResult(success=True, prompt_len=5, output_len=1, start_time=0.0, ttft=0.2, latency=0.2, text_chars=1)
    m = compute_metrics([one], duration_s=1.0)
    assert m.mean_tpot_ms == 0.0 and m.mean_ttft_ms == pytest.approx(200.0)
    empty = compute_metrics([RequestResult(error="x")], duration_s=1.0)
    assert empty.completed == 0 and empty.mean_e2e_latency_ms == 0.0 and empty.total_throughput == 0.0


def test_nan_and_empty_outputs_are_counted():
    nan = RequestResult(
        success=True,
        output_len=1,
        text_chars=0,
        latency=0.1,
        finish_reason={"type": "stop", "matched": "NaN happened"},
    )
    empty = RequestResult(success=True, output_len=3, text_chars=0, latency=0.1)
    fine = RequestResult(success=True, output_len=3, text_chars=9, latency=0.1)
    assert compute_metrics([nan, empty, fine], 1.0).empty_or_nan_outputs == 2


def test_random_ids_have_exact_length_and_differ():
    ids = random_ids(num_prompts=3, input_len=7, vocab_size=100, seed=1)
    assert [len(x) for x in ids] == [7, 7, 7]
    assert all(0 <= t < 100 for row in ids for t in row)
    assert ids[0] != ids[1]
    assert ids == random_ids(3, 7, 100, 1)  # seeded


def test_every_remaining_field_of_a_known_run():
    m = compute_metrics(_two_ok_one_failed(), duration_s=2.0)
    assert m.duration_s == 2.0 and m.empty_or_nan_outputs == 0
    assert m.median_tpot_ms == pytest.approx((0.2 / 3 + 0.15) / 2 * 1000)
    assert m.median_e2e_latency_ms == pytest.approx(400.0)
    assert (m.max_output_tokens_per_s, m.max_concurrent_requests) == (4.0, 2)
    assert m.failure_reasons == {"unknown": 1}  # failed without a reason recorded
    d = m.to_dict()
    assert d["completed"] == 2 and d["failure_reasons"] == {"unknown": 1} and len(d) == 27


def test_zero_duration_gives_zero_rates_not_a_crash():
    m = compute_metrics(_two_ok_one_failed(), duration_s=0.0)
    assert (m.request_throughput, m.total_throughput, m.concurrency) == (0.0, 0.0, 0.0)
    assert m.duration_s == 0.0 and m.completed == 2


def test_failures_by_reason_most_frequent_first_and_errors_capped():
    from validate.metrics import FAILURE_REASONS, failure_histogram

    results = []
    for reason, n in (("short", 1), ("abort", 3), ("no_done", 2)):
        for _ in range(n):
            r = RequestResult()
            r.fail(reason, "x" * 900)
            results.append(r)
    assert list(failure_histogram(results).items()) == [("abort", 3), ("no_done", 2), ("short", 1)]
    assert results[0].error == "x" * 500 and results[0].failure == "short" and results[0].success is False
    m = compute_metrics(results, 1.0)
    assert m.first_error == "x" * 500 and m.failed == 6 and m.completed == 0
    assert set(FAILURE_REASONS) >= {"abort", "short", "no_done", "cut_stream", "timeout"}
    with pytest.raises(AssertionError):
        RequestResult().fail("not-a-reason", "x")


def test_peak_buckets_edges():
    assert peak_buckets([RequestResult(error="x")]) == (0.0, 0)
    # one request spanning 2.5 s from t=10: tokens at 10.5, 11.5, 12.4 -> one per bucket; in flight 3 buckets
    r = RequestResult(success=True, output_len=3, start_time=10.0, ttft=0.5, itl=[1.0, 0.9], latency=2.5, text_chars=3)
    r2 = RequestResult(success=True, output_len=2, start_time=11.2, ttft=0.1, itl=[0.05], latency=0.2, text_chars=2)
    tok, conc = peak_buckets([r, r2])
    assert (tok, conc) == (3.0, 2)  # bucket 1: r's 11.5 and r2's 11.3, 11.35


def test_aggregate_runs_takes_medians_and_sums_counts():
    from validate.metrics import Spread, aggregate_runs, key_metric_spreads

    runs = [compute_metrics(_two_ok_one_failed(), d) for d in (1.0, 2.0, 4.0)]
    runs[1].first_error = ""
    runs[0].first_error = ""
    agg = aggregate_runs(runs)
    assert agg["completed"] == 6 and agg["failed"] == 3 and agg["total_output"] == 21
    assert agg["total_throughput"] == pytest.approx(13.5)  # median of 27, 13.5, 6.75
    assert agg["duration_s"] == 2.0 and agg["failure_reasons"] == {"unknown": 3}
    assert agg["first_error"] == "HTTP 500"  # the first run that has one
    spreads = key_metric_spreads(runs)
    assert set(spreads) == {
        "total_token_throughput",
        "output_token_throughput",
        "request_throughput",
        "p99_ttft_ms",
        "p99_e2e_latency_ms",
        "mean_e2e_latency_ms",
    }
    t = spreads["total_token_throughput"]
    assert (t.median, t.min, t.max) == (13.5, 6.75, 27.0) and t.spread == pytest.approx((27 - 6.75) / 13.5)
    assert Spread.of([0.0, 0.0]).spread is None and Spread.of([2.0]).spread == 0.0
