"""validate/gate.py's pieces that need no server: which figures a baseline compares, when a
baseline is (not) compared and why, how docker: log entries are fetched, and re-judging a
finished report with the server's log of the gate window. Exact values throughout."""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest
from _gate_helpers import check, gate_in_process, stub_docker

from testengine.harness import EngineSet
from validate import __version__
from validate import baseline as store
from validate.config import parse_config
from validate.gate import GroupReference, compare_baseline, key_metrics, rejudge_logs
from validate.gate import scan as scan_async
from validate.metrics import METRIC_DEFINITIONS
from validate.serverinfo import TEST_ENGINE_NOTE

TP = {
    "completed": 12,
    "total_throughput": 1000.0,
    "output_throughput": 400.0,
    "request_throughput": 3.0,
    "p99_ttft_ms": 50.0,
    "p99_e2e_latency_ms": 900.0,
    "mean_e2e_latency_ms": 700.0,
}
SS = {"success": True, "decode_tok_s": 42.0}
CRASH = "RuntimeError: CUDA error: an illegal memory access was encountered"
ACCEPT = (
    "to accept the change on purpose, promote this gate to the group's reference: --promote-baseline "
    "(role variable sglang_gate_promote_baseline: true)"
)


def scan(*args, **kw):
    import asyncio

    return asyncio.run(scan_async(*args, **kw))


def _group(path) -> GroupReference:
    return GroupReference.read(str(path))


def test_key_metrics_take_medians_and_single_stream_speed():
    assert key_metrics(TP, SS) == {
        "total_token_throughput": 1000.0,
        "output_token_throughput": 400.0,
        "request_throughput": 3.0,
        "single_stream_decode_tok_s": 42.0,
        "p99_ttft_ms": 50.0,
        "p99_e2e_latency_ms": 900.0,
        "mean_e2e_latency_ms": 700.0,
    }


def test_key_metrics_drop_latencies_of_nothing_and_a_failed_single_stream():
    got = key_metrics({**TP, "completed": 0}, {"success": False, "decode_tok_s": 99.0})
    assert got["single_stream_decode_tok_s"] is None
    assert (got["p99_ttft_ms"], got["p99_e2e_latency_ms"], got["mean_e2e_latency_ms"]) == (None, None, None)
    assert got["total_token_throughput"] == 1000.0
    assert key_metrics(None, None) == dict.fromkeys(key_metrics(TP, SS))


def _cfg(**baseline):
    return parse_config({"baseline": baseline} if baseline else {})


def _write_reference(path, cfg, metrics, engine="sglang", started="2026-12-03T10:00:00+00:00"):
    report = {
        "verdict": "pass",
        "engine": engine,
        "config": cfg.model_dump(mode="python"),
        "key_metrics": metrics,
        "started_at": started,
        "labels": {"host": "h1"},
    }
    assert store.record(path, report, promote=False)[0]


def test_no_baseline_given_missing_or_unusable_says_why(tmp_path):
    cfg = _cfg()
    assert compare_baseline(None, "sglang", cfg, {}) == (
        {"path": None, "used": False, "note": "no --baseline given: no regression check"},
        [],
    )
    missing = str(tmp_path / "b.json")
    info, checks = compare_baseline(_group(missing), "sglang", cfg, {})
    assert [(c.name, c.passed, c.measured) for c in checks] == [("baseline.reference", True, "recorded")]
    assert info == {"path": missing, "used": False, "note": checks[0].message}
    assert checks[0].message == (
        f"recorded: no reference for this group yet ({missing}); this gate is its first, and its figures, answers "
        "and accuracy become the reference when it passes"
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    info, checks = compare_baseline(_group(bad), "sglang", cfg, {})
    assert [(c.name, c.passed, c.measured, c.required) for c in checks] == [
        ("baseline.reference", False, "not compared", "compared")
    ]
    assert info["used"] is False and checks[0].message.startswith(
        f"FAILED the speed figures were not compared with the group's reference: the group's reference cannot be "
        f"read: {bad}: not readable JSON: "
    )
    assert checks[0].message.endswith("; " + ACCEPT)


def test_other_engine_or_workload_is_a_failed_comparison_naming_the_change(tmp_path):
    cfg = _cfg()
    path = tmp_path / "b.json"
    _write_reference(path, cfg, key_metrics(TP, SS), engine="test-engine")
    info, checks = compare_baseline(_group(path), "sglang", cfg, key_metrics(TP, SS))
    assert [(c.name, c.passed) for c in checks] == [("baseline.reference", False)] and info["used"] is False
    assert checks[0].message == (
        "FAILED the speed figures were not compared with the group's reference: the reference was measured on "
        "engine 'test-engine', this server is 'sglang'; " + ACCEPT
    )
    assert "reference" not in info and info["note"] == checks[0].message
    other = parse_config({"throughput": {"num_prompts": 64, "output_len": 32}})
    info, checks = compare_baseline(_group(path), "test-engine", other, key_metrics(TP, SS))
    assert len(checks) == 1 and checks[0].message == (
        "FAILED the speed figures were not compared with the group's reference: the workload changed since the "
        "reference was measured: throughput.num_prompts: 256 -> 64; throughput.output_len: 128 -> 32; " + ACCEPT
    )


def test_compared_reference_gives_one_check_per_metric_with_values(tmp_path):
    cfg = _cfg(tolerance=0.9)
    path = tmp_path / "b.json"
    _write_reference(path, cfg, key_metrics(TP, SS))
    now = {**key_metrics(TP, SS), "total_token_throughput": 850.0, "single_stream_decode_tok_s": 40.0}
    info, checks = compare_baseline(_group(path), "sglang", cfg, now)
    assert info["used"] is True and info["tolerance"] == 0.9
    assert info["note"] == f"compared with the group's reference from 2026-12-03T10:00:00+00:00 ({path})"
    assert info["reference"] == {
        "started_at": "2026-12-03T10:00:00+00:00",
        "labels": {"host": "h1"},
        "how": "first passing gate of the group",
    }
    assert info["values"] == {
        "total_token_throughput": {"baseline": 1000.0, "measured": 850.0},
        "output_token_throughput": {"baseline": 400.0, "measured": 400.0},
        "single_stream_decode_tok_s": {"baseline": 42.0, "measured": 40.0},
    }
    assert [(c.name, c.passed, c.measured, c.required) for c in checks] == [
        ("baseline.reference", True, "compared", "compared"),
        ("baseline.total_token_throughput", False, 850.0, 900.0),
        ("baseline.output_token_throughput", True, 400.0, 360.0),
        ("baseline.single_stream_decode_tok_s", True, 40.0, 37.8),
    ]


def test_scan_fetches_docker_entries_next_to_the_report_and_keeps_fetch_errors_first(tmp_path, monkeypatch):
    # answers the container "gone" like docker does for a missing one, any other with CRASH
    stub_docker(
        tmp_path,
        monkeypatch,
        'for a in "$@"; do last=$a; done\n'
        'if [ "$last" = gone ]; then echo "Error: No such container: $last" >&2; exit 1; fi\n'
        f"printf '%s\\n' '{CRASH}'",
    )
    plain = tmp_path / "server.log"
    plain.write_text("before\nfine\nafter\n")
    report_dir = tmp_path / "report"
    cfg = parse_config({"logs": {"context_lines": 0, "extra_signatures": [{"name": "widget", "pattern": "fine"}]}})
    res = scan([str(plain), "docker:srv", "docker:gone", str(tmp_path / "absent.log")], cfg, str(report_dir), "T0")
    fetched = report_dir / "container-srv.log"
    assert res.files == [str(plain), str(fetched), str(tmp_path / "absent.log")]
    assert fetched.read_text() == CRASH + "\n"
    assert [(m.signature, m.file, m.context) for m in res.matches] == [
        ("widget", str(plain), ["fine"]),  # context_lines 0: the line alone
        ("cuda_error", str(fetched), [CRASH]),
    ]
    assert res.errors[0] == "docker logs gone: Error: No such container: gone"
    assert len(res.errors) == 2 and "absent.log" in res.errors[1]


def test_rejudge_adds_the_window_log_and_replaces_the_log_check_and_verdict(tmp_path):
    cfg = parse_config({})
    scanned = tmp_path / "startup.log"
    scanned.write_text("server started\n")
    window = tmp_path / "window.log"
    window.write_text(f"ok\n{CRASH}\n")
    report = {
        "verdict": "pass",
        "checks": [
            {
                "name": "throughput.total",
                "passed": True,
                "measured": 1.0,
                "required": 0.5,
                "unit": "",
                "message": "ok",
                "op": ">=",
            },
            {
                "name": "logs.crash_signatures",
                "passed": True,
                "measured": 0,
                "required": 0,
                "unit": "",
                "message": "clean",
                "op": "==",
            },
        ],
        "failed_checks": [],
        "skipped": ["logs: no --log file given", "stability: disabled in config"],
        "phases": {"logs": {"files": [str(scanned), str(tmp_path / "gone.log")]}},
    }
    pristine = json.loads(json.dumps(report))
    out = rejudge_logs(report, cfg, [str(window), str(scanned)], str(tmp_path))
    assert out["verdict"] == "fail" and out["failed_checks"] == ["logs.crash_signatures"]
    assert [c["name"] for c in out["checks"]] == ["throughput.total", "logs.crash_signatures"]
    assert out["phases"]["logs"]["files"] == [str(scanned), str(window)]  # the vanished file dropped, none twice
    assert out["phases"]["logs"]["first_match"]["line_no"] == 2
    assert out["skipped"] == ["stability: disabled in config"]
    clean = rejudge_logs(pristine, cfg, [str(scanned)], str(tmp_path))
    assert clean["verdict"] == "pass" and clean["failed_checks"] == []


def test_rejudge_of_a_report_without_log_phase(tmp_path):
    window = tmp_path / "w.log"
    window.write_text("fine\n")
    out = rejudge_logs({}, parse_config({}), [str(window)], str(tmp_path))
    assert out["verdict"] == "pass" and out["phases"]["logs"]["files"] == [str(window)] and out["skipped"] == []


def test_a_reference_without_its_start_time_says_so(tmp_path):
    cfg = _cfg()
    path = tmp_path / "b.json"
    _write_reference(path, cfg, key_metrics(TP, SS), started="")
    info, checks = compare_baseline(_group(path), "sglang", cfg, key_metrics(TP, SS))
    assert info["note"] == f"compared with the group's reference from an unknown time ({path})"
    assert [c.passed for c in checks] == [True, True, True, True]


def test_scan_without_a_report_folder_fetches_into_the_working_folder_since_the_start(tmp_path, monkeypatch):
    argv = stub_docker(tmp_path, monkeypatch, f"printf '%s\\n' '{CRASH}'")
    monkeypatch.chdir(tmp_path)
    res = scan(["docker:srv"], parse_config({}), None, "2026-12-03T10:00:00+00:00")
    assert res.files == ["container-srv.log"] and (tmp_path / "container-srv.log").read_text() == CRASH + "\n"
    assert argv.read_text().split("\n")[:4] == ["logs", "--since", "2026-12-03T10:00:00+00:00", "srv"]
    assert [m.signature for m in res.matches] == ["cuda_error"]


def test_rejudge_fetches_docker_entries_next_to_the_report_without_since(tmp_path, monkeypatch):
    argv = stub_docker(tmp_path, monkeypatch, f"printf '%s\\n' '{CRASH}'")
    out = rejudge_logs({}, parse_config({}), ["docker:srv"], str(tmp_path / "rep"))
    assert out["phases"]["logs"]["files"] == [str(tmp_path / "rep" / "container-srv.log")]
    assert argv.read_text().split("\n")[:2] == ["logs", "srv"]  # the whole log: the gate already narrowed it
    assert out["verdict"] == "fail"


@pytest.mark.parametrize("engine", ["sglang"])
def test_promoted_reference_is_compared_by_its_own_how(tmp_path, engine):
    cfg = _cfg()
    path = tmp_path / "b.json"
    _write_reference(path, cfg, key_metrics(TP, SS), engine=engine)
    report = {
        "verdict": "pass",
        "engine": engine,
        "config": cfg.model_dump(mode="python"),
        "key_metrics": {**key_metrics(TP, SS), "total_token_throughput": 2000.0},
        "started_at": "2026-12-03T11:00:00+00:00",
    }
    assert store.record(path, report, promote=True)[0]
    info, checks = compare_baseline(_group(path), engine, cfg, key_metrics(TP, SS))
    assert info["reference"]["how"] == "promoted (--promote-baseline)"
    assert [c.passed for c in checks] == [True, False, True, True]  # 1000 < 0.95 x 2000


# ----- Gate.run against the TEST ENGINE (a subprocess on loopback; not SGLang), tiny workloads -----


FAST = ("--engine-decode-base-ms", "1", "--engine-decode-per-req-ms", "0")
TINY = {
    "progress_interval_s": 1,
    "readiness": {"timeout_s": 10, "interval_s": 0.2, "request_timeout_s": 2},
    "throughput": {
        "num_prompts": 8,
        "input_len": 16,
        "output_len": 4,
        "repeats": 2,
        "max_spread": 10,
        "timeout_s": 20,
        "warmup_requests": 0,
    },
    "single_stream": {"max_tokens": 8, "timeout_s": 10, "min_decode_tok_s": 1, "max_ttft_ms": 5000},
    "stability": {"concurrency": [2, 4], "input_len": 16, "output_len": 4, "step_timeout_s": 10, "health_timeout_s": 2},
    "accuracy": {"questions": 8, "concurrency": 2, "max_new_tokens": 32, "timeout_s": 10},
    "logs": {"context_lines": 1},
    "baseline": {"metrics": ["total_token_throughput"]},
}


@pytest.fixture
def engines(tmp_path):
    es = EngineSet(tmp_path)
    yield es
    es.stop_all()


def _gate(url, tmp_path, cfg=None, **opts):
    return gate_in_process(url, tmp_path, cfg if cfg is not None else TINY, "tiny.yml", **opts)


def test_a_healthy_run_reports_every_phase_with_exact_counts(engines, tmp_path):
    eng = engines(*FAST)
    base = tmp_path / "baseline.json"
    first, _ = _gate(eng.url, tmp_path / "first", baseline_path=str(base))  # the group's first gate records
    assert first["verdict"] == "pass" and store.record(base, first, promote=False)[0]
    doc = json.loads(base.read_text())  # a reference far below any run, so only a broken run fails it
    doc["reference"]["key_metrics"] = {"total_token_throughput": 1.0, "single_stream_decode_tok_s": 1.0}
    doc["reference"]["started_at"] = "2026-12-03T10:00:00+00:00"
    base.write_text(json.dumps(doc))
    t0 = time.time()
    report, said = _gate(
        eng.url + "/",
        tmp_path,
        logs=[str(eng.log)],
        labels={"host": "h1"},
        patch_record={"engine": "test-engine"},
        baseline_path=str(base),
    )
    elapsed = time.time() - t0
    assert report["verdict"] == "pass", report["failed_checks"]
    assert 0 < report["duration_s"] <= elapsed + 0.005 and report["duration_s"] == round(report["duration_s"], 2)
    started = datetime.fromisoformat(report["started_at"])
    assert abs(started.timestamp() - t0) < 1.5 and report["started_at"].endswith("+00:00")
    assert report["baseline"]["used"] is True and report["baseline"]["values"]["total_token_throughput"] == {
        "baseline": 1.0,
        "measured": report["key_metrics"]["total_token_throughput"],
    }
    assert report["checks"][-1]["name"] == "baseline.total_token_throughput" and report["checks"][-1]["passed"]
    assert report["baseline"]["note"] == f"compared with the group's reference from 2026-12-03T10:00:00+00:00 ({base})"
    ss = report["phases"]["single_stream"]
    assert ss["success"] and report["key_metrics"]["single_stream_decode_tok_s"] == ss["decode_tok_s"] > 0
    assert report["phases"]["server_info_note"] == ""
    assert [c["name"] for c in report["checks"]] == [
        "readiness",
        "server.model",
        "sampler_warmup.request",
        "answers.reference",
        "accuracy.failed_requests",
        "accuracy.score",
        "accuracy.invalid",
        "accuracy.reference",
        "single_stream.decode_tok_s",
        "single_stream.ttft_ms",
        "throughput.failed_requests",
        "throughput.spread",
        "stability.concurrency_2",
        "stability.concurrency_4",
        "output.empty_or_nan",
        "logs.crash_signatures",
        "server.restarted",
        "server.health_latency",
        "baseline.reference",
        "baseline.total_token_throughput",
    ]
    assert report["failed_checks"] == [] and report["skipped"] == []
    assert (report["schema_version"], report["tool"], report["engine"]) == (
        3,
        f"sglang-gate {__version__}",
        "test-engine",
    )
    assert report["engine_note"] == TEST_ENGINE_NOTE and "NOTE: " + TEST_ENGINE_NOTE in said
    assert report["url"] == eng.url and report["labels"] == {"host": "h1"} and report["config_file"] == "tiny.yml"
    assert report["patch_record"] == {"engine": "test-engine"} and report["metric_definitions"] == METRIC_DEFINITIONS
    assert report["config"]["throughput"]["num_prompts"] == 8
    phases = report["phases"]
    assert set(phases) == {
        "readiness",
        "open_files",
        "sampler_warmup",
        "identity",
        "reference",
        "accuracy",
        "single_stream",
        "throughput",
        "stability",
        "health_checks",
        "logs",
        "server_info_raw",
        "server_info_note",
    }
    acc = phases["accuracy"]
    assert (acc["questions"], acc["correct"], acc["invalid"], acc["failed"], acc["wrong"]) == (8, 8, 0, 0, [])
    assert acc["settings"]["questions"] == 8 and acc["timed_out"] is False and acc["output_tokens"] > 8
    assert acc["not_compared"] == "" and acc["reference_from"] == "2026-12-03T10:00:00+00:00"
    assert check(report, "accuracy.reference")["message"] == (
        "accuracy 1.000 (8 of 8) vs the group's reference 1.000 (8 of 8, from 2026-12-03T10:00:00+00:00): "
        "drop 0.000, allowed 0.402 = 3 x binomial standard error 0.134"
    )
    assert report["accuracy"] == {
        "settings": acc["settings"],
        "questions": 8,
        "correct": 8,
        "invalid": 0,
        "accuracy": 1.0,
    }
    tp = phases["throughput"]
    assert len(tp["runs"]) == 2 and tp["completed"] == 16 and tp["total_output"] == 16 * 4 and tp["failed"] == 0
    assert report["key_metrics"]["total_token_throughput"] == pytest.approx(
        tp["spread"]["total_token_throughput"]["median"]
    )
    steps = phases["stability"]["steps"]
    assert [(s["step"], s["of"], s["concurrency"], s["passed"]) for s in steps] == [(1, 2, 2, True), (2, 2, 4, True)]
    assert [h["when"] for h in phases["health_checks"]] == [
        "after readiness",
        "after the single stream",
        "after the throughput phase",
        "after stability step 1/2 (concurrency 2)",
        "after stability step 2/2 (concurrency 4)",
    ]
    assert [i["when"] for i in phases["identity"]] == [
        "after readiness",
        "after answers",
        "after accuracy",
        "after single_stream",
        "after throughput",
        "after stability",
    ]
    assert len({json.dumps(i["facts"], sort_keys=True) for i in phases["identity"]}) == 1  # one process throughout
    assert set(phases["identity"][0]["facts"]) == {"random_seed", "startup_time"}
    assert phases["reference"]["mode"] == "compared" and phases["reference"]["answers"] == 8
    assert phases["reference"]["deltas"] == [0.0] * 8 and phases["reference"]["not_compared"] == ""
    assert len(report["reference_answers"]["answers"]) == 8 and report["reference_answers"]["max_new_tokens"] == 32
    assert all(h["healthy"] for h in phases["health_checks"]) and phases["logs"]["files"] == [str(eng.log)]
    assert phases["open_files"]["wanted"] == 8 + 64 and phases["sampler_warmup"]["ok"] is True
    assert report["server_info"]["engine"] == "test-engine"


def test_disabled_phases_and_no_log_are_listed_as_skipped(engines, tmp_path):
    eng = engines(*FAST)
    cfg = {
        **TINY,
        "accuracy": {"enabled": False},
        "single_stream": {"enabled": False},
        "throughput": {"enabled": False},
        "stability": {"enabled": False},
    }
    report, _ = _gate(eng.url, tmp_path, cfg)
    assert report["skipped"] == [
        "sampler_warmup: no sampled phase runs (throughput and stability are off)",
        "answers: no probes in the config, and the reference answers need --baseline",
        "accuracy: disabled in config",
        "single_stream: disabled in config",
        "throughput: disabled in config",
        "stability: disabled in config",
        "logs: no --log file given",
    ]
    assert [c["name"] for c in report["checks"]] == [  # one identity read: no restart check to make
        "readiness",
        "server.model",
        "server.health_latency",
    ]
    assert report["verdict"] == "pass"
    assert set(report["phases"]) == {
        "readiness",
        "open_files",
        "identity",
        "health_checks",
        "server_info_raw",
        "server_info_note",
    }
    assert report["phases"]["open_files"]["wanted"] == 1 + 64  # nothing bigger than one stream runs
    assert all(v is None for v in report["key_metrics"].values())
    off = _gate(eng.url, tmp_path, {**cfg, "logs": {"enabled": False}})[0]
    assert off["skipped"][-1] == "stability: disabled in config" and len(off["skipped"]) == 6


def test_a_dead_server_fails_readiness_and_skips_the_rest(tmp_path):
    cfg = {**TINY, "readiness": {"timeout_s": 0.6, "interval_s": 0.2, "request_timeout_s": 0.2}}
    report, _ = _gate("http://127.0.0.1:9", tmp_path, cfg)
    assert report["verdict"] == "fail" and report["failed_checks"][0] == "readiness"
    assert report["skipped"] == [
        "answers: no probes in the config, and the reference answers need --baseline",
        "accuracy: skipped, the server never became ready",
        "single_stream: skipped, the server never became ready",
        "throughput: skipped, the server never became ready",
        "stability: skipped, the server never became ready",
        "logs: no --log file given",
    ]
    assert report["engine"] == "unknown" and report["engine_note"] == ""
    assert report["server_info"] == {"engine": "unknown", "source": "unavailable"}
    assert not {"sampler_warmup", "server_info_raw", "server_info_note"} & set(report["phases"])
    assert report["baseline"] == {"path": None, "used": False, "note": "no --baseline given: no regression check"}


def test_a_crash_in_the_sweep_skips_the_steps_after_it(engines, tmp_path):
    eng = engines(*FAST, "--engine-fault", "crash_above:3")
    cfg = {
        **TINY,
        "throughput": {**TINY["throughput"], "max_concurrency": 2},
        "stability": {**TINY["stability"], "concurrency": [2, 4, 8, 16]},
    }
    report, said = _gate(eng.url, tmp_path, cfg, logs=[str(eng.log)])
    steps = report["phases"]["stability"]["steps"]
    assert [(s["concurrency"], s.get("passed"), s.get("skipped", False)) for s in steps] == [
        (2, True, False),
        (4, False, False),
        (8, None, True),
        (16, None, True),
    ]
    assert steps[2:] == [
        {"step": 3, "of": 4, "concurrency": 8, "requests": 0, "skipped": True, "refused": ""},
        {"step": 4, "of": 4, "concurrency": 16, "requests": 0, "skipped": True, "refused": ""},
    ]
    assert report["phases"]["open_files"]["wanted"] == 16 + 64  # the sweep's top step, above the throughput's 2
    assert report["verdict"] == "fail" and "stability.concurrency_4" in report["failed_checks"]
    assert "stability.concurrency_8" not in [c["name"] for c in report["checks"]]
    assert any(
        x.startswith("FAILED stability step 2/4 (concurrency 4): the server died or wedged at this step") for x in said
    )
    assert "logs.crash_signatures" in report["failed_checks"]  # the engine logs a real SGLang error as it dies


def test_a_server_wedged_at_its_first_request_stops_every_phase(engines, tmp_path):
    eng = engines(*FAST, "--engine-fault", "hang")
    cfg = {
        **TINY,
        "single_stream": {"timeout_s": 30},  # not what the sampled warm-up warms: it does not wait for it
        "throughput": {**TINY["throughput"], "timeout_s": 1},
        "stability": {**TINY["stability"], "health_timeout_s": 0.5},
    }
    t0 = time.monotonic()
    report, said = _gate(eng.url, tmp_path, cfg)
    assert time.monotonic() - t0 < 6  # the warm-up waited the throughput's 1 s, the health 0.5 s
    assert report["phases"]["sampler_warmup"]["ok"] is False
    assert report["phases"]["sampler_warmup"]["failure"] == "timeout"
    assert report["phases"]["sampler_warmup"]["error"] == (
        "no complete answer within throughput.timeout_s = 1s (the phase it warms)"
    )
    assert [h["when"] for h in report["phases"]["health_checks"]] == [
        "after readiness",
        "after the failed warm-up request",
    ]
    assert report["skipped"][1:5] == [
        "accuracy: skipped, the server was down or wedged",
        "single_stream: skipped, the server was down or wedged",
        "throughput: skipped, the server was down or wedged",
        "stability: skipped, the server was down or wedged",
    ]
    assert report["failed_checks"] == ["sampler_warmup.request", "sampler_warmup.server_healthy_after"]
    assert any(line.startswith("FAILED") and "died or is wedged" in line for line in said)


def test_a_phase_the_open_file_limit_cannot_fit_is_refused_and_named(engines, tmp_path, monkeypatch):
    from validate import gate as gate_module
    from validate.limits import FileLimit

    asked: list[int] = []

    def tight(concurrency: int) -> FileLimit:
        asked.append(concurrency)
        return FileLimit(70, 70, concurrency + 64, "could not raise the open-file limit from 70: test")

    monkeypatch.setattr(gate_module, "raise_open_files", tight)
    eng = engines(*FAST)
    cfg = {**TINY, "stability": {**TINY["stability"], "concurrency": [2, 8]}}
    report, said = _gate(eng.url, tmp_path, cfg)
    assert asked == [8] and said[0] == "could not raise the open-file limit from 70: test"
    assert "throughput.open_files" in report["failed_checks"]  # 8 streams + 64 > 70
    assert report["phases"]["throughput"]["refused"].startswith("needs 72 open files for 8 concurrent streams")
    steps = report["phases"]["stability"]["steps"]
    assert [(s["concurrency"], s.get("passed")) for s in steps] == [(2, True), (8, False)]
    assert steps[1]["refused"].startswith("needs 72 open files")
    assert [h["when"] for h in report["phases"]["health_checks"]] == [
        "after readiness",
        "after the single stream",
        "after stability step 1/2 (concurrency 2)",
    ]


def test_a_gate_error_in_one_phase_fails_that_phase_and_keeps_the_report(engines, tmp_path, monkeypatch):
    from validate import gate as gate_module

    async def broken(self, mm):
        raise RuntimeError("boom")

    monkeypatch.setattr(gate_module.Gate, "_single_stream", broken)
    eng = engines(*FAST)
    report, said = _gate(eng.url, tmp_path, {**TINY, "stability": {"enabled": False}})
    c = next(c for c in report["checks"] if c["name"] == "single_stream.error")
    assert c == {
        "name": "single_stream.error",
        "passed": False,
        "measured": None,
        "required": None,
        "unit": "",
        "message": "FAILED single_stream: gate error RuntimeError: boom",
        "op": "",
    }
    assert "FAILED single_stream: gate error RuntimeError: boom" in said
    assert "throughput.failed_requests" in [c["name"] for c in report["checks"]]  # the next phase still ran


def test_a_server_that_dies_under_throughput_fails_the_health_after_it(engines, tmp_path):
    eng = engines(*FAST, "--engine-fault", "crash_above:2")
    cfg = {**TINY, "stability": {**TINY["stability"], "health_timeout_s": 0.5}}
    report, _ = _gate(eng.url, tmp_path, cfg)
    assert [h["when"] for h in report["phases"]["health_checks"]] == [
        "after readiness",
        "after the single stream",
        "after the throughput phase",
    ]
    assert "throughput.server_healthy_after" in report["failed_checks"]
    assert report["skipped"][1] == "stability: skipped, the server was down or wedged"


def test_a_server_that_dies_in_the_single_stream_is_named_there(engines, tmp_path, monkeypatch):
    """The server goes away between the warm-up and the single stream (stopped, as a crash would)."""
    from validate.phases import Measurer

    eng = engines(*FAST)
    real = Measurer.single_stream

    async def dies_first(self):
        eng.stop()
        return await real(self)

    monkeypatch.setattr(Measurer, "single_stream", dies_first)
    cfg = {**TINY, "stability": {**TINY["stability"], "health_timeout_s": 0.5}}
    report, said = _gate(eng.url, tmp_path, cfg)
    assert [h["when"] for h in report["phases"]["health_checks"]] == ["after readiness", "after the single stream"]
    assert report["failed_checks"] == ["single_stream.request", "single_stream.server_healthy_after"]
    assert report["skipped"] == [
        "answers: no probes in the config, and the reference answers need --baseline",
        "throughput: skipped, the server was down or wedged",
        "stability: skipped, the server was down or wedged",
        "logs: no --log file given",
    ]
    assert any(x.startswith("FAILED /health after the single stream: ") for x in said)


def test_a_docker_log_entry_is_fetched_next_to_the_report_since_the_gate_start(tmp_path, monkeypatch):
    argv = stub_docker(tmp_path, monkeypatch, f"printf '%s\\n' '{CRASH}'")
    cfg = {**TINY, "readiness": {"timeout_s": 0.3, "interval_s": 0.1, "request_timeout_s": 0.1}}
    report, _ = _gate("http://127.0.0.1:9", tmp_path / "rep", cfg, logs=["docker:srv"])
    fetched = tmp_path / "rep" / "container-srv.log"
    assert report["phases"]["logs"]["files"] == [str(fetched)] and fetched.read_text() == CRASH + "\n"
    words = argv.read_text().split("\n")
    assert words[:2] == ["logs", "--since"] and words[3] == "srv"
    assert words[2].startswith(report["started_at"][:19])  # the gate's own start, to the second and finer
    assert "logs.crash_signatures" in report["failed_checks"]


def test_each_part_of_the_reference_says_why_it_cannot_be_compared(tmp_path):
    cfg = _cfg()
    path = tmp_path / "b.json"
    assert _group(path).part("sglang", "accuracy", "accuracy", {"seed": 1}) == (None, "", "")  # first gate
    _write_reference(path, cfg, key_metrics(TP, SS))
    g = _group(path)
    assert g.part("sglang", "accuracy", "accuracy", {"seed": 1}) == (
        None,
        "2026-12-03T10:00:00+00:00",
        "the group's reference (from 2026-12-03T10:00:00+00:00) has no accuracy "
        "(written by an older gate, or with it off)",
    )
    assert g.part("test-engine", "answers", "reference answers", {})[2] == (
        "the reference was measured on engine 'sglang', this server is 'test-engine'"
    )
    doc = json.loads(path.read_text())
    answers = {"max_new_tokens": 32, "answers": [{"prompt": "p"}]}
    doc["reference"]["answers"] = answers
    doc["reference"]["accuracy"] = {"settings": {"seed": 1, "questions": 20}, "correct": 20, "questions": 20}
    path.write_text(json.dumps(doc))
    g = _group(path)
    assert g.part("sglang", "accuracy", "accuracy", {"seed": 1, "questions": 20}) == (
        doc["reference"]["accuracy"],
        "2026-12-03T10:00:00+00:00",
        "",
    )
    assert g.part("sglang", "accuracy", "accuracy", {"seed": 2, "questions": 20})[2] == (
        "accuracy settings changed since the reference (from 2026-12-03T10:00:00+00:00): seed: 1 -> 2"
    )
    now = store.answer_settings(answers)
    assert g.part("sglang", "answers", "reference answers", now)[0] == answers
    assert g.part("sglang", "answers", "reference answers", {**now, "max_new_tokens": 8})[2].endswith(
        "max_new_tokens: 32 -> 8"
    )
    path.write_text("{broken")
    stored, when, why = _group(path).part("sglang", "accuracy", "accuracy", {})
    assert (stored, when) == (None, "") and why.startswith(f"the group's reference cannot be read: {path}: ")


def test_the_baseline_lock_is_waited_for_no_longer_than_the_deadline_leaves(tmp_path, capsys):
    import argparse

    from validate import cli
    from validate.files import locked

    path = tmp_path / "b.json"
    args = argparse.Namespace(update_baseline=True, promote_baseline=False, baseline=str(path))
    report = {"verdict": "pass", "engine": "sglang", "config": {}, "key_metrics": {}, "baseline": {}}
    cli._record_baseline(args, report, 0.0)
    assert report["baseline"] == {
        "updated": False,
        "update_note": "baseline not written: no time left before the gate's deadline_s to wait for the "
        "baseline's lock",
    }
    with locked(path):  # another gate of the wave holds it
        t0 = time.monotonic()
        cli._record_baseline(args, report, 0.5)
        assert time.monotonic() - t0 < 3
    assert (
        report["baseline"]["update_note"]
        == f"baseline not written: {path}.lock is held by another process (waited 0.5s)"
    )
    cli._record_baseline(args, report, 1000.0)
    assert report["baseline"]["updated"] is True and path.exists()
    assert capsys.readouterr().out.count("[gate] baseline not written") == 2
