"""What the gate writes and compares, without a server: ``Gate._report`` (every field of report.json, built
from hand-made measurements), the figures a baseline reads (``Gate._key_figures``, ``key_metrics``,
``key_noise``), the comparison with the group's reference (``Gate._compare``, ``compare_baseline``,
``GroupReference.part``) and a confirmed regression's message, the starts before the gate
(``Gate._earlier_starts``), the log fetch and scan (``Gate._logs``, ``scan``) and the finalize step that
scans the server's window log after the gate (``rejudge_logs``), the measuring reserve (``reserve_s``)
and the signal handlers (``_can_handle``). Exact values throughout; SGLang's own bytes (server info, logs)
come from tests/fixtures/sglang-0.5.17-h200*."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import types
from datetime import UTC, datetime
from pathlib import Path

import pytest
from _gate_helpers import stub_docker

from validate import __version__
from validate import baseline as store
from validate import checks as judge
from validate import gate as gate_module
from validate.checks import Check
from validate.config import parse_config
from validate.gate import (
    Gate,
    GateOptions,
    GroupReference,
    _can_handle,
    compare_baseline,
    key_noise,
    rejudge_logs,
    reserve_s,
    scan,
)
from validate.limits import FileLimit
from validate.load import LoadResult
from validate.logscan import LogScanResult, scan_logs
from validate.metrics import METRIC_DEFINITIONS, BenchMetrics, RequestResult
from validate.phases import (
    AccuracyAnswer,
    AccuracyResult,
    Health,
    Identity,
    ProbeResult,
    Readiness,
    ReferenceResult,
    ServerInfo,
    SingleStream,
    StabilityStep,
    Throughput,
    Warmup,
)
from validate.serverinfo import TEST_ENGINE_NOTE, served_names, summarize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200"
SERVER_INFO = FIXTURES.with_name("sglang-0.5.17-h200-2026-12-03") / "get_server_info.json"
STARTUP_LOG = FIXTURES / "server_startup.log"  # one "Started server process [614]" banner, no crash
RESTART_LOG = FIXTURES / "server_restart.log.tail"  # the same server started again: one more banner
STARTED = datetime(2026, 12, 3, 10, 0, 0, 654321, tzinfo=UTC)
URL = "http://127.0.0.1:30000/"
CRASH = "RuntimeError: CUDA error: an illegal memory access was encountered"
NO_FIGURES = {
    "total_token_throughput": None,
    "output_token_throughput": None,
    "request_throughput": None,
    "single_stream_decode_tok_s": None,
    "p99_ttft_ms": None,
    "p99_e2e_latency_ms": None,
    "mean_e2e_latency_ms": None,
}
NO_BASELINE = {"path": None, "used": False, "note": "no --baseline given: no regression check"}
SS_ONLY = {"baseline": {"metrics": ["single_stream_decode_tok_s"]}}


def _gate(cfg: dict | None = None, said: list[str] | None = None, **opts) -> Gate:
    o = GateOptions(url=URL, config=parse_config(cfg or {}), config_path="gate.yml", **opts)
    return Gate(o, (said if said is not None else []).append)


def _frozen(monkeypatch, now: float) -> None:
    """gate.py's clock stands at ``now`` (time.monotonic()); asyncio's own clock is untouched."""
    monkeypatch.setattr(gate_module, "time", types.SimpleNamespace(monotonic=lambda: now))


def _sglang() -> ServerInfo:
    """What Measurer.server_info makes of real SGLang 0.5.17's /get_server_info."""
    raw = json.loads(SERVER_INFO.read_text())
    summary = {**summarize(raw, None), "source": "/get_server_info"}
    return ServerInfo(summary, "random-llama-0.9b", raw, "", served_names(raw, None, None))


def _stream(speed_tok_s: float) -> RequestResult:
    """A lone request of 31 streamed tokens decoding at ``speed_tok_s`` after a 0.5 s first token."""
    return RequestResult(success=True, output_len=31, ttft=0.5, latency=0.5 + 30 / speed_tok_s, text_chars=90)


def _bench(total: float, completed: int = 8, **over) -> BenchMetrics:
    fields = {name: 0 for name in BenchMetrics.__dataclass_fields__ if name not in ("first_error", "failure_reasons")}
    fields.update(completed=completed, total_throughput=total, output_throughput=total / 2, request_throughput=2.0)
    fields.update(p99_ttft_ms=50.0, p99_e2e_latency_ms=900.0, mean_e2e_latency_ms=700.0)
    return BenchMetrics(**{**fields, **over})


def _runs(*totals: float) -> Throughput:
    return Throughput([LoadResult([], _bench(t), False, 600.0) for t in totals], 600.0)


def _write_reference(path: Path, cfg, metrics: dict, engine: str = "sglang", **extra) -> None:
    report = {
        "verdict": "pass",
        "engine": engine,
        "config": cfg.model_dump(mode="python"),
        "key_metrics": metrics,
        "started_at": "2026-12-01T08:00:00+00:00",
        "labels": {"host": "h0"},
        **extra,
    }
    assert store.record(path, report, promote=False)[0]


# ----- reserve_s: what measuring leaves for the logs, the judges and the report -----


@pytest.mark.parametrize(
    ("deadline_s", "reserve"),
    [(3300.0, 60.0), (600.0, 60.0), (599.0, 59.9), (100.0, 10.0), (30.0, 3.0)],
)
def test_the_reserve_is_a_tenth_of_the_deadline_at_most_a_minute(deadline_s, reserve):
    assert reserve_s(deadline_s) == pytest.approx(reserve, abs=1e-9)


# ----- key_metrics / key_noise: what a baseline compares, and how much chance moves it -----


def test_key_noise_is_each_key_metrics_relative_standard_error():
    tp = {
        "spread": {
            "total_token_throughput": {"median": 1100.0, "noise": 0.066},
            "p99_ttft_ms": {"median": 50.0, "noise": None},
            "output_token_throughput": {"median": 550.0, "noise": 0.07},
        }
    }
    assert key_noise(tp, {"noise": 0.36}) == {
        **NO_FIGURES,
        "total_token_throughput": 0.066,
        "output_token_throughput": 0.07,
        "single_stream_decode_tok_s": 0.36,
    }


@pytest.mark.parametrize(
    ("tp", "ss"),
    [(None, None), ({}, {}), ({"spread": None}, {"noise": None}), ({"spread": {"p99_ttft_ms": None}}, None)],
)
def test_key_noise_of_nothing_measured_is_none_for_every_metric(tp, ss):
    assert key_noise(tp, ss) == NO_FIGURES


# ----- Gate._key_figures: the phases the baseline reads -----


def test_key_figures_read_the_throughput_medians_and_the_single_streams_median_speed():
    g = _gate()
    g.m.throughput = _runs(1000.0, 1200.0, 1100.0)
    g.m.single_stream = SingleStream([_stream(10.0), _stream(30.0), _stream(20.0)], 300.0)
    tp, ss, km, kn = g._key_figures()
    assert tp == g.m.throughput.to_dict() and tp["total_throughput"] == 1100.0
    assert ss == g.m.single_stream.to_dict() and ss["decode_tok_s"] == 20.0
    assert km == {
        "total_token_throughput": 1100.0,
        "output_token_throughput": 550.0,
        "request_throughput": 2.0,
        "single_stream_decode_tok_s": 20.0,
        "p99_ttft_ms": 50.0,
        "p99_e2e_latency_ms": 900.0,
        "mean_e2e_latency_ms": 700.0,
    }
    # sqrt(pi/2) x sd / sqrt(n) / median: sd 100 of 1100 (and 50 of 550) over 3 runs; sd 10 of 20 tok/s
    assert kn == {
        **NO_FIGURES,
        "total_token_throughput": pytest.approx(1.2533 * 100 / 1100 / 3**0.5),
        "output_token_throughput": pytest.approx(1.2533 * 50 / 550 / 3**0.5),
        "request_throughput": 0.0,
        "single_stream_decode_tok_s": pytest.approx(1.2533 * 10 / 20 / 3**0.5),
        "p99_ttft_ms": 0.0,
        "p99_e2e_latency_ms": 0.0,
        "mean_e2e_latency_ms": 0.0,
    }


def test_a_throughput_phase_without_runs_gives_no_figures():
    """Refused for open files: the phase is reported, but nothing was measured to compare."""
    g = _gate()
    g.m.throughput = Throughput([], 600.0, refused="needs 72 open files for 8 concurrent streams")
    assert g._key_figures() == (None, None, NO_FIGURES, NO_FIGURES)
    g.m.throughput = None
    assert g._key_figures() == (None, None, NO_FIGURES, NO_FIGURES)


# ----- Gate._report: every field of report.json -----


def test_the_report_of_a_gate_that_measured_nothing(monkeypatch):
    g = _gate()
    g.t0 = 1000.0
    _frozen(monkeypatch, 1012.3456)
    assert g._report(STARTED, None) == {
        "schema_version": 3,
        "tool": f"sglang-gate {__version__}",
        "verdict": "fail",  # no check ran: never a pass
        "engine": "unknown",
        "engine_note": "",
        "url": "http://127.0.0.1:30000",
        "started_at": "2026-12-03T10:00:00+00:00",  # to the second
        "duration_s": 12.35,
        "stopped": None,
        "labels": {},
        "config_file": "gate.yml",
        "config": parse_config({}).model_dump(),
        "server_info": {"engine": "unknown", "source": "unavailable"},
        "patch_record": None,
        "checks": [],
        "failed_checks": [],
        "skipped": [],
        "key_metrics": NO_FIGURES,
        "key_noise": NO_FIGURES,
        "reference_answers": None,
        "accuracy": None,
        "baseline": NO_BASELINE,
        "phases": {"health_checks": []},  # a phase that did not run is left out, not null
        "metric_definitions": METRIC_DEFINITIONS,
    }


def _measured_everything(g: Gate) -> None:
    """Every phase of a healthy gate, by hand (figures chosen so that each can be checked)."""
    m = g.m
    m.readiness = Readiness(True, 3.21)
    m.file_limit = FileLimit(1024, 4096, 1088, "raised the open-file limit from 1024 to 1088")
    m.server = _sglang()
    m.identities = [
        Identity("after readiness", {"random_seed": 442534694}),
        Identity("after answers", {"random_seed": 442534694}),
    ]
    m.warmup = Warmup(_stream(25.0), 1.75)
    m.probes = [
        ProbeResult(1, "Capital of France?", RequestResult(success=True, text="Paris.")),
        ProbeResult(2, "Say x forever", RequestResult(success=False, failure="overlong", text="x" * 2500)),
    ]
    recorded = {"max_new_tokens": 32, "answers": [{"prompt": "Hello", "answer_ids": [1, 2]}]}
    m.reference = ReferenceResult("recorded", recorded=recorded)
    settings = {"set": "sglang-deploy-arithmetic", "version": 1, "seed": 1, "questions": 3, "shots": 5}
    m.accuracy = AccuracyResult(
        settings,
        [
            AccuracyAnswer(0, 12, "4 x 3 = 12. #### 12", output_tokens=9, finish="stop"),
            AccuracyAnswer(1, 7, "14 / 2 = 8. #### 8", output_tokens=10, finish="stop"),
            AccuracyAnswer(2, 30, "#### 30", output_tokens=3, finish="stop"),
        ],
        2.5,
        300.0,
    )
    m.single_stream = SingleStream([_stream(10.0), _stream(30.0), _stream(20.0)], 300.0)
    m.first_single_stream = SingleStream([_stream(12.0)], 300.0)
    m.throughput = _runs(1000.0, 1200.0, 1100.0)
    m.first_throughput = _runs(900.0)
    m.stability = [
        StabilityStep(1, 2, 4, 4, LoadResult([], _bench(300.0, completed=4), False, 900.0), Health("s1", True, "", 30)),
        StabilityStep(2, 2, 8, 0, skipped=True),
    ]
    g.step_passed = {1: True}
    m.health = [Health("after readiness", True, "", 30.0, 0.012)]
    g.checks = [judge.readiness(m.readiness, 900.0), judge.model(None, m.server.names)]
    g.skipped = ["logs: no --log file given"]


def test_the_report_of_a_full_gate_keeps_every_measurement_under_its_name(monkeypatch):
    g = _gate(labels={"host": "h1"}, patch_record={"patches": ["p1"]})
    _measured_everything(g)
    logs = scan_logs([str(STARTUP_LOG)])
    g.t0 = 1000.0
    _frozen(monkeypatch, 1001.0)
    r = g._report(STARTED, logs)
    m = g.m
    assert (r["verdict"], r["failed_checks"], r["checks"]) == (
        "pass",
        [],
        [
            {
                "name": "readiness",
                "passed": True,
                "measured": 3.21,
                "required": 900.0,
                "unit": "s",
                "message": "server ready after 3.2s",
                "op": "<=",
            },
            {
                "name": "server.model",
                "passed": True,
                "measured": "random-llama-0.9b, /models/random-llama-0.9b",
                "required": None,
                "unit": "",
                "message": "serves random-llama-0.9b, /models/random-llama-0.9b (no expected model given: not checked)",
                "op": "",
            },
        ],
    )
    assert (r["engine"], r["engine_note"], r["server_info"]) == ("sglang", "", m.server.summary)
    assert r["server_info"]["version"] == "0.5.17" and r["duration_s"] == 1.0 and r["stopped"] is None
    assert (r["labels"], r["patch_record"], r["skipped"]) == (
        {"host": "h1"},
        {"patches": ["p1"]},
        ["logs: no --log file given"],
    )
    assert (
        r["key_metrics"]["total_token_throughput"] == 1100.0 and r["key_metrics"]["single_stream_decode_tok_s"] == 20.0
    )
    assert r["key_noise"]["single_stream_decode_tok_s"] == pytest.approx(0.3618, abs=1e-4)
    assert r["reference_answers"] == {"max_new_tokens": 32, "answers": [{"prompt": "Hello", "answer_ids": [1, 2]}]}
    # 2 of 3 right; what a group's reference stores of its accuracy (rounded to 4 places)
    assert r["accuracy"] == {
        "settings": m.accuracy.settings,
        "questions": 3,
        "correct": 2,
        "invalid": 0,
        "accuracy": 0.6667,
    }
    assert r["baseline"] == NO_BASELINE
    phases = r["phases"]
    assert list(phases) == [
        "readiness",
        "open_files",
        "sampler_warmup",
        "identity",
        "probes",
        "reference",
        "accuracy",
        "single_stream",
        "throughput",
        "single_stream_first",
        "throughput_first",
        "stability",
        "health_checks",
        "logs",
        "server_info_raw",
        "server_info_note",
    ]
    assert phases["readiness"] == {"ready": True, "seconds": 3.21, "last_error": ""}
    assert phases["open_files"] == {
        "soft": 1024,
        "hard": 4096,
        "wanted": 1088,
        "note": "raised the open-file limit from 1024 to 1088",
        "adjusted": True,
    }
    assert phases["sampler_warmup"] == {"ok": True, "seconds": 1.75, "failure": "", "error": ""}
    assert phases["identity"] == [
        {"when": "after readiness", "facts": {"random_seed": 442534694}, "error": ""},
        {"when": "after answers", "facts": {"random_seed": 442534694}, "error": ""},
    ]
    assert phases["probes"] == [
        {"probe": 1, "prompt": "Capital of France?", "success": True, "answer": "Paris."},
        {"probe": 2, "prompt": "Say x forever", "success": False, "answer": "x" * 2000},  # kept to 2,000 chars
    ]
    assert phases["reference"] == m.reference.to_dict() and phases["reference"]["answers"] == 1
    assert phases["accuracy"] == {
        "settings": m.accuracy.settings,
        "seconds": 2.5,
        "deadline_s": 300.0,
        "timed_out": False,
        "output_tokens": 22,
        "reference_from": "",
        "not_compared": "",
        "questions": 3,
        "correct": 2,
        "invalid": 0,
        "failed": 0,
        "accuracy": 0.6667,
        "invalid_rate": 0.0,
        "failure_reasons": {},
        "wrong": [{"question": 1, "expected": 7, "got": 8, "answer": "14 / 2 = 8. #### 8"}],
    }
    assert phases["single_stream"] == m.single_stream.to_dict() and phases["single_stream"]["decode_tok_s"] == 20.0
    assert phases["throughput"] == m.throughput.to_dict() and phases["throughput"]["repeats"] == 3
    assert phases["single_stream_first"]["decode_tok_s_runs"] == [12.0]
    assert phases["throughput_first"]["total_throughput"] == 900.0
    steps = phases["stability"]["steps"]
    assert [(s["step"], s["concurrency"], s.get("passed"), s.get("skipped")) for s in steps] == [
        (1, 4, True, None),
        (2, 8, None, True),
    ]
    assert phases["health_checks"] == [
        {"when": "after readiness", "healthy": True, "error": "", "timeout_s": 30.0, "seconds": 0.012}
    ]
    assert phases["logs"] == logs.to_dict() and phases["logs"]["starts_before"] == {str(STARTUP_LOG): 0}
    assert phases["server_info_raw"] == m.server.raw and phases["server_info_note"] == ""


def test_the_report_names_the_test_engine_and_where_a_stopped_gate_stopped(monkeypatch):
    g = _gate()
    g.m.server = ServerInfo({"engine": "test-engine", "source": "/get_server_info"}, "m", {"version": "t"}, "a note")
    g.m.identities = [Identity("after readiness", {})]
    g.m.throughput = Throughput([], 600.0, refused="needs 72 open files for 8 concurrent streams")
    g.m.reference = ReferenceResult("error", error="no logprobs")  # nothing recorded: nothing to store
    g.phase, g.stopped = "throughput", "it received SIGTERM"
    g.checks = [Check("gate.stopped", False, "throughput", None, "", "FAILED stopped in phase throughput")]
    r = g._report(STARTED, None)
    assert (r["engine"], r["engine_note"]) == ("test-engine", TEST_ENGINE_NOTE)
    assert r["stopped"] == {"phase": "throughput", "reason": "it received SIGTERM"}
    assert (r["verdict"], r["failed_checks"]) == ("fail", ["gate.stopped"])
    assert r["reference_answers"] is None
    assert r["phases"]["throughput"] == {
        "repeats": 0,
        "spread": {},
        "runs": [],
        "timed_out": False,
        "deadline_s": 600.0,
        "refused": "needs 72 open files for 8 concurrent streams",
        "warmup_failed": 0,
        "flush_cache": [],
    }
    assert r["phases"]["identity"] == [{"when": "after readiness", "facts": {}, "error": ""}]
    assert (r["phases"]["server_info_raw"], r["phases"]["server_info_note"]) == ({"version": "t"}, "a note")
    assert r["key_metrics"] == NO_FIGURES


# ----- a regression measured again (Gate._confirm's record): the message says whether it persisted -----

FIRST = (
    "FAILED regression: single_stream_decode_tok_s: 19.0 tok/s vs baseline 30.0 tok/s (required >= 28.5; "
    "allowed drop 5.0%: 1 - tolerance)"
)


@pytest.mark.parametrize(
    ("reference", "now", "verdict"),
    [
        (
            30.0,
            "FAILED regression: single_stream_decode_tok_s: 20.0 tok/s vs baseline 30.0 tok/s (required >= 28.5; "
            "allowed drop 5.0%: 1 - tolerance)",
            "the regression persisted",
        ),
        (
            20.5,
            "single_stream_decode_tok_s: 20.0 tok/s vs baseline 20.5 tok/s (required >= 19.5; "
            "allowed drop 5.0%: 1 - tolerance)",
            "it did not persist",
        ),
    ],
)
def test_a_confirmed_comparison_says_whether_the_regression_persisted(tmp_path, reference, now, verdict):
    cfg = parse_config(SS_ONLY)
    path = tmp_path / "b.json"
    _write_reference(path, cfg, {"single_stream_decode_tok_s": reference})
    said: list[str] = []
    g = _gate(SS_ONLY, said, baseline_path=str(path))
    g.m.server = _sglang()
    g.m.single_stream = SingleStream([_stream(20.0)], 300.0)
    g.confirmation = {
        "wait_s": 15.0,
        "failed_first": {"baseline.single_stream_decode_tok_s": FIRST},
        "remeasured": ["single_stream"],
    }
    r = g._report(STARTED, None)
    message = (
        f"{now}; measured again after 15s ({verdict}); the first measurement: single_stream_decode_tok_s: "
        "19.0 tok/s vs baseline 30.0 tok/s (required >= 28.5; allowed drop 5.0%: 1 - tolerance)"
    )
    assert [(c["name"], c["passed"], c["message"]) for c in r["checks"]] == [
        (
            "baseline.reference",
            True,
            f"compared with the group's reference from 2026-12-01T08:00:00+00:00 ({path})",
        ),
        ("baseline.single_stream_decode_tok_s", verdict == "it did not persist", message),
    ]
    assert r["verdict"] == ("pass" if verdict == "it did not persist" else "fail")
    assert r["failed_checks"] == ([] if verdict == "it did not persist" else ["baseline.single_stream_decode_tok_s"])
    assert said == ([] if verdict == "it did not persist" else [message])
    assert r["baseline"]["confirmation"] == g.confirmation
    assert r["baseline"]["values"] == {"single_stream_decode_tok_s": {"baseline": reference, "measured": 20.0}}


# ----- Gate._compare: this gate's figures and noise against the group's reference, read now -----


def test_compare_reads_the_reference_now_and_widens_the_allowed_drop_by_the_measured_noise(tmp_path):
    cfg = parse_config(SS_ONLY)
    path = tmp_path / "b.json"
    g = _gate(SS_ONLY, baseline_path=str(path))
    g.m.server = _sglang()
    g.m.single_stream = SingleStream([_stream(10.0), _stream(30.0), _stream(20.0)], 300.0)
    info, checks = g._compare()  # no reference yet: this gate records
    assert (info["used"], [(c.name, c.measured) for c in checks]) == (False, [("baseline.reference", "recorded")])
    _write_reference(path, cfg, {"single_stream_decode_tok_s": 22.0})  # another gate of the wave wrote it
    info, checks = g._compare()
    assert info["used"] is True
    # the three speeds (10, 20, 30) leave the median 36 % noise: 2 x 36 % > max_drop, so the drop allowed is 15 %
    assert [(c.name, c.passed, c.measured, c.required, c.message) for c in checks[1:]] == [
        (
            "baseline.single_stream_decode_tok_s",
            True,
            20.0,
            18.7,
            "single_stream_decode_tok_s: 20.0 tok/s vs baseline 22.0 tok/s (required >= 18.7; allowed drop 15.0%: "
            "2 x measured noise 36.2%, at most 15%)",
        )
    ]


def test_compare_without_a_baseline_path_compares_nothing():
    g = _gate()
    g.m.single_stream = SingleStream([_stream(20.0)], 300.0)
    assert g._compare() == (NO_BASELINE, [])


# ----- compare_baseline: the reference's figures and noise, and what it was measured on -----


def test_the_references_own_noise_widens_the_allowed_drop(tmp_path):
    cfg = parse_config(SS_ONLY)
    path = tmp_path / "b.json"
    _write_reference(path, cfg, {"single_stream_decode_tok_s": 22.0}, key_noise={"single_stream_decode_tok_s": 0.06})
    _, checks = compare_baseline(GroupReference.read(str(path)), "sglang", cfg, {"single_stream_decode_tok_s": 20.0})
    assert (checks[1].passed, checks[1].required) == (True, 19.36)  # 2 x 6 % = 12 % below 22
    assert checks[1].message.endswith("(required >= 19.4; allowed drop 12.0%: 2 x measured noise 6.0%, at most 15%)")


def test_a_compared_reference_reports_where_it_came_from_and_each_value(tmp_path):
    cfg = parse_config({"baseline": {"metrics": ["p99_ttft_ms", "total_token_throughput"]}})
    path = tmp_path / "b.json"
    _write_reference(path, cfg, {"p99_ttft_ms": 50.0, "total_token_throughput": 1000.0})
    now = {"p99_ttft_ms": 60.0, "total_token_throughput": 1010.0}
    info, checks = compare_baseline(GroupReference.read(str(path)), "sglang", cfg, now)
    assert info == {
        "path": str(path),
        "used": True,
        "note": f"compared with the group's reference from 2026-12-01T08:00:00+00:00 ({path})",
        "reference": {
            "started_at": "2026-12-01T08:00:00+00:00",
            "labels": {"host": "h0"},
            "how": "first passing gate of the group",
        },
        "tolerance": 0.95,
        "values": {
            "p99_ttft_ms": {"baseline": 50.0, "measured": 60.0},
            "total_token_throughput": {"baseline": 1000.0, "measured": 1010.0},
        },
    }
    # a latency may rise by 1 / (1 - drop): 50 / 0.95 = 52.6 ms
    assert [(c.name, c.passed, c.measured, c.required) for c in checks] == [
        ("baseline.reference", True, "compared", "compared"),
        ("baseline.p99_ttft_ms", False, 60.0, 52.632),
        ("baseline.total_token_throughput", True, 1010.0, 950.0),
    ]


def test_the_group_without_a_reference_records_and_compares_nothing(tmp_path):
    path = tmp_path / "none-yet.json"
    info, checks = compare_baseline(GroupReference.read(str(path)), "sglang", parse_config({}), dict(NO_FIGURES))
    assert info == {"path": str(path), "used": False, "note": checks[0].message}
    assert [(c.name, c.passed, c.measured) for c in checks] == [("baseline.reference", True, "recorded")]


def test_another_engine_is_named_before_the_workload(tmp_path):
    """A reference of the test engine cannot be compared with SGLang, whatever its workload."""
    path = tmp_path / "b.json"
    _write_reference(path, parse_config({}), {}, engine="test-engine")
    other = parse_config({"throughput": {"num_prompts": 64}})
    info, checks = compare_baseline(GroupReference.read(str(path)), "sglang", other, {})
    assert "reference" not in info and len(checks) == 1
    assert checks[0].message.startswith(
        "FAILED the speed figures were not compared with the group's reference: the reference was measured on "
        "engine 'test-engine', this server is 'sglang'; "
    )
    info, checks = compare_baseline(GroupReference.read(str(path)), "test-engine", other, {})
    assert checks[0].message.startswith(
        "FAILED the speed figures were not compared with the group's reference: the workload changed since the "
        "reference was measured: throughput.num_prompts: 256 -> 64; to accept"
    )


# ----- GroupReference.part: each stored part (answers, accuracy), comparable or why not -----


def _with_parts(path: Path, answers: dict | None, accuracy: dict | None, started: str = "") -> GroupReference:
    _write_reference(path, parse_config({}), {})
    doc = json.loads(path.read_text())
    doc["reference"].update(answers=answers, accuracy=accuracy, started_at=started)
    path.write_text(json.dumps(doc))
    return GroupReference.read(str(path))


def test_a_part_of_a_reference_without_a_start_time_is_from_an_unknown_time(tmp_path):
    g = _with_parts(tmp_path / "b.json", None, {"settings": {"seed": 1}, "correct": 20})
    assert g.part("sglang", "accuracy", "accuracy", {"seed": 2}) == (
        None,
        "",
        "accuracy settings changed since the reference (from an unknown time): seed: 1 -> 2",
    )
    assert g.part("sglang", "answers", "reference answers", {}) == (
        None,
        "",
        "the group's reference (from an unknown time) has no reference answers (written by an older gate, or "
        "with it off)",
    )
    assert g.part("sglang", "accuracy", "accuracy", {"seed": 1}) == ({"settings": {"seed": 1}, "correct": 20}, "", "")


def test_stored_answers_are_compared_by_their_length_and_prompts(tmp_path):
    answers = {"max_new_tokens": 32, "answers": [{"prompt": "a"}, {"prompt": "b"}]}
    g = _with_parts(tmp_path / "b.json", answers, {"correct": 20}, "2026-12-01T08:00:00+00:00")
    now = store.answer_settings(answers)
    assert g.part("sglang", "answers", "reference answers", now) == (answers, "2026-12-01T08:00:00+00:00", "")
    other = store.answer_settings({"max_new_tokens": 16, "answers": [{"prompt": "a"}]})
    assert g.part("sglang", "answers", "reference answers", other)[2] == (
        "reference answers settings changed since the reference (from 2026-12-01T08:00:00+00:00): "
        f"max_new_tokens: 32 -> 16; prompts: {now['prompts']!r} -> {other['prompts']!r}"
    )
    # an accuracy stored without its settings: every setting now is a change
    assert g.part("sglang", "accuracy", "accuracy", {"seed": 1})[2].endswith("seed: None -> 1")
    assert g.part("test-engine", "accuracy", "accuracy", {"seed": 1}) == (
        None,
        "2026-12-01T08:00:00+00:00",
        "the reference was measured on engine 'sglang', this server is 'test-engine'",
    )


def test_an_unreadable_reference_file_has_no_part(tmp_path):
    path = tmp_path / "b.json"
    path.write_text('{"schema": "sglang-gate-baseline/1"}')
    assert GroupReference.read(str(path)).part("sglang", "answers", "reference answers", {}) == (
        None,
        "",
        f"the group's reference cannot be read: {path}: schema 'sglang-gate-baseline/1' is not "
        "'sglang-gate-baseline/2'",
    )


# ----- Gate._earlier_starts: starts before the gate are reported, not failed -----


@pytest.mark.parametrize(
    ("restart_count", "docker_line"),
    [
        (0, []),
        (1, ["container srv: Docker restarted it 1 time(s) before the gate"]),
        (3, ["container srv: Docker restarted it 3 time(s) before the gate"]),
        ("3", []),  # not Docker's count
        (None, []),
    ],
)
def test_earlier_starts_are_a_logs_earlier_banners_and_dockers_restart_count(restart_count, docker_line):
    g = _gate(logs=["/var/log/a.log", "docker:srv"])
    facts = {} if restart_count is None else {"docker_restart_count": restart_count}
    g.m.identities = [Identity("after readiness", facts), Identity("after answers", {"docker_restart_count": 0})]
    logs = LogScanResult(files=["a.log", "b.log"], starts_before={"a.log": 2, "b.log": 1})
    assert g._earlier_starts(logs) == ["a.log: 2 starts before the gate began", *docker_line]
    assert g._earlier_starts(None) == docker_line


def test_no_identity_read_no_earlier_start():
    assert _gate()._earlier_starts(None) == []


# ----- Gate._logs and scan: the fetch and the scan end by the deadline, a second before the gate's -----


def test_the_log_fetch_gets_what_is_left_a_second_before_the_gates_deadline(tmp_path, monkeypatch):
    argv = stub_docker(tmp_path, monkeypatch, "exec sleep 5")  # killed at the deadline, no orphan
    monkeypatch.chdir(tmp_path)
    plain = tmp_path / "server.log"
    plain.write_text("before the gate\n" + CRASH + "\n")
    g = _gate({"deadline_s": 100}, logs=[str(plain), "docker:srv"], report_dir=str(tmp_path / "rep"))
    g.offsets = {str(plain): 16}
    g.t0 = 1000.0
    _frozen(monkeypatch, 1000.0 + 100 - 1.25)  # 1.25 s before the deadline: 0.25 s left for the fetch
    res = asyncio.run(g._logs(STARTED))
    assert res.errors == ["docker logs srv: did not finish within 0.25s (the time left before the deadline)"]
    assert argv.read_text().split("\n")[:4] == ["logs", "--since", "2026-12-03T10:00:00.654321+00:00", "srv"]
    fetched = tmp_path / "rep" / "container-srv.log"
    assert res.files == [str(plain)] and fetched.exists()  # the cut fetch is not scanned
    assert res.offsets == {str(plain): 16} and [(m.signature, m.line_no) for m in res.matches] == [("cuda_error", 2)]


@pytest.mark.parametrize(("before_deadline_s", "fetched"), [(0.5, False), (1.0, False), (2.5, True)])
def test_no_log_is_fetched_in_the_last_second_before_the_deadline(tmp_path, monkeypatch, before_deadline_s, fetched):
    stub_docker(tmp_path, monkeypatch, f"printf '%s\\n' '{CRASH}'")
    g = _gate({"deadline_s": 100}, logs=["docker:srv"], report_dir=str(tmp_path))
    g.t0 = 1000.0
    _frozen(monkeypatch, 1100.0 - before_deadline_s)
    res = asyncio.run(g._logs(STARTED))
    if fetched:
        assert (res.errors, [m.signature for m in res.matches]) == ([], ["cuda_error"])
    else:
        assert res.errors == ["docker logs srv: not fetched, no time left before the gate's deadline_s"]


def test_without_a_deadline_a_fetch_may_take_five_minutes(tmp_path, monkeypatch):
    """finalize has no gate deadline: a docker that never answers is still cut, after 300 s."""
    asked: list[tuple] = []

    async def fetch(name, dest, since, timeout_s):  # a docker logs that answers at once
        asked.append((name, since, timeout_s))
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text("fine\n")

    monkeypatch.setattr(gate_module, "fetch_container_log", fetch)
    res = asyncio.run(scan(["docker:srv"], parse_config({}), str(tmp_path), None))
    assert asked == [("srv", None, 300.0)] and res.files == [str(tmp_path / "container-srv.log")]


def test_the_scan_uses_the_configured_signatures_context_and_offsets(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(STARTUP_LOG.read_bytes() + b"widget broke\nafter 1\nafter 2\n")
    size = STARTUP_LOG.stat().st_size
    cfg = parse_config({"logs": {"context_lines": 1, "extra_signatures": [{"name": "widget", "pattern": "widget"}]}})
    res = asyncio.run(scan([str(log)], cfg, None, None, {str(log): size}))
    last = '[2026-12-02 18:38:35] INFO:     127.0.0.1:43290 - "GET /metrics HTTP/1.1" 200 OK'  # the server's
    assert [(m.signature, m.line_no, m.context) for m in res.matches] == [
        ("widget", 65, [last, "widget broke", "after 1"])  # one line either side: context_lines 1
    ]
    assert res.starts_before == {str(log): 1} and res.starts_during == {str(log): 0}


def test_a_scan_past_its_deadline_stops_and_says_where(tmp_path):
    """The deadline is read every 4,096 lines: a long log is not scanned past it."""
    log = tmp_path / "long.log"
    log.write_text("INFO: 200 OK\n" * 5000)
    res = asyncio.run(scan([str(log)], parse_config({}), None, None, None, deadline=time.monotonic() - 1))
    assert res.errors == [f"{log}: scan stopped at line 4,096 by the gate's deadline_s"]
    assert res.lines_scanned == 4096


# ----- rejudge_logs: finalize adds the server's window log after the gate -----


def _finished(checks: list[dict], files: list[str], offsets: dict[str, int]) -> dict:
    return {
        "verdict": "pass",
        "checks": checks,
        "failed_checks": [],
        "skipped": ["logs: no --log file given", "stability: disabled in config"],
        "phases": {"logs": {"files": files, "offsets": offsets}},
    }


def _passed(name: str) -> dict:
    return {"name": name, "passed": True, "measured": 0, "required": 0, "unit": "", "message": "ok", "op": "<="}


def test_a_start_banner_in_the_window_log_replaces_the_restart_check(tmp_path):
    """The gate scanned the server's log as it was at its start (one banner, before the gate); the window
    log fetched after the gate shows the server starting again: a restart during the gate."""
    before = tmp_path / "server.log"
    before.write_bytes(STARTUP_LOG.read_bytes())
    window = tmp_path / "window.log"
    window.write_bytes(RESTART_LOG.read_bytes())
    checks = [_passed("server.restarted"), _passed("logs.crash_signatures"), _passed("throughput.failed_requests")]
    report = _finished(checks, [str(before)], {str(before): before.stat().st_size})
    out = rejudge_logs(report, parse_config({}), [str(window)], str(tmp_path))
    assert [c["name"] for c in out["checks"]] == [
        "throughput.failed_requests",
        "logs.crash_signatures",
        "server.restarted",
    ]
    assert out["checks"][-1]["passed"] is False and out["checks"][-1]["message"] == (
        f"FAILED the server restarted during the gate: its log shows a new start: {window}: 1 start banner(s) "
        "('Started server process [') after the gate began"
    )
    assert (out["verdict"], out["failed_checks"]) == ("fail", ["server.restarted"])
    logs = out["phases"]["logs"]
    assert logs["offsets"] == {str(before): before.stat().st_size, str(window): 0}
    assert (logs["starts_before"], logs["starts_during"]) == (
        {str(before): 1, str(window): 0},
        {str(before): 0, str(window): 1},
    )
    assert out["skipped"] == ["stability: disabled in config"]


def test_a_window_restart_after_earlier_starts_is_a_crash_loop(tmp_path):
    before = tmp_path / "server.log"
    before.write_bytes(STARTUP_LOG.read_bytes() * 2)  # two starts before the gate
    window = tmp_path / "window.log"
    window.write_bytes(RESTART_LOG.read_bytes())
    report = _finished([_passed("server.restarted")], [str(before)], {str(before): before.stat().st_size})
    out = rejudge_logs(report, parse_config({}), [str(window)], str(tmp_path))
    assert out["checks"][-1]["message"].startswith(
        f"FAILED the server is crash-looping: it started before the gate ({before}: 2 starts before the gate began) "
        "and restarted during the gate"
    )


def test_a_window_without_a_banner_keeps_the_restart_check(tmp_path):
    before = tmp_path / "server.log"
    before.write_bytes(STARTUP_LOG.read_bytes())
    window = tmp_path / "window.log"
    window.write_text("INFO: 200 OK\n")
    checks = [_passed("server.restarted"), _passed("logs.crash_signatures")]
    offsets = {str(before): before.stat().st_size}
    out = rejudge_logs(_finished(checks, [str(before)], offsets), parse_config({}), [str(window)], str(tmp_path))
    assert [(c["name"], c["passed"], c["message"]) for c in out["checks"]] == [
        ("server.restarted", True, "ok"),
        ("logs.crash_signatures", True, "no crash signature in 2 log file(s) (65 lines)"),
    ]
    assert (out["verdict"], out["failed_checks"]) == ("pass", [])
    # without the offset the gate recorded, the whole file is the gate's window: its banner a start during it
    out = rejudge_logs(_finished(checks, [str(before)], {}), parse_config({}), [str(window)], str(tmp_path))
    assert out["phases"]["logs"]["starts_during"] == {str(before): 1, str(window): 0}
    assert out["failed_checks"] == ["server.restarted"]


def test_a_stop_during_the_log_fetch_stays_named_after_finalize_reads_the_log(tmp_path):
    """The gate was stopped (a signal, its deadline) while it fetched the log: finalize reads the window
    log and judges it, but the stop stands, with the line that says where it came."""
    window = tmp_path / "window.log"
    window.write_text("INFO: 200 OK\n")
    stopped = {
        **_passed("gate.stopped"),
        "passed": False,
        "message": "FAILED stopped in phase logs because it received SIGINT",
    }
    report = _finished([stopped, _passed("logs.crash_signatures")], [], {})
    report["skipped"] = ["stability: disabled in config", "logs: stopped, it received SIGINT"]
    out = rejudge_logs(report, parse_config({}), [str(window)], str(tmp_path))
    assert [(c["name"], c["passed"]) for c in out["checks"]] == [
        ("gate.stopped", False),
        ("logs.crash_signatures", True),
    ]
    assert (out["verdict"], out["failed_checks"]) == ("fail", ["gate.stopped"])
    assert out["skipped"] == ["stability: disabled in config", "logs: stopped, it received SIGINT"]


# ----- _can_handle: SIGTERM/SIGINT stop the gate (main thread only) -----


def test_a_handled_signal_stops_the_gate_by_name():
    stopped: list[tuple] = []

    async def main() -> bool:
        loop = asyncio.get_running_loop()
        ok = _can_handle(loop, signal.SIGUSR1, lambda why, hard: stopped.append((why, hard)))
        if ok:
            os.kill(os.getpid(), signal.SIGUSR1)
            await asyncio.sleep(0.2)
            loop.remove_signal_handler(signal.SIGUSR1)
        return ok

    assert asyncio.run(main()) is True
    assert stopped == [("it received SIGUSR1", True)]


def test_outside_the_main_thread_no_handler_is_installed():
    got: list[bool] = []

    def thread() -> None:
        async def main() -> None:
            got.append(_can_handle(asyncio.get_running_loop(), signal.SIGUSR1, lambda why, hard: None))

        asyncio.run(main())

    t = threading.Thread(target=thread)
    t.start()
    t.join(10)
    assert got == [False]
