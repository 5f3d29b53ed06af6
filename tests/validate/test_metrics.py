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
