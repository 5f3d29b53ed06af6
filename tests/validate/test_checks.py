"""Each verdict rule alone, on hand-built measurements: values, not only names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from validate import checks as judge
from validate.config import parse_config
from validate.load import LoadResult
from validate.metrics import RequestResult, Spread, compute_metrics
from validate.phases import Health, Identity, Readiness, SingleStream, StabilityStep, Throughput, Warmup


def _ok(start: float, latency: float, out: int = 4, ttft: float = 0.1) -> RequestResult:
    gap = (latency - ttft) / (out - 1)
    return RequestResult(
        success=True,
        prompt_len=10,
        output_len=out,
        start_time=start,
        latency=latency,
        ttft=ttft,
        itl=[gap] * (out - 1),
        text_chars=8,
    )


def _bad(reason: str, error: str = "x") -> RequestResult:
    r = RequestResult(prompt_len=10)
    r.fail(reason, error)
    return r


def _run(n_ok: int, duration: float, bad: list[RequestResult] | None = None) -> LoadResult:
    results = [_ok(i * 0.01, 1.0) for i in range(n_ok)] + (bad or [])
    return LoadResult(results, compute_metrics(results, duration), False, 30.0)


CFG = parse_config({"throughput": {"min_total_tok_s": 100, "max_spread": 0.1}, "baseline": {"tolerance": 0.9}})


def test_floors_compare_the_median_of_the_runs():
    # total tok/s per run: 14*10/d -> d=1.0: 140, d=1.4: 100, d=0.7: 200 => median 140
    tp = Throughput([_run(10, 1.0), _run(10, 1.4), _run(10, 0.7)], 30.0)
    assert tp.median["total_throughput"] == pytest.approx(140.0)
    assert tp.median["completed"] == 30 and tp.median["total_output"] == 120
    c = {x.name: x for x in judge.throughput(tp, CFG)}
    assert c["throughput.total_tok_s"].passed and c["throughput.total_tok_s"].measured == pytest.approx(140.0)
    assert "(median of 3 runs)" in c["throughput.total_tok_s"].message
    # spread = (200 - 100) / 140 over the gated metric total_token_throughput
    s = c["throughput.spread"]
    assert not s.passed and s.measured == pytest.approx(100 / 140, abs=1e-4) and s.required == 0.1
    assert s.message.startswith("FAILED unstable measurement:") and "total_token_throughput spread 71.4%" in s.message


def test_a_stable_measurement_passes_the_spread_check_at_its_limit():
    tp = Throughput([_run(10, 1.0), _run(10, 1.0), _run(10, 1.0)], 30.0)
    s = judge.spread(tp, CFG)
    assert s is not None and s.passed and s.measured == 0.0
    assert judge.spread(Throughput([_run(10, 1.0)], 30.0), CFG) is None  # one run: nothing to compare


H100 = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h100-2026-12-05" / "healthy_gates.json"


def totals_of_gate(i: int) -> list[float]:
    return [r["total_throughput"] for r in json.loads(H100.read_text())["gates"][i - 1]["throughput_runs"]]


def _runs_at(totals: list[float]) -> Throughput:
    """Runs whose total tok/s are ``totals`` (14 tokens per request, 10 requests: 140 / duration)."""
    return Throughput([_run(10, 140.0 / t) for t in totals], 30.0)


def test_runs_that_scatter_pass_when_their_median_is_known_within_max_noise():
    # healthy gate 3 on the idle H100 (8 B model): 7 runs, bimodal 24k / 30k total tok/s
    gate = json.loads(H100.read_text())["gates"][2]
    totals = totals_of_gate(3)
    assert len(totals) == 7 and gate["failed_checks"] == ["throughput.spread"]  # the old rule failed it
    tp = _runs_at(totals)
    s = judge.spread(tp, CFG)
    assert s is not None and s.passed
    assert s.measured == pytest.approx(0.0478, abs=2e-4) and s.required == 0.05  # judged on the median's error
    assert "output_token_throughput spread of the middle half 14.8%" in s.message
    assert "standard error 4.8%, within max_noise 5%" in s.message
    tighter = parse_config({"throughput": {"min_total_tok_s": 100, "max_spread": 0.1, "max_noise": 0.04}})
    s = judge.spread(tp, tighter)
    assert not s.passed and s.measured == pytest.approx(0.148, abs=1e-3) and s.required == 0.1
    assert s.message.startswith("FAILED unstable measurement:") and "above max_noise 4%" in s.message


def test_the_median_rule_needs_four_runs_and_fails_runs_that_really_scatter():
    wide = parse_config({"throughput": {"min_total_tok_s": 100, "max_spread": 0.1, "max_noise": 0.06}})
    first = [24_700.0, 30_200.0, 27_900.0, 30_200.0]  # gate 3's first four runs: middle half 10.7 %, error 5.6 %
    s = judge.spread(_runs_at(first), wide)
    assert s.passed and s.measured == pytest.approx(0.0562, abs=2e-4)
    s = judge.spread(_runs_at(first[:3]), parse_config({"throughput": {"max_spread": 0.1, "max_noise": 0.5}}))
    assert not s.passed and s.measured == pytest.approx(5_500 / 27_900, abs=1e-3)  # 3 runs: the range is judged
    throttling = [30_000.0, 15_000.0] * 3 + [30_000.0]  # a card that halves every other run
    s = judge.spread(_runs_at(throttling), CFG)
    assert not s.passed and "standard error 12.7%, above max_noise 5%" in s.message
    assert not judge.spread_settled(_runs_at(throttling).runs, CFG)
    assert judge.spread_settled(_runs_at(totals_of_gate(3)).runs, CFG)


def test_failed_requests_message_carries_the_histogram():
    bad = [_bad("abort", "aborted by the server: The request queue is full. (status 503)")] * 3 + [_bad("short")]
    tp = Throughput([_run(4, 1.0, bad)], 30.0)
    c = {x.name: x for x in judge.throughput(tp, CFG)}["throughput.failed_requests"]
    assert not c.passed and c.measured == 4 and c.required == 0
    assert "4 of 8 requests failed (allowed 0); by reason: abort x3, short x1" in c.message
    assert "first error: aborted by the server: The request queue is full." in c.message
    allowed = parse_config({"throughput": {"max_failed": 4}})
    assert {x.name: x for x in judge.throughput(tp, allowed)}["throughput.failed_requests"].passed


def test_latency_ceiling_fails_when_nothing_completed():
    cfg = parse_config({"throughput": {"max_p99_ttft_ms": 5000}})
    tp = Throughput([_run(0, 1.0, [_bad("abort")])], 30.0)
    c = {x.name: x for x in judge.throughput(tp, cfg)}["throughput.p99_ttft_ms"]
    assert not c.passed and c.measured is None


def test_threshold_floor_and_ceiling_edges():
    assert judge.threshold("a", 10.0, 10.0, ">=", "tok/s", "x").passed
    assert not judge.threshold("a", 9.99, 10.0, ">=", "tok/s", "x").passed
    assert judge.threshold("b", 10.0, 10.0, "<=", "ms", "y").passed
    assert not judge.threshold("b", 10.01, 10.0, "<=", "ms", "y").passed
    assert judge.threshold("c", 1.0, None, ">=", "", "z") is None


def test_single_stream_failure_and_decode_speed():
    fail = _bad("error_event", "server error in stream: boom")
    [c] = judge.single_stream(SingleStream([fail], 10), parse_config({}))
    assert c.name == "single_stream.request" and not c.passed and "(error_event)" in c.message
    # 11 tokens, TTFT 0.5 s, E2E 1.5 s -> 10 tokens in 1 s
    ok = RequestResult(success=True, output_len=11, ttft=0.5, latency=1.5, text_chars=5)
    ss = SingleStream([ok], 10)
    assert ss.decode_tok_s == pytest.approx(10.0)
    cs = judge.single_stream(ss, parse_config({"single_stream": {"min_decode_tok_s": 30, "max_ttft_ms": 400}}))
    assert [(c.name, c.passed, c.measured) for c in cs] == [
        ("single_stream.decode_tok_s", False, 10.0),
        ("single_stream.ttft_ms", False, 500.0),
    ]


def test_stability_step_dead_server_and_refusal():
    cfg = parse_config({"stability": {"max_failed": 0}})
    lr = _run(3, 1.0, [_bad("cut_stream", "server closed the stream mid-response")])
    dead = StabilityStep(2, 3, 32, 4, load=lr, health=Health("after", False, "cannot connect", 5))
    c = judge.stability_step(dead, cfg)
    assert c.name == "stability.concurrency_32" and not c.passed and c.measured == 1
    assert "step 2/3 (concurrency 32)" in c.message and "died or wedged" in c.message and "cut_stream x1" in c.message
    alive = StabilityStep(1, 3, 16, 3, load=_run(3, 1.0), health=Health("after", True, "", 5))
    assert judge.stability_step(alive, cfg).passed
    refused = StabilityStep(3, 3, 1024, 1024, refused="needs 1088 open files")
    r = judge.stability_step(refused, cfg)
    assert not r.passed and "refused: needs 1088 open files" in r.message


def test_output_check_counts_nan_and_empty_among_finished_requests():
    nan = _bad("nan")
    nan.finish_reason = {"type": "stop", "matched": "NaN happened"}
    empty = RequestResult(success=True, output_len=3, text_chars=0)
    c = judge.output([nan, empty, _ok(0, 1), _bad("abort")])
    assert c is not None and not c.passed and c.measured == 2 and "2 of 3 finished requests" in c.message
    assert judge.output([_bad("abort")]) is None


def test_baseline_rule_math():
    ref = {"total_token_throughput": 1000.0, "p99_ttft_ms": 100.0}
    cfg = parse_config({"baseline": {"tolerance": 0.9, "metrics": ["total_token_throughput", "p99_ttft_ms"]}})
    ok = judge.baseline(ref, {"total_token_throughput": 900.0, "p99_ttft_ms": 111.1}, cfg)
    assert [(c.name, c.passed, c.required) for c in ok] == [
        ("baseline.total_token_throughput", True, 900.0),
        ("baseline.p99_ttft_ms", True, pytest.approx(111.111, abs=1e-3)),
    ]
    bad = judge.baseline(ref, {"total_token_throughput": 899.0, "p99_ttft_ms": 111.2}, cfg)
    assert [c.passed for c in bad] == [False, False] and bad[0].message.startswith("FAILED regression:")
    assert judge.baseline(ref, {"total_token_throughput": None}, cfg) == []


def test_readiness_health_and_verdict():
    assert judge.readiness(Readiness(True, 3.2), 30).passed
    r = judge.readiness(Readiness(False, 30, "/health: HTTP 503"), 30)
    assert not r.passed and "not ready within 30s" in r.message and "HTTP 503" in r.message
    assert judge.health("x", Health("after", True, "", 5)) is None
    h = judge.health("throughput", Health("after the throughput phase", False, "no answer within 5s", 5))
    assert h is not None and h.name == "throughput.server_healthy_after" and not h.passed
    assert judge.verdict([]) == "fail" and judge.verdict([r]) == "fail"
    assert judge.verdict([judge.readiness(Readiness(True, 1), 9)]) == "pass"


def _lat_run(latency: float, duration: float) -> LoadResult:
    results = [_ok(i * 0.01, latency) for i in range(10)]
    return LoadResult(results, compute_metrics(results, duration), False, 30.0)


def test_spread_is_judged_on_the_compared_metrics_only_and_names_the_worst():
    # two runs: throughput 140 vs 100 (spread 1/3), p99 E2E 1000 ms vs 1500 ms (spread 0.4)
    tp = Throughput([_lat_run(1.0, 1.0), _lat_run(1.5, 1.4)], 30.0)
    e2e_vs_baseline = parse_config(
        {"throughput": {"max_spread": 0.35}, "baseline": {"metrics": ["p99_e2e_latency_ms"]}}
    )
    s = judge.spread(tp, e2e_vs_baseline)
    assert s is not None and not s.passed and "p99_e2e_latency_ms spread 40.0%" in s.message
    only_tput = parse_config({"throughput": {"max_spread": 0.35}, "baseline": {"metrics": ["total_token_throughput"]}})
    s = judge.spread(tp, only_tput)
    assert s is not None and s.passed and s.measured == pytest.approx(40 / 120, abs=1e-4)
    both = parse_config(
        {
            "throughput": {"min_total_tok_s": 1},
            "baseline": {"metrics": ["output_token_throughput", "p99_e2e_latency_ms"]},
        }
    )
    assert "p99_e2e_latency_ms" in judge.spread(tp, both).message  # the worst of the compared metrics
    # a latency ceiling alone is absolute: its spread is reported, not judged
    ceiling = parse_config(
        {"throughput": {"max_p99_e2e_ms": 5000, "max_p99_ttft_ms": 100}, "baseline": {"metrics": []}}
    )
    assert judge.spread(tp, ceiling) is None
    nothing = parse_config({"baseline": {"metrics": ["single_stream_decode_tok_s"]}})
    assert judge.spread(tp, nothing) is None  # no load metric compared: nothing to be unstable
    assert tp.spreads["p99_e2e_latency_ms"].spread == pytest.approx(0.4)  # still reported


def test_threshold_checks_carry_every_field():
    C = judge.Check
    assert judge.threshold("t.total", 123.4567, 100.0, ">=", "tok/s", "total") == C(
        "t.total", True, 123.457, 100.0, "tok/s", "total: 123.5 tok/s (required at least 100.0 tok/s)", ">="
    )
    assert judge.threshold("t.p99", 12.0, 10.0, "<=", "ms", "p99") == C(
        "t.p99", False, 12.0, 10.0, "ms", "FAILED p99: 12.0 ms (required at most 10.0 ms)", "<="
    )
    assert judge.threshold("t.p99", None, 10.0, "<=", "ms", "p99") == C(
        "t.p99", False, None, 10.0, "ms", "FAILED p99: not measured, no request completed", "<="
    )
    assert judge.fmt(0.123456) == "0.123" and judge.fmt(1234.56) == "1,234.6" and judge.fmt(7) == "7"


def test_logs_check_values_for_clean_unreadable_and_matching_logs():
    from validate.logscan import LogMatch, LogScanResult

    clean = judge.logs(LogScanResult(files=["a.log", "b.log"], lines_scanned=1234))
    assert clean == judge.Check(
        "logs.crash_signatures", True, 0, 0, "matches", "no crash signature in 2 log file(s) (1,234 lines)", "<="
    )
    broken = judge.logs(LogScanResult(files=["a.log"], errors=["a.log: Permission denied"]))
    assert (broken.passed, broken.measured, broken.message) == (
        False,
        None,
        "FAILED cannot read log: a.log: Permission denied",
    )
    m = LogMatch("oom", "a.log", 7, "torch.OutOfMemoryError: CUDA out of memory.", [])
    g = LogMatch("scheduler_exception", "a.log", 5, "Scheduler hit an exception", [])
    hit = judge.logs(LogScanResult(files=["a.log"], matches=[g, m], counts={"scheduler_exception": 1, "oom": 2}))
    assert (hit.passed, hit.measured, hit.required, hit.op) == (False, 3, 0, "<=")
    assert hit.message == (
        "FAILED crash signature 'oom' in a.log:7: torch.OutOfMemoryError: CUDA out of memory. "
        "(all: scheduler_exception x1, oom x2)"
    )


def test_every_throughput_check_has_its_name_value_limit_and_unit():
    cfg = parse_config(
        {
            "throughput": {
                "min_total_tok_s": 150,
                "min_output_tok_s": 50,
                "max_p99_ttft_ms": 90,
                "max_p99_e2e_ms": 999,
                "max_mean_e2e_ms": 1001,
                "max_spread": 0.5,
            },
            "baseline": {"metrics": []},
        }
    )
    tp = Throughput([_run(10, 1.0)], 30.0)  # 10 x (10 in + 4 out) in 1 s; TTFT 100 ms, E2E 1000 ms
    got = [(c.name, c.passed, c.measured, c.required, c.unit, c.op) for c in judge.throughput(tp, cfg)]
    assert got == [
        ("throughput.failed_requests", True, 0, 0, "requests", "<="),
        ("throughput.total_tok_s", False, 140.0, 150, "tok/s", ">="),
        ("throughput.output_tok_s", False, 40.0, 50, "tok/s", ">="),
        ("throughput.p99_ttft_ms", False, 100.0, 90, "ms", "<="),
        ("throughput.p99_e2e_ms", False, 1000.0, 999, "ms", "<="),
        ("throughput.mean_e2e_ms", True, 1000.0, 1001, "ms", "<="),
    ]
    msgs = [c.message for c in judge.throughput(tp, cfg)]
    assert msgs[1] == "FAILED total token throughput: 140.0 tok/s (required at least 150.0 tok/s)"
    assert msgs[3] == "FAILED p99 TTFT: 100.0 ms (required at most 90.0 ms)"
    assert msgs[5] == "mean E2E latency: 1,000.0 ms (required at most 1,001.0 ms)"
    assert judge.throughput(Throughput([], 30.0, refused="needs 1088 open files"), cfg)[0] == judge.Check(
        "throughput.open_files", False, None, None, "", "FAILED throughput refused: needs 1088 open files"
    )


def test_readiness_and_output_checks_exactly():
    assert judge.readiness(Readiness(True, 3.25), 30) == judge.Check(
        "readiness", True, 3.25, 30, "s", "server ready after 3.2s", "<="
    )
    assert judge.readiness(Readiness(False, 30, "/health: HTTP 503"), 30) == judge.Check(
        "readiness",
        False,
        None,
        30,
        "s",
        "FAILED server not ready within 30s (readiness.timeout_s); last: /health: HTTP 503",
        "<=",
    )
    empty = RequestResult(success=True, output_len=3, text_chars=0)
    c = judge.output([empty, _ok(0, 1)])
    assert c == judge.Check(
        "output.empty_or_nan",
        False,
        1,
        0,
        "requests",
        "FAILED 1 of 2 finished requests returned empty text or NaN; e.g. empty text",
        "<=",
    )
    assert judge.output([_ok(0, 1)]).message == "0 of 1 finished requests returned empty text or NaN"


def test_stability_step_messages_name_the_deadline_and_the_reasons():
    cfg = parse_config({"stability": {"max_failed": 0, "step_timeout_s": 20}})
    lr = _run(0, 20.0, [_bad("timeout", "no complete answer within the 20s deadline")] * 4)
    lr.timed_out = True
    st = StabilityStep(1, 2, 16, 4, load=lr, health=Health("after", True, "", 5))
    c = judge.stability_step(st, cfg)
    assert c.message == (
        "FAILED stability step 1/2 (concurrency 16): 4 of 4 requests failed (allowed 0) [timeout x4], none completed, "
        "20s step deadline hit; first error: no complete answer within the 20s deadline"
    )
    dead = StabilityStep(1, 2, 16, 4, load=lr, health=None)
    assert "/health after the step: not probed" in judge.stability_step(dead, cfg).message


def test_single_stream_repeats_report_the_median_and_the_first_failure():
    def lone(e2e: float) -> RequestResult:  # 11 tokens after a 0.5 s TTFT: 10 / (e2e - 0.5) tok/s
        return RequestResult(success=True, output_len=11, ttft=0.5, latency=e2e, text_chars=5)

    ss = SingleStream([lone(1.5), lone(0.75), lone(2.5)], 10)  # 10, 40 and 5 tok/s
    assert ss.decode_tok_s == pytest.approx(10.0) and ss.request.latency == 1.5
    d = ss.to_dict()
    assert d["repeats"] == 3 and d["decode_tok_s_runs"] == [10.0, 40.0, 5.0] and d["decode_tok_s"] == 10.0
    assert d["noise"] == pytest.approx(1.2533 * float(np.std([10, 40, 5], ddof=1)) / 10 / 3**0.5)
    broken = SingleStream([lone(1.5), _bad("timeout", "late")], 10)
    assert broken.request.failure == "timeout" and broken.decode_tok_s == 0.0 and broken.spread is None


@pytest.mark.parametrize(
    ("ref_noise", "now_noise", "drop", "why"),
    [
        (None, None, 0.05, "allowed drop 5.0%: 1 - tolerance"),
        (0.01, 0.01, 0.05, "allowed drop 5.0%: 1 - tolerance"),  # 2 x 1.4 % is below the floor
        (0.03, 0.04, 0.10, "allowed drop 10.0%: 2 x measured noise 5.0%, at most 15%"),
        (0.09, 0.12, 0.15, "allowed drop 15.0%: 2 x measured noise 15.0%, at most 15%"),  # capped
    ],
)
def test_the_allowed_drop_follows_the_measured_noise_up_to_max_drop(ref_noise, now_noise, drop, why):
    got, text = judge.allowed_drop(parse_config({}), ref_noise, now_noise)
    assert got == pytest.approx(drop) and text == why


def test_a_noisy_healthy_median_passes_and_a_slower_one_fails_against_the_same_reference():
    """Figures of one idle H200 (docs/real-sglang-h200.md): reference 46,883 tok/s (noise 0.9 %)."""
    cfg = parse_config({"baseline": {"metrics": ["total_token_throughput"]}})
    ref, ref_noise = {"total_token_throughput": 46883.0}, {"total_token_throughput": 0.009}
    [ok] = judge.baseline(ref, {"total_token_throughput": 40502.0}, cfg, ref_noise, {"total_token_throughput": 0.082})
    assert ok.passed and ok.required == pytest.approx(46883 * 0.85, rel=1e-4)  # 2 x 8.3 % noise, capped at 15 %
    [slow] = judge.baseline(ref, {"total_token_throughput": 37000.0}, cfg, ref_noise, {"total_token_throughput": 0.082})
    assert not slow.passed and slow.message.startswith("FAILED regression: total_token_throughput: 37,000.0 tok/s")
    [quiet] = judge.baseline(ref, {"total_token_throughput": 43000.0}, cfg, ref_noise, {"total_token_throughput": 0.01})
    assert not quiet.passed and quiet.required == pytest.approx(46883 * 0.95, rel=1e-4)  # quiet runs: 5 % only
    lat_cfg = parse_config({"baseline": {"metrics": ["p99_ttft_ms"]}})
    [lat] = judge.baseline({"p99_ttft_ms": 100.0}, {"p99_ttft_ms": 110.0}, lat_cfg, {"p99_ttft_ms": 0.05}, {})
    assert lat.passed and lat.op == "<=" and lat.required == pytest.approx(100 / 0.9)


TEN_AND_TEN = H100.with_name("ten_and_ten_gates.json")


def test_the_recorded_ten_and_ten_series_is_judged_as_on_the_gpu():
    """The H100 series of docs/real-sglang-h200.md section 6: ten gates on a healthy server, ten on
    the same server limited to 192 running requests (~18 % less throughput). The baseline rule,
    applied here to each gate's recorded medians and noise, must give the GPU gate's own verdicts
    and messages: ten passes, ten regressions."""
    data = json.loads(TEN_AND_TEN.read_text())
    cfg = parse_config({"baseline": data["baseline_config"]})
    ref = data["reference"]
    gates = data["gates"]
    assert [g["verdict"] for g in gates] == ["pass"] * 10 + ["fail"] * 10
    judged = 0
    for g in gates[1:]:  # gate 1 wrote the reference
        got = judge.baseline(ref["key_metrics"], g["key_metrics"], cfg, ref["key_noise"], g["key_noise"])
        assert {c.name: c.passed for c in got} == {k: v["passed"] for k, v in g["baseline_checks"].items()}
        for c in got:  # a confirmed regression's message goes on with the first measurement
            assert g["baseline_checks"][c.name]["message"].startswith(c.message), (g["series"], g["gate"], c.name)
        judged += 1
    assert judged == 19
    slow = [g for g in gates if g["series"] == "slow"]
    regressed = ["baseline.total_token_throughput", "baseline.output_token_throughput"]
    assert all(g["failed_checks"] == regressed for g in slow)
    worst_healthy = min(g["key_metrics"]["total_token_throughput"] for g in gates[:10])
    best_slow = max(g["key_metrics"]["total_token_throughput"] for g in slow)
    assert worst_healthy / ref["key_metrics"]["total_token_throughput"] == pytest.approx(0.956, abs=1e-3)
    assert best_slow / ref["key_metrics"]["total_token_throughput"] == pytest.approx(0.825, abs=1e-3)


ONE = {"throughput": {"min_total_tok_s": 100, "max_spread": 0.1}, "baseline": {"metrics": ["total_token_throughput"]}}


def _one(**throughput: float) -> object:
    return parse_config({**ONE, "throughput": {**ONE["throughput"], **throughput}})


def test_the_spread_check_whole_on_three_runs():
    tp = _runs_at([100.0, 105.0, 110.0])
    assert judge.spread(tp, _one()) == judge.Check(
        "throughput.spread",
        True,
        0.0952,
        0.1,
        "ratio",
        "measurement stability over 3 runs: total_token_throughput spread 9.5% "
        "(min 100.0 / median 105.0 / max 110.0 tok/s; allowed 10%)",
        "<=",
    )
    # exactly at the limit passes (the spread is judged <= max_spread)
    at = judge.spread(_runs_at([80.0, 100.0, 100.0]), _one(max_spread=0.2))
    assert at == judge.Check(
        "throughput.spread",
        True,
        0.2,
        0.2,
        "ratio",
        "measurement stability over 3 runs: total_token_throughput spread 20.0% "
        "(min 80.0 / median 100.0 / max 100.0 tok/s; allowed 20%)",
        "<=",
    )
    assert judge.spread(_runs_at([50.0, 100.0, 100.0]), _one()) == judge.Check(
        "throughput.spread",
        False,
        0.5,
        0.1,
        "ratio",
        "FAILED unstable measurement: measurement stability over 3 runs: total_token_throughput spread 50.0% "
        "(min 50.0 / median 100.0 / max 100.0 tok/s; allowed 10%); the medians are not trusted for floors or the "
        "baseline",
        "<=",
    )


def test_the_spread_check_whole_from_four_runs():
    tight = judge.spread(_runs_at([100.0, 100.0, 101.0, 101.0]), _one())
    assert tight == judge.Check(
        "throughput.spread",
        True,
        round(1 / 100.5, 4),
        0.1,
        "ratio",
        "measurement stability over 4 runs: total_token_throughput spread of the middle half 1.0% "
        "(min 100.0 / median 100.5 / max 101.0 tok/s; allowed 10%)",
        "<=",
    )
    runs = [24_700.0, 30_200.0, 27_900.0, 30_200.0, 24_000.0, 30_500.0, 27_500.0]
    w = Spread.of(runs)
    assert w.n == 7 and w.judged > 0.1 and w.noise < 0.05  # scattered, but the median is known
    settled = judge.spread(_runs_at(runs), _one())
    assert settled == judge.Check(
        "throughput.spread",
        True,
        round(w.noise, 4),
        0.05,
        "ratio",
        f"measurement stability over 7 runs: total_token_throughput spread of the middle half {w.judged:.1%} "
        f"(min 24,000.0 / median 27,900.0 / max 30,500.0 tok/s; allowed 10%); the median's standard error "
        f"{w.noise:.1%}, within max_noise 5%",
        "<=",
    )
    assert settled.measured != round(w.noise, 5)
    assert judge.spread(_runs_at(runs), _one(max_noise=w.noise)).passed  # exactly at max_noise: settled
    assert not judge.spread(_runs_at(runs), _one(max_noise=w.noise * 0.999)).passed


def test_which_load_metrics_must_be_stable():
    cfg = parse_config({"throughput": {"min_output_tok_s": 5}, "baseline": {"metrics": ["single_stream_decode_tok_s"]}})
    assert judge._gated_load_metrics(cfg) == ["output_token_throughput"]
    both = parse_config({"throughput": {"min_total_tok_s": 5}, "baseline": {"metrics": ["p99_ttft_ms"]}})
    assert judge._gated_load_metrics(both) == ["total_token_throughput", "p99_ttft_ms"]


def test_the_failed_requests_check_whole():
    assert judge.failed_requests("throughput", 0, 10, 0, {}, "boom") == judge.Check(
        "throughput.failed_requests", True, 0, 0, "requests", "throughput: 0 of 10 requests failed (allowed 0)", "<="
    )
    late = judge.failed_requests("throughput", 3, 10, 0, {"timeout": 3}, "stalled", True, 30.0)
    assert late.message == (
        "FAILED throughput: 3 of 10 requests failed (3 not finished within the 30s deadline or failed) (allowed 0); "
        "by reason: timeout x3; first error: stalled"
    )
    allowed = judge.failed_requests("throughput", 1, 10, 1, {"abort": 1}, "queue full")
    assert allowed.passed and allowed.message == "throughput: 1 of 10 requests failed (allowed 1); by reason: abort x1"


def test_the_baseline_check_whole_for_a_latency_at_its_ceiling():
    cfg = parse_config({"baseline": {"tolerance": 0.9, "metrics": ["total_token_throughput", "p99_ttft_ms"]}})
    got = judge.baseline({"p99_ttft_ms": 90.0}, {"total_token_throughput": 5.0, "p99_ttft_ms": 100.0}, cfg)
    assert got == [
        judge.Check(
            "baseline.p99_ttft_ms",
            True,
            100.0,
            100.0,
            "ms",
            "p99_ttft_ms: 100.0 ms vs baseline 90.0 ms (required <= 100.0; allowed drop 10.0%: 1 - tolerance)",
            "<=",
        )
    ]  # the throughput has no reference value: skipped, the next metric still judged
    fine = judge.baseline({"total_token_throughput": 1000.0}, {"total_token_throughput": 950.12345}, cfg)
    assert (fine[0].measured, fine[0].required, fine[0].unit) == (950.123, 900.0, "tok/s")


def test_the_stability_checks_whole():
    cfg = parse_config({"stability": {"max_failed": 0}})
    lr = _run(3, 1.0, [_bad("cut_stream", "server closed the stream mid-response")])  # 3 x 14 tokens in 1 s
    dead = StabilityStep(2, 3, 32, 4, load=lr, health=Health("after", False, "cannot connect", 5))
    assert judge.stability_step(dead, cfg) == judge.Check(
        "stability.concurrency_32",
        False,
        1,
        0,
        "failed requests",
        "FAILED stability step 2/3 (concurrency 32): the server died or wedged at this step: /health after the step: "
        "cannot connect; 1 of 4 requests failed (allowed 0) [cut_stream x1], total 42 tok/s, p99 E2E 1,000 ms; "
        "first error: server closed the stream mid-response",
        "<=",
    )
    alive = StabilityStep(1, 3, 16, 3, load=_run(3, 1.0), health=Health("after", True, "", 5))
    assert judge.stability_step(alive, cfg) == judge.Check(
        "stability.concurrency_16",
        True,
        0,
        0,
        "failed requests",
        "stability step 1/3 (concurrency 16): ok: 0 of 3 requests failed (allowed 0), total 42 tok/s, "
        "p99 E2E 1,000 ms; /health ok after the step",
        "<=",
    )
    refused = StabilityStep(3, 3, 1024, 1024, refused="needs 1088 open files")
    assert judge.stability_step(refused, parse_config({"stability": {"max_failed": 2}})) == judge.Check(
        "stability.concurrency_1024",
        False,
        None,
        2,
        "failed requests",
        "FAILED stability step 3/3 (concurrency 1024) refused: needs 1088 open files",
        "<=",
    )


def test_the_reference_and_log_checks_whole():
    from validate.logscan import LogScanResult
    from validate.phases import ReferenceResult

    cfg = parse_config({})
    assert judge.reference(ReferenceResult("error", error="HTTP 500: boom"), cfg) == judge.Check(
        "answers.reference", False, None, 0.1, "nats/token", "FAILED reference answers: HTTP 500: boom", "<="
    )
    moved = ReferenceResult("compared", deltas=[0.01, 0.123456, 0.05], divergence=[None, 7, 3])
    assert judge.reference(moved, cfg) == judge.Check(
        "answers.reference",
        False,
        0.1235,
        0.1,
        "nats/token",
        "FAILED reference answers: mean log-likelihood moved by at most 0.1235 nats/token (answer 2 of 3; "
        "allowed 0.1); greedy answers first diverge at token 3",
        "<=",
    )
    broken = judge.logs(LogScanResult(files=["a.log", "b.log"], errors=["a.log: Permission denied", "b.log: gone"]))
    assert broken == judge.Check(
        "logs.crash_signatures",
        False,
        None,
        0,
        "matches",
        "FAILED cannot read log: a.log: Permission denied; b.log: gone",
        "<=",
    )


def test_what_the_report_keeps_of_the_throughput_phase_and_a_stability_step():
    warm_bad = _bad("http_error", "sampling kernel missing")
    first = _run(3, 1.0)
    first.warmup = [warm_bad, _ok(0, 1.0)]
    second = _run(2, 2.0, [_bad("timeout")])
    second.timed_out = True
    tp = Throughput([first, second], 30.0, flushes=["ok", "HTTP 404"])
    d = tp.to_dict()
    assert (d["repeats"], d["timed_out"], d["deadline_s"], d["refused"]) == (2, True, 30.0, "")
    assert (d["warmup_failed"], d["flush_cache"]) == (1, ["ok", "HTTP 404"])
    assert d["completed"] == 5 and len(d["runs"]) == 2 and d["runs"][1]["failed"] == 1
    assert d["spread"]["total_token_throughput"]["n"] == 2
    lr = _run(3, 1.0)
    dead = StabilityStep(1, 2, 16, 3, load=lr, health=Health("after", False, "cannot connect", 5)).to_dict()
    assert (dead["healthy_after"], dead["health_error"], dead["timed_out"]) == (False, "cannot connect", False)
    assert dead["measured_concurrency"] == lr.metrics.concurrency and dead["concurrency"] == 16
    alive = StabilityStep(1, 2, 16, 3, load=lr, health=Health("after", True, "", 5)).to_dict()
    assert (alive["healthy_after"], alive["health_error"]) == (True, "")
    unprobed = StabilityStep(1, 2, 16, 3, load=lr).to_dict()
    assert (unprobed["healthy_after"], unprobed["health_error"]) == (False, "")


def _lone(e2e: float, ttft: float = 0.123456, out: int = 11) -> RequestResult:
    return RequestResult(success=True, output_len=out, ttft=ttft, latency=e2e, text_chars=5)


def test_what_the_report_keeps_of_the_single_stream_and_the_warm_up():
    from validate.phases import Warmup

    ss = SingleStream([_lone(1.123456), _lone(2.3456789), _lone(3.0)], 120.0)
    speeds = [10 / (e - 0.123456) for e in (1.123456, 2.3456789, 3.0)]  # (11 - 1) / (E2E - TTFT)
    assert ss.to_dict() == {
        "repeats": 3,
        "decode_tok_s_runs": [round(s, 3) for s in speeds],
        "noise": Spread.of(speeds).noise,
        "success": True,
        "error": "",
        "failure": "",
        "output_tokens": 11,
        "ttft_ms": 123.46,
        "e2e_s": 2.346,  # the median-speed request
        "decode_tok_s": round(speeds[1], 3),
        "e2e_tok_s": round(11 / 2.3456789, 3),
        "finish_reason": None,
    }
    broken = _bad("http_error", "HTTP 500")
    d = SingleStream([_lone(1.5), broken], 120.0).to_dict()
    assert (d["success"], d["failure"], d["error"], d["e2e_tok_s"], d["noise"]) == (
        False,
        "http_error",
        "HTTP 500",
        0.0,
        None,
    )
    assert Warmup(broken, 2.5).to_dict() == {"ok": False, "seconds": 2.5, "failure": "http_error", "error": "HTTP 500"}


def test_the_single_stream_and_warm_up_checks_whole():
    cfg = parse_config({"single_stream": {"min_decode_tok_s": 4, "max_ttft_ms": 100}})
    got = judge.single_stream(SingleStream([_lone(2.3456789)], 120.0), cfg)
    assert got == [
        judge.Check(
            "single_stream.decode_tok_s",
            True,
            round(10 / (2.3456789 - 0.123456), 3),
            4,
            "tok/s",
            "single-stream decode speed: 4.5 tok/s (required at least 4 tok/s)",
            ">=",
        ),
        judge.Check(
            "single_stream.ttft_ms",
            False,
            123.456,
            100,
            "ms",
            "FAILED single-stream TTFT: 123.5 ms (required at most 100.0 ms)",
            "<=",
        ),
    ]
    failed = judge.single_stream(SingleStream([_bad("timeout", "no answer in 120s")], 120.0), cfg)
    assert failed == [
        judge.Check(
            "single_stream.request",
            False,
            "timeout",
            "success",
            "",
            "FAILED single-stream request failed (timeout): no answer in 120s",
        )
    ]
    tp = Throughput([_run(1, 1.0)], 30.0)
    assert judge.warmups(tp) is None
    tp.runs[0].warmup = [_ok(0, 1.0), _ok(0, 1.0)]
    assert judge.warmups(tp) == judge.Check(
        "throughput.warmup", True, 0, 0, "requests", "2 warm-up request(s) answered", "<="
    )
    tp.runs[0].warmup = [_ok(0, 1.0), _bad("http_error", "sampling kernel missing"), _bad("abort")]
    assert judge.warmups(tp) == judge.Check(
        "throughput.warmup",
        False,
        2,
        0,
        "requests",
        "FAILED 2 of 3 warm-up requests failed (http_error): sampling kernel missing",
        "<=",
    )


def test_the_probe_checks_whole():
    from validate.phases import ProbeResult

    cfg = parse_config(
        {
            "answers": {
                "probes": [
                    {"prompt": "What is the capital of France?", "expect": "Paris"},
                    {"prompt": "2+2=", "expect_regex": r"\b4\b"},
                    {"prompt": "Name a colour", "expect_regex": "blue|red"},
                ]
            }
        }
    )
    down = _bad("http_error", "HTTP 500")
    long = "The capital of France is Paris.\n" + "x" * 200
    four = RequestResult(success=True, output_len=3, text_chars=6)
    four.text = "it is 4"
    grey = RequestResult(success=True, output_len=1, text_chars=4)
    grey.text = "grey"
    paris = RequestResult(success=True, output_len=40, text_chars=len(long))
    paris.text = long
    got = judge.probes(
        [
            ProbeResult(1, "What is the capital of France?", down),
            ProbeResult(2, "2+2=", four),
            ProbeResult(3, "Name a colour", grey),
            ProbeResult(1, "What is the capital of France?", paris),
        ],
        cfg,
    )
    shown = long[:120].replace("\n", " ")
    assert got == [
        judge.Check(
            "answers.probe_1",
            False,
            "http_error",
            "contains 'Paris'",
            "",
            "FAILED probe 1: request failed (http_error): HTTP 500",
        ),
        judge.Check(
            "answers.probe_2",
            True,
            "it is 4",
            r"matches /\b4\b/",
            "",
            r"probe 2 ('2+2='): the answer matches /\b4\b/: 'it is 4'",
        ),
        judge.Check(
            "answers.probe_3",
            False,
            "grey",
            "matches /blue|red/",
            "",
            "FAILED probe 3 ('Name a colour'): the answer does not matches /blue|red/: 'grey'",
        ),
        judge.Check(
            "answers.probe_1",
            True,
            shown,
            "contains 'Paris'",
            "",
            f"probe 1 ('What is the capital of France?'): the answer contains 'Paris': {shown!r}",
        ),
    ]


def test_throughput_checks_name_what_each_measured_and_skip_latencies_of_nothing():
    cfg = parse_config(
        {
            "throughput": {
                "min_output_tok_s": 10,
                "max_p99_e2e_ms": 5000,
                "max_mean_e2e_ms": 5000,
                "max_failed": 8,
                "max_spread": 0.5,
            }
        }
    )
    one = Throughput([_run(1, 1.0)], 30.0)  # a single run: no "(median of ...)"
    c = {x.name: x for x in judge.throughput(one, cfg)}
    assert (
        c["throughput.output_tok_s"].message == "FAILED output token throughput: 4 tok/s (required at least 10.0 tok/s)"
    )
    assert c["throughput.p99_e2e_ms"].message == "p99 E2E latency: 1,000.0 ms (required at most 5,000.0 ms)"
    two = Throughput([_run(1, 1.0), _run(1, 1.0)], 30.0)
    c2 = {x.name: x for x in judge.throughput(two, cfg)}
    assert c2["throughput.p99_e2e_ms"].message.startswith("p99 E2E latency (median of 2 runs): 1,000.0 ms")
    nothing = _run(0, 1.0, [_bad("abort")])
    nothing.timed_out = True
    c0 = {x.name: x for x in judge.throughput(Throughput([nothing], 30.0), cfg)}
    assert c0["throughput.p99_e2e_ms"].measured is None and c0["throughput.mean_e2e_ms"].measured is None
    assert "(1 not finished within the 30s deadline or failed)" in c0["throughput.failed_requests"].message


def test_the_server_identity_checks_whole():
    """server.model and server.restarted, each field: what an operator reads when a host serves the
    wrong model or restarted under the gate (Docker's restart policy hides a crash that way)."""
    assert judge.model(None, ["glm-5", "alias"]) == judge.Check(
        "server.model", True, "glm-5, alias", None, "", "serves glm-5, alias (no expected model given: not checked)"
    )
    assert judge.model(None, []).message == "serves no name (no expected model given: not checked)"
    assert judge.model("glm-5", ["other", "glm-5"]) == judge.Check(
        "server.model",
        True,
        "other, glm-5",
        "glm-5",
        "",
        "expected model 'glm-5'; the server names 'other', 'glm-5'",
        "in",
    )
    assert judge.model("glm-5", ["llama"]) == judge.Check(
        "server.model", False, "llama", "glm-5", "", "FAILED expected model 'glm-5'; the server names 'llama'", "in"
    )
    assert judge.model("glm-5", []).message == "FAILED expected model 'glm-5'; the server names nothing"
    assert not judge.model("glm-5", ["glm-5-nvfp4"]).passed  # a name, not a substring

    a = Identity("before the load", {"pid": 7, "started": "t0"})
    b = Identity("after the load", {"pid": 7, "started": "t0"})
    assert judge.restarted([], []) is None and judge.restarted([a], []) is None
    assert judge.restarted([a, b], []) == judge.Check(
        "server.restarted",
        True,
        "same process",
        "same process",
        "",
        "same server process from 'before the load' to 'after the load' (pid, started)",
    )
    assert judge.restarted([Identity("x", {}), Identity("y", {})], []).message == (
        "same server process from 'x' to 'y' (no facts)"
    )
    c = Identity("after the sweep", {"pid": 9, "started": "t1", "container": "abc"})
    assert judge.restarted([a, b, c], []) == judge.Check(
        "server.restarted",
        False,
        "restarted",
        "same process",
        "",
        "FAILED the server restarted between 'after the load' and 'after the sweep': "
        "container None -> 'abc'; pid 7 -> 9; started 't0' -> 't1'",
    )
    # A docker error is no restart, and an empty read (the server did not answer) changes nothing.
    d1 = Identity("one", {"pid": 7, "docker_error": "no such container"})
    d2 = Identity("two", {"pid": 7, "docker_error": "permission denied"})
    assert judge.restarted([d1, d2, Identity("three", {})], []).passed
    assert not judge.restarted([Identity("one", {}), Identity("two", {"pid": 7})], []).passed
    banner = judge.restarted([a, b], ["line 12: server_args=...", "line 40: server_args=..."])
    assert banner == judge.Check(
        "server.restarted",
        False,
        "restarted",
        "same process",
        "",
        "FAILED the server restarted during the gate: its log shows a new start: "
        "line 12: server_args=...; line 40: server_args=...",
    )
    long = judge.restarted([], ["x" * 2000])
    assert long is not None and len(long.message) == 1000 and long.message.endswith("x")
    flip = [Identity(f"read {i}", {"pid": i, "blob": "y" * 600}) for i in range(2)]
    assert len(judge.restarted(flip, []).message) <= 1000


def test_the_health_and_sampler_checks_whole():
    assert judge.health("x", Health("after", True, "", 5)) is None
    assert judge.health("throughput", Health("after the throughput phase", False, "no answer within 5s", 5)) == (
        judge.Check(
            "throughput.server_healthy_after",
            False,
            "unhealthy",
            "healthy",
            "",
            "FAILED /health after the throughput phase: no answer within 5s (stability.health_timeout_s = 5s): "
            "the server died or is wedged",
        )
    )
    assert judge.health_latency([], 2.0) is None
    assert judge.health_latency([Health("a", False, "refused", 5, 9.0)], 2.0) is None
    seen = [
        Health("after ready", True, "", 30, 0.5),
        Health("after the load", True, "", 30, 2.5),
        Health("after the sweep", False, "timeout", 30, 30.0),  # unanswered: health's own check
        Health("after the stability step", True, "", 30, 1.25),
    ]
    assert judge.health_latency(seen, 2.0) == judge.Check(
        "server.health_latency",
        False,
        2.5,
        2.0,
        "s",
        "FAILED slowest /health answer 2.50s (after the load; allowed 2s: max_health_latency_s)",
        "<=",
    )
    assert judge.health_latency(seen, 2.5) == judge.Check(
        "server.health_latency",
        True,
        2.5,
        2.5,
        "s",
        "slowest /health answer 2.50s (after the load; allowed 2.5s: max_health_latency_s)",
        "<=",
    )
    assert judge.sampler_warmup(Warmup(_ok(0, 1.0), 1.5)) == judge.Check(
        "sampler_warmup.request", True, 1.5, None, "s", "sampled warm-up answered in 1.5s"
    )
    assert judge.sampler_warmup(Warmup(_bad("http_error", "HTTP 500: no sampling kernel"), 0.2)) == judge.Check(
        "sampler_warmup.request",
        False,
        "http_error",
        "success",
        "",
        "FAILED the sampled warm-up request failed (http_error): HTTP 500: no sampling kernel",
    )


def test_the_output_check_takes_nan_finishes_among_failed_streams():
    nan = RequestResult(prompt_len=3, output_len=2, finish_reason={"type": "abort", "matched": "NaN happened"})
    nan.fail("nan", "NaN in logits")
    aborted = _bad("abort")  # ended badly, but not a decode result: not counted
    assert judge.output([aborted]) is None
    assert judge.output([nan, aborted, _ok(0, 1)]) == judge.Check(
        "output.empty_or_nan",
        False,
        1,
        0,
        "requests",
        "FAILED 1 of 2 finished requests returned empty text or NaN; "
        "e.g. finish_reason {'type': 'abort', 'matched': 'NaN happened'}",
        "<=",
    )
    short = _ok(0, 1)
    short.fail("short", "3 of 8 tokens")
    assert judge.output([short]).message == "0 of 1 finished requests returned empty text or NaN"


def test_the_report_rounds_a_fast_single_stream_and_counts_failed_warm_ups():
    speed = 10 / (0.4 - 0.123456)  # a sub-second answer: its E2E rate is still reported
    d = SingleStream([_lone(0.4)], 60.0).to_dict()
    assert d["decode_tok_s"] == round(speed, 3) != round(speed, 4)
    assert d["e2e_tok_s"] == round(11 / 0.4, 3) == 27.5
    tp = Throughput([_run(2, 1.0)], 30.0)
    tp.runs[0].warmup = [_ok(0, 1.0), _bad("http_error", "HTTP 500"), _bad("abort")]
    assert tp.to_dict()["warmup_failed"] == 2


def test_starts_before_the_gate_are_reported_and_with_a_restart_during_it_named_crash_looping():
    from validate.phases import Identity

    same = [Identity("after readiness", {"random_seed": 1}), Identity("after throughput", {"random_seed": 1})]
    moved = [Identity("after readiness", {"random_seed": 1}), Identity("after throughput", {"random_seed": 2})]
    earlier = ["server.log: 2 starts before the gate began"]
    ok = judge.restarted(same, [], earlier)
    assert ok.passed and ok.message == (
        "same server process from 'after readiness' to 'after throughput' (random_seed); before the gate: "
        "server.log: 2 starts before the gate began (not during it)"
    )
    only = judge.restarted([], [], earlier)
    assert (
        only.passed
        and only.message
        == "no restart during the gate; before the gate: server.log: 2 starts before the gate began (not during it)"
    )
    assert judge.restarted([], [], []) is None
    loop = judge.restarted(moved, [], earlier)
    assert not loop.passed and loop.message == (
        "FAILED the server is crash-looping: it started before the gate (server.log: 2 starts before the gate "
        "began) and restarted between 'after readiness' and 'after throughput': random_seed 1 -> 2"
    )
    log_loop = judge.restarted(same, ["w.log: 1 start banner(s) after the gate began"], earlier)
    assert log_loop.message == (
        "FAILED the server is crash-looping: it started before the gate (server.log: 2 starts before the gate "
        "began) and restarted during the gate: its log shows a new start: w.log: 1 start banner(s) after the gate began"
    )
    plain = judge.restarted(moved, [], [])
    assert (
        plain.message
        == "FAILED the server restarted between 'after readiness' and 'after throughput': random_seed 1 -> 2"
    )


def test_only_a_comparison_that_could_not_be_made_is_accepted_by_a_promotion():
    nc = judge.not_compared("baseline.reference", "the speed figures were", "the workload changed: x: 1 -> 2")
    assert (nc.passed, nc.measured, nc.required, nc.unit, nc.op) == (False, "not compared", "compared", "", "")
    assert nc.message == (
        "FAILED the speed figures were not compared with the group's reference: the workload changed: x: 1 -> 2; "
        "to accept the change on purpose, promote this gate to the group's reference: --promote-baseline (role "
        "variable sglang_gate_promote_baseline: true)"
    )
    ok = judge.promoted(nc)
    assert (
        ok.passed
        and ok.name == nc.name
        and ok.measured == "not compared"
        and ok.message
        == (
            "accepted on purpose (--promote-baseline replaces the group's reference): the speed figures were not "
            "compared with the group's reference: the workload changed: x: 1 -> 2; " + judge.ACCEPT
        )
    )
    regression = judge.Check("baseline.total_token_throughput", False, 5.0, 9.0, "tok/s", "FAILED regression: x", ">=")
    floor = judge.Check("accuracy.score", False, 0.1, 0.9, "ratio", "FAILED accuracy 0.1", ">=")
    assert judge.promoted(regression) is regression and judge.promoted(floor) is floor
    first = judge.group_reference("b.json", "", None)
    assert (first.passed, first.measured) == (True, "recorded") and first.message.startswith("recorded: no reference")
    seen = judge.group_reference("b.json", "", "")
    assert seen.message == "compared with the group's reference from an unknown time (b.json)"
