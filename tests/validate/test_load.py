"""run_load (validate/load.py) against the test engine: warm-ups judged, stalls bounded, counts exact."""

from __future__ import annotations

import asyncio
import time

import pytest

from validate.checks import AnswerRule
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


def test_prompts_follow_bench_serving_random_ids():
    import numpy as np

    from validate.load import random_ids

    ids = random_ids(4, 5, 50, seed=1)
    offsets = np.random.default_rng(1).integers(0, 50, size=4)  # bench_serving: offset_i, then i + j
    assert ids == [[(int(offsets[i]) + i + j) % 50 for j in range(5)] for i in range(4)]
    assert all(len(row) == 5 and all(0 <= t < 50 for t in row) for row in ids)


def test_progress_counts_what_finished_and_what_failed(engine_factory):
    # error_rate 0.5 (seeded): some requests fail at once, the rest stall until the deadline
    eng = engine_factory(*FAST, "--engine-fault", "error_rate:0.5,stall_after:3")
    lr, said = _load(eng.url, deadline_s=1.5, progress_interval_s=0.4)
    failed = lr.metrics.failure_reasons["http_error"]
    assert 2 <= failed <= 4 and lr.metrics.failure_reasons["timeout"] == 6 - failed
    ticks = [line.split(", ")[:2] for line in said]
    assert ticks and all(t == [f"t: {failed}/6 done", f"{failed} failed"] for t in ticks[1:])


def test_progress_counts_successes_as_done_not_failed(engine_factory):
    # three at a time, ~0.6 s each: the ticks between the two waves see three done, none failed
    eng = engine_factory("--engine-decode-base-ms", "30", "--engine-decode-per-req-ms", "0")
    lr, said = _load(eng.url, deadline_s=20, max_concurrency=3, progress_interval_s=0.1)
    assert lr.metrics.completed == 6
    counts = [(int(line.split("/")[0].removeprefix("t: ")), line.split(", ")[1]) for line in said]
    assert all(f == "0 failed" for _, f in counts) and any(0 < d < 6 for d, _ in counts)
    assert [d for d, _ in counts] == sorted(d for d, _ in counts)


def test_the_warm_up_is_short_judged_and_a_stalled_one_keeps_its_figures(engine_factory):
    async def go(url, **kw):
        async with make_session() as s:
            return await run_load(s, url + "/generate", PROMPTS, 40, label="t", **kw)

    eng = engine_factory(*FAST)
    lr = asyncio.run(go(eng.url, deadline_s=20, warmup_requests=1))
    assert [(r.success, r.prompt_len, r.output_len) for r in lr.warmup] == [(True, 8, 32)]  # at most 32 tokens
    bad = engine_factory(*FAST, "--engine-fault", "degenerate")
    lr = asyncio.run(go(bad.url, deadline_s=20, warmup_requests=1, max_concurrency=2, rule=AnswerRule(16, 0.5)))
    assert [r.failure for r in lr.warmup] == ["degenerate"] and lr.metrics.failure_reasons == {"degenerate": 6}
    stall = engine_factory(*FAST, "--engine-fault", "stall_after:3")
    lr = asyncio.run(go(stall.url, deadline_s=1.0, warmup_requests=1))
    assert [(r.failure, r.prompt_len) for r in lr.warmup] == [("timeout", 8)]
    assert [r.prompt_len for r in lr.results] == [8] * 6 and lr.deadline_s == 1.0
    assert lr.metrics.duration_s == 0.0 and lr.metrics.completed == 0


def _phase(url: str, cfg: dict, stable) -> tuple[object, list[str]]:
    from validate.config import parse_config
    from validate.phases import Measurer

    said: list[str] = []

    async def go():
        async with make_session() as s:
            return await Measurer(s, url, parse_config(cfg), said.append).throughput(None, stable)

    return asyncio.run(go()), said


def test_the_throughput_phase_says_what_it_runs_and_repeats_while_runs_disagree(engine_factory):
    eng = engine_factory(*FAST)
    shape = {
        "num_prompts": 4,
        "input_len": 8,
        "output_len": 5,
        "warmup_requests": 0,
        "flush_cache": True,
        "timeout_s": 60,
    }
    tp, said = _phase(eng.url, {"throughput": {**shape, "repeats": 2, "max_repeats": 4}}, lambda runs: len(runs) >= 3)
    assert len(tp.runs) == 3 and tp.flushes == ["ok", "ok", "ok"] and tp.deadline_s == 60.0
    what = "4 prompts x 8 in / 5 out tokens, all at once, streaming /generate"
    assert [line for line in said if " prompts x " in line] == [
        f"throughput run 1/2: {what}",
        f"throughput run 2/2: {what}",
        f"throughput run 3/4 (more runs: the first disagreed): {what}",
    ]
    assert [line.split(" in ")[0] for line in said if " ok / " in line] == [
        "throughput run 1/2: 4 ok / 0 failed",
        "throughput run 2/2: 4 ok / 0 failed",
        "throughput run 3/4: 4 ok / 0 failed",
    ]
    # runs that never agree stop at max_repeats; a finite rate is named
    tp, said = _phase(
        eng.url, {"throughput": {**shape, "repeats": 1, "max_repeats": 2, "request_rate": 50}}, lambda runs: False
    )
    assert len(tp.runs) == 2
    assert said[0] == "throughput run 1/1: 4 prompts x 8 in / 5 out tokens, 50 req/s, streaming /generate"


def test_a_stability_step_sends_its_requests_at_its_concurrency_and_probes_health(engine_factory):
    from validate.config import parse_config
    from validate.phases import Measurer

    eng = engine_factory(*FAST)
    said: list[str] = []
    cfg = parse_config({"stability": {"requests_per_step": 6, "input_len": 16, "output_len": 8, "step_timeout_s": 30}})

    async def go():
        async with make_session() as s:
            return await Measurer(s, eng.url, cfg, said.append).stability_step(2, 3, 3, None)

    st = asyncio.run(go())
    assert (st.step, st.of, st.concurrency, st.requests) == (2, 3, 3, 6)
    m = st.load.metrics
    assert (m.completed, m.total_input, m.total_output) == (6, 96, 48)
    assert st.health.healthy and st.health.when == "after stability step 2/3 (concurrency 3)"
    assert said[0] == "stability step 2/3 (concurrency 3): 6 requests, 16/8 tokens"
    assert st.load.deadline_s == 30
