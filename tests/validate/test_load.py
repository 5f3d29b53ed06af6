"""run_load (validate/load.py) against the test engine: warm-ups judged, stalls bounded, counts exact."""

from __future__ import annotations

import asyncio
import time

import pytest

from validate.answers import AnswerRule
from validate.client import make_session
from validate.load import run_load

FAST = ("--engine-decode-base-ms", "1", "--engine-decode-per-req-ms", "0")
PROMPTS = [[i + 1] * 8 for i in range(6)]


def _load(url: str, **kw):
    said: list[str] = []

    async def go():
        async with make_session() as s:
            return await run_load(s, url + "/generate", PROMPTS, 20, label="t", progress=said.append, **kw)

    return asyncio.run(go()), said


def test_a_healthy_load_counts_what_was_streamed(engine_factory):
    eng = engine_factory(*FAST)
    lr, _ = _load(eng.url, deadline_s=20, warmup_requests=2, sampling={"temperature": 1.0, "top_p": 0.9})
    assert [r.success for r in lr.warmup] == [True, True] and [r.output_len for r in lr.warmup] == [20, 20]
    m = lr.metrics
    assert (m.completed, m.failed, m.total_input, m.total_output) == (6, 0, 48, 120)
    assert not lr.timed_out and lr.stalled == 0 and lr.deadline_s == 20
    assert all(r.claimed_tokens == 20 for r in lr.results)


def test_failed_warm_ups_are_kept_not_discarded(engine_factory):
    eng = engine_factory(*FAST, "--engine-fault", "sampled_error")
    lr, _ = _load(eng.url, deadline_s=20, warmup_requests=1, sampling={"temperature": 0.7})
    assert [r.failure for r in lr.warmup] == ["http_error"] and "sampling kernel" in lr.warmup[0].error
    assert lr.metrics.failure_reasons == {"http_error": 6}
    greedy, _ = _load(eng.url, deadline_s=20, warmup_requests=1)  # no sampling given: greedy, which works
    assert greedy.warmup[0].success and greedy.metrics.completed == 6


def test_a_stall_in_the_warm_up_ends_the_load_after_one_deadline(engine_factory):
    eng = engine_factory(*FAST, "--engine-fault", "stall_after:3")
    t0 = time.monotonic()
    lr, _ = _load(eng.url, deadline_s=1.5, warmup_requests=1)
    assert time.monotonic() - t0 < 1.5 + 2
    assert [r.failure for r in lr.warmup] == ["timeout"]
    assert lr.warmup[0].error == "warm-up: no complete answer within the 1.5s deadline"
    assert lr.timed_out and lr.stalled == 6 and lr.metrics.completed == 0
    assert {r.error for r in lr.results} == {"not sent: the warm-up requests did not finish within the deadline"}


def test_a_stall_in_the_run_counts_the_open_requests(engine_factory):
    eng = engine_factory(*FAST, "--engine-fault", "stall_after:3")
    t0 = time.monotonic()
    lr, said = _load(eng.url, deadline_s=1.5, progress_interval_s=0.5)
    took = time.monotonic() - t0
    assert 1.5 <= took < 1.5 + 2
    assert lr.timed_out and lr.stalled == 6 and lr.metrics.failure_reasons == {"timeout": 6}
    assert {r.error for r in lr.results} == {"no complete answer within the 1.5s deadline"}
    assert any(line.startswith("t: 0/6 done, 0 failed, ") and line.endswith("s of 1.5s") for line in said)


def test_degenerate_answers_fail_under_load_only_with_a_rule(engine_factory):
    eng = engine_factory(*FAST, "--engine-fault", "degenerate")
    judged, _ = _load(eng.url, deadline_s=20, rule=AnswerRule(16, 0.5))
    assert judged.metrics.failure_reasons == {"degenerate": 6} and judged.metrics.total_output == 0
    blind, _ = _load(eng.url, deadline_s=20)
    assert blind.metrics.completed == 6  # the old gate's view


@pytest.mark.parametrize("rate", [float("inf"), 200.0])
def test_max_concurrency_and_rate_still_finish_every_request(engine_factory, rate):
    eng = engine_factory(*FAST)
    lr, _ = _load(eng.url, deadline_s=20, max_concurrency=2, request_rate=rate, seed=3)
    assert lr.metrics.completed == 6 and lr.metrics.max_concurrent_requests <= 6
