"""The real gate CLI against the test engine over loopback HTTP, healthy and in every fault mode.

Each test prints the gate's verdict and the failing check's message (``pytest -s``
shows them), so the suite doubles as a catalogue of what an operator would read.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from _gate_helpers import ONLY_READINESS, REPO, check, load_report, merge, run_gate, write_config

NO_ANSWERS = {"answers": {"reference": {"enabled": False}}, "accuracy": {"enabled": False}}


def _gate(capsys, engine, cfg, report, *extra):
    code, out, err = run_gate(
        capsys,
        "gate",
        "--url",
        engine.url,
        "--config",
        str(cfg),
        "--report",
        str(report),
        "--log",
        str(engine.log),
        *extra,
    )
    assert "Traceback" not in out + err
    rep = load_report(report)
    failed = [c for c in rep["checks"] if not c["passed"]]
    print(f"\nverdict={rep['verdict']} exit={code}; failed: " + "; ".join(c["message"] for c in failed))
    return code, out, rep


def test_healthy_engine_passes_end_to_end_via_module_cli(engine_factory, tmp_path):
    eng = engine_factory("--tp-size", "8", "--disable-radix-cache", "--kv-cache-dtype", "fp8_e4m3")
    patches = tmp_path / "patches.json"
    patches.write_text(json.dumps({"schema_version": 1, "engine": "test-engine", "fixes": {}}))
    report = tmp_path / "out"
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "validate",
            "gate",
            "--url",
            eng.url,
            "--config",
            str(REPO / "validate/configs/test-engine.yml"),
            "--report",
            str(report),
            "--log",
            str(eng.log),
            "--patch-record",
            str(patches),
            "--label",
            "host=ci-1",
            "--label",
            "image=test",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 60
    rep = load_report(report)
    assert rep["schema_version"] == 3 and rep["verdict"] == "pass" and rep["exit_code"] == 0
    assert rep["engine"] == "test-engine" and "not from SGLang" in rep["engine_note"]
    assert rep["labels"] == {"host": "ci-1", "image": "test"}
    assert rep["patch_record"]["engine"] == "test-engine"
    si = rep["server_info"]
    assert si["tp_size"] == 8 and si["radix_cache"] == "off" and si["kv_cache_dtype"] == "fp8_e4m3"
    names = {c["name"] for c in rep["checks"]}
    assert {
        "readiness",
        "single_stream.decode_tok_s",
        "throughput.total_tok_s",
        "throughput.failed_requests",
        "throughput.spread",
        "stability.concurrency_64",
        "logs.crash_signatures",
        "output.empty_or_nan",
    } <= names
    for c in rep["checks"]:
        assert set(c) >= {"name", "passed", "measured", "required", "unit", "message"}
    assert rep["phases"]["sampler_warmup"]["ok"] is True  # untimed sampled request before measuring
    tp = rep["phases"]["throughput"]
    # three repeats, every request counted with the tokens really returned
    assert tp["repeats"] == 3 and len(tp["runs"]) == 3
    assert tp["completed"] == 3 * 64 and tp["total_input"] == 3 * 64 * 256 and tp["total_output"] == 3 * 64 * 32
    assert all(r["completed"] == 64 and r["total_output"] == 64 * 32 for r in tp["runs"])
    sp = tp["spread"]["total_token_throughput"]
    assert sp["min"] <= sp["median"] <= sp["max"] and sp["spread"] == pytest.approx(
        (sp["max"] - sp["min"]) / sp["median"]
    )
    assert rep["key_metrics"]["total_token_throughput"] == pytest.approx(sp["median"])
    # Values against the test engine's speed model (testengine/README.md: prefill 200k tok/s, decode
    # step 25 ms + 0.1 ms per running request): 64 x 256 prompt tokens take 82 ms of prefill,
    # then 31 decode steps of 31.4 ms: about 1.06 s per run. The engine is never faster than its
    # model (lower bounds, 5 % for timer granularity); a 2-core CI machine shared with a second
    # pytest worker can make it slower (upper bounds 2.5x).
    runs = tp["runs"]
    assert all(r["total_input"] / r["total_output"] == 256 / 32 for r in runs)  # token counts are exact
    assert tp["total_throughput"] / tp["output_throughput"] == pytest.approx(288 / 32)
    model_s = 64 * 256 / 200_000 + 31 * (25 + 0.1 * 64) / 1000
    for r in runs:
        assert model_s * 0.95 <= r["duration_s"] <= model_s * 2.5, (r["duration_s"], model_s)
        assert 64 * 32 / model_s / 2.5 <= r["output_throughput"] <= 64 * 32 / model_s / 0.95
        assert r["mean_tpot_ms"] >= (25 + 0.1 * 64) * 0.95  # no decode step faster than the model
    single = rep["phases"]["single_stream"]
    assert single["output_tokens"] == 40 and 1000 / 25.1 / 2.5 <= single["decode_tok_s"] <= 1000 / 25.1 * 1.05
    assert "Infinity" not in (report / "report.json").read_text()  # strict JSON
    assert rep["config"]["throughput"]["request_rate"] == "inf"
    steps = rep["phases"]["stability"]["steps"]
    assert [s["concurrency"] for s in steps] == [16, 32, 64]
    assert steps[-1]["total_throughput"] > steps[0]["total_throughput"]  # the batching model shows its shape
    summary = (report / "summary.md").read_text()
    assert "PASS" in summary and "TEST ENGINE" in summary and "| stability.concurrency_64 |" in summary
    assert (report / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "[gate] waiting" in proc.stdout or "[gate] ready after" in proc.stdout
    assert "PASS" in proc.stdout


def test_crash_inside_sweep_names_the_step(engine_factory, tmp_path, capsys):
    eng = engine_factory("--engine-fault", "crash_above:40")
    cfg = write_config(tmp_path, {"single_stream": {"enabled": False}, "throughput": {"num_prompts": 32}})
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r")
    assert code == 1 and rep["verdict"] == "fail"
    assert check(rep, "stability.concurrency_16")["passed"] and check(rep, "stability.concurrency_32")["passed"]
    c = check(rep, "stability.concurrency_64")
    assert not c["passed"] and "step 3/3 (concurrency 64)" in c["message"] and "died or wedged" in c["message"]
    logs = check(rep, "logs.crash_signatures")
    assert not logs["passed"] and "page_table_1_flattened" in logs["message"]
    assert rep["phases"]["logs"]["first_match"]["signature"] == "page_table_1_flattened"


def test_hang_times_out_within_the_deadline(engine_factory, tmp_path, capsys):
    eng = engine_factory("--engine-fault", "hang_above:20")
    cfg = write_config(
        tmp_path,
        {
            "accuracy": {"enabled": False},
            "single_stream": {"enabled": False},
            "throughput": {"enabled": False},
            "stability": {"concurrency": [16, 32, 64], "step_timeout_s": 3, "health_timeout_s": 2},
        },
    )
    t0 = time.monotonic()
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r")
    assert time.monotonic() - t0 < 3 + 2 + 10  # step deadline + health deadline + the healthy step
    assert code == 1
    c = check(rep, "stability.concurrency_32")
    assert not c["passed"] and "step 2/3" in c["message"] and "no answer within 2s" in c["message"]
    assert "3s step deadline hit" in c["message"]
    assert rep["phases"]["stability"]["steps"][2]["skipped"] is True


def test_hang_on_first_request_stops_the_remaining_phases(engine_factory, tmp_path, capsys):
    eng = engine_factory("--engine-fault", "hang")
    # the sampled warm-up waits as long as the phase it warms (throughput.timeout_s), no longer
    cfg = write_config(tmp_path, {"throughput": {"timeout_s": 2}, "stability": {"health_timeout_s": 1}})
    t0 = time.monotonic()
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r")
    assert code == 1 and time.monotonic() - t0 < 10
    # The untimed warm-up request is the first one: it gets no answer within 2 s, /health neither.
    assert rep["phases"]["sampler_warmup"]["ok"] is False
    c = check(rep, "sampler_warmup.server_healthy_after")
    assert not c["passed"] and "no answer within 1s" in c["message"] and "died or is wedged" in c["message"]
    assert any(s.startswith("single_stream: skipped") for s in rep["skipped"])
    assert any(s.startswith("throughput: skipped") for s in rep["skipped"])


def test_slow_single_stream_fails_the_floor_with_measured_vs_required(engine_factory, tmp_path, capsys):
    eng = engine_factory("--engine-fault", "slow_single:8")
    cfg = write_config(tmp_path, merge(ONLY_READINESS, {"single_stream": {"enabled": True, "max_tokens": 12}}))
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r")
    assert code == 1
    c = check(rep, "single_stream.decode_tok_s")
    assert not c["passed"] and c["required"] == 20 and 5 <= c["measured"] <= 9
    assert "required at least 20" in c["message"] and "tok/s" in c["message"]


def test_nan_output_fails_the_output_check(engine_factory, tmp_path, capsys):
    eng = engine_factory("--engine-fault", "nan")
    cfg = write_config(tmp_path, merge(ONLY_READINESS, {"throughput": {"enabled": True, "num_prompts": 16}}))
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r")
    assert code == 1
    c = check(rep, "output.empty_or_nan")
    assert not c["passed"] and c["measured"] == 16 and "NaN happened" in c["message"]
    f = check(rep, "throughput.failed_requests")  # a NaN answer is a failed request, never a success
    assert not f["passed"] and f["measured"] == 16 and "nan x16" in f["message"]
    assert rep["phases"]["throughput"]["failure_reasons"] == {"nan": 16}
    assert rep["phases"]["throughput"]["total_output"] == 0


def test_error_rate_fails_the_failed_requests_check(engine_factory, tmp_path, capsys):
    eng = engine_factory("--engine-fault", "error_rate:0.3")
    cfg = write_config(
        tmp_path, merge(ONLY_READINESS, {"throughput": {"enabled": True, "num_prompts": 32, "repeats": 1}})
    )
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r")
    assert code == 1
    c = check(rep, "throughput.failed_requests")
    tp = rep["phases"]["throughput"]
    assert not c["passed"] and c["measured"] >= 1 and c["required"] == 0
    assert "of 32 requests failed (allowed 0)" in c["message"] and "HTTP 500" in c["message"]
    assert tp["failure_reasons"] == {"http_error": c["measured"]} and f"http_error x{c['measured']}" in c["message"]
    assert tp["total_output"] == (32 - c["measured"]) * 32  # only tokens really returned count


def test_queue_overflow_aborts_fail_the_gate_by_reason(engine_factory, tmp_path, capsys):
    """SGLang aborts what overflows --max-queued-requests with HTTP 200 and finish_reason abort."""
    eng = engine_factory("--max-queued-requests", "4", "--max-running-requests", "8")
    cfg = write_config(
        tmp_path, merge(ONLY_READINESS, {"throughput": {"enabled": True, "num_prompts": 64, "repeats": 1}})
    )
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r")
    c = check(rep, "throughput.failed_requests")
    tp = rep["phases"]["throughput"]
    assert code == 1 and not c["passed"]
    aborted = tp["failure_reasons"]["abort"]
    assert aborted >= 32 and c["measured"] == aborted + sum(v for k, v in tp["failure_reasons"].items() if k != "abort")
    assert f"abort x{aborted}" in c["message"] and "The request queue is full." in c["message"]
    assert tp["completed"] == 64 - c["measured"] and tp["total_output"] == tp["completed"] * 32


def test_log_signature_is_reported_with_the_matched_line(engine_factory, tmp_path, capsys):
    """Wiring only: the gate scans --log and reports the first match; which lines match is
    tested against real SGLang/PyTorch/NCCL texts in test_logscan.py, not the engine's."""
    eng = engine_factory("--engine-fault", "log_signature:oom")
    cfg = write_config(tmp_path, ONLY_READINESS)
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r")
    assert code == 1
    c = check(rep, "logs.crash_signatures")
    first = rep["phases"]["logs"]["first_match"]
    assert not c["passed"] and first["signature"] == "oom"
    assert first["line"] in eng.log.read_text() and first["line"] in c["message"]
    assert f"{eng.log}:{first['line_no']}" in c["message"]


def test_readiness_deadline_against_a_dead_port(tmp_path, capsys):
    from testengine.harness import free_port

    cfg = write_config(tmp_path, {"readiness": {"timeout_s": 1.5, "interval_s": 0.5}})
    t0 = time.monotonic()
    code, out, _ = run_gate(
        capsys,
        "gate",
        "--url",
        f"http://127.0.0.1:{free_port()}",
        "--config",
        str(cfg),
        "--report",
        str(tmp_path / "r"),
    )
    assert code == 1 and time.monotonic() - t0 < 6
    rep = load_report(tmp_path / "r")
    assert "not ready within 1.5s (readiness.timeout_s)" in check(rep, "readiness")["message"]
    assert "[gate] waiting for" in out
    assert (tmp_path / "r" / "sweep.png").exists() and (tmp_path / "r" / "summary.md").exists()


def test_baseline_first_pass_writes_then_regression_fails_and_never_overwrites(engine_factory, tmp_path, capsys):
    eng = engine_factory()
    cfg = write_config(
        tmp_path,
        {
            "single_stream": {"max_tokens": 10},
            "throughput": {"num_prompts": 16},
            "stability": {"enabled": False},
        },
    )
    baseline = tmp_path / "baseline.json"
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r1", "--baseline", str(baseline), "--update-baseline")
    assert code == 0 and rep["baseline"]["updated"] is True
    assert rep["baseline"]["note"].startswith("recorded: no reference for this group yet")
    stored = json.loads(baseline.read_text())
    assert stored["schema"] == "sglang-gate-baseline/2" and stored["history"] == []
    assert stored["reference"]["key_metrics"] == rep["key_metrics"]
    assert stored["reference"]["how"] == "first passing gate of the group"
    # A second passing host leaves the group's reference alone (no drift host by host).
    code, _, rep2 = _gate(capsys, eng, cfg, tmp_path / "r2", "--baseline", str(baseline), "--update-baseline")
    assert code == 0 and rep2["baseline"]["used"] is True and rep2["baseline"]["updated"] is False
    assert json.loads(baseline.read_text())["reference"] == stored["reference"]
    # A reference 3x faster than this server: a regression, and the file is untouched.
    stored["reference"]["key_metrics"] = {k: (v * 3 if v else v) for k, v in stored["reference"]["key_metrics"].items()}
    baseline.write_text(json.dumps(stored))
    code, _, rep3 = _gate(capsys, eng, cfg, tmp_path / "r3", "--baseline", str(baseline), "--promote-baseline")
    assert code == 1 and rep3["baseline"]["used"] is True and rep3["baseline"]["updated"] is False
    c = check(rep3, "baseline.total_token_throughput")
    ref = stored["reference"]["key_metrics"]["total_token_throughput"]
    assert not c["passed"] and "regression" in c["message"] and "vs baseline" in c["message"]
    # the allowed drop is 5 % widened by the two medians' noise (2 x, at most 15 %): read it off the
    # message, then check the required figure follows from it (a loaded machine widens the noise)
    drop = float(re.search(r"allowed drop ([\d.]+)%", c["message"]).group(1)) / 100
    assert 0.05 <= drop <= 0.15
    assert c["required"] == pytest.approx(ref * (1 - drop), rel=2e-3)
    assert c["measured"] == pytest.approx(rep3["key_metrics"]["total_token_throughput"], rel=1e-3)
    assert json.loads(baseline.read_text()) == stored  # a failed gate never writes


def test_a_dip_is_measured_again_and_passes_while_a_lasting_regression_is_confirmed(engine_factory, tmp_path, capsys):
    """baseline.confirm: on a real H100 one healthy gate's runs all sat 19 % under the group's
    reference and the next gate was back (docs/real-sglang-h200.md). The throughput is measured
    again after confirm_wait_s; a dip that passed passes, a slowdown that stays fails, and the
    report keeps both measurements."""
    over = {
        "single_stream": {"enabled": False},
        # floors far under the dip: here only the baseline decides, as on a real host
        "throughput": {
            "num_prompts": 16,
            "output_len": 32,
            "repeats": 3,
            "max_repeats": 3,
            "min_total_tok_s": 100,
            "min_output_tok_s": 10,
        },
        "stability": {"enabled": False},
        "answers": {"reference": {"enabled": False}},
        "accuracy": {"enabled": False},  # slow_first counts requests: only the throughput's here
        "baseline": {"metrics": ["total_token_throughput"], "confirm_wait_s": 0.2},
    }
    cfg = write_config(tmp_path, over)
    baseline = tmp_path / "baseline.json"
    code, _, rep = _gate(
        capsys, engine_factory(), cfg, tmp_path / "r0", "--baseline", str(baseline), "--update-baseline"
    )
    assert code == 0
    ref = rep["key_metrics"]["total_token_throughput"]
    tp = rep["phases"]["throughput"]
    # the requests of one measurement: the sampled warm-up, the load's warm-up and three runs of 16
    first = 1 + 1 + sum(r["completed"] + r["failed"] for r in tp["runs"])
    assert first == 50 and rep["config"]["throughput"]["warmup_requests"] == 1

    dip = engine_factory("--engine-fault", f"slow_first:{first}")  # 3x slower decode for exactly that many
    code, out, rep = _gate(capsys, dip, cfg, tmp_path / "r1", "--baseline", str(baseline))
    c = check(rep, "baseline.total_token_throughput")
    conf = rep["baseline"]["confirmation"]
    first_tp = rep["phases"]["throughput_first"]["total_throughput"]
    assert first_tp < 0.6 * ref  # the first measurement really was a regression
    assert code == 0 and c["passed"] and c["measured"] >= 0.9 * ref
    assert conf["remeasured"] == ["throughput"] and conf["wait_s"] == 0.2
    assert list(conf["failed_first"]) == ["baseline.total_token_throughput"]
    assert (
        "measured again after 0.2s (it did not persist); the first measurement: total_token_throughput: "
        in c["message"]
    )
    assert "total_token_throughput below the group's reference; measuring throughput again in 0.2s" in out
    assert {x["name"] for x in rep["checks"]} >= {
        "throughput.failed_requests",
        "throughput.confirmation.failed_requests",
    }
    assert len(rep["phases"]["throughput_first"]["runs"]) == 3 and len(rep["phases"]["throughput"]["runs"]) == 3

    lasting = engine_factory("--engine-fault", "slow_first:100000")
    code, _, rep = _gate(capsys, lasting, cfg, tmp_path / "r2", "--baseline", str(baseline))
    c = check(rep, "baseline.total_token_throughput")
    assert code == 1 and not c["passed"] and c["measured"] < 0.6 * ref
    assert "measured again after 0.2s (the regression persisted)" in c["message"]
    assert rep["phases"]["throughput_first"]["total_throughput"] < 0.6 * ref

    # confirm: false judges the first measurement (the dip fails)
    off = write_config(tmp_path, merge(over, {"baseline": {"confirm": False}}), "off.yml")
    dip = engine_factory("--engine-fault", f"slow_first:{first}")
    code, _, rep = _gate(capsys, dip, off, tmp_path / "r3", "--baseline", str(baseline))
    assert code == 1 and "confirmation" not in rep["baseline"] and "throughput_first" not in rep["phases"]
    assert check(rep, "baseline.total_token_throughput")["measured"] < 0.6 * ref


def test_baseline_from_another_engine_fails_the_comparison_until_promoted(engine_factory, tmp_path, capsys):
    eng = engine_factory()
    # the speed figures' comparison alone (the answers' and the accuracy's are tested in test_gate_trust.py)
    over = {"throughput": {"enabled": True, "num_prompts": 8}, **NO_ANSWERS}
    cfg = write_config(tmp_path, merge(ONLY_READINESS, over))
    baseline = tmp_path / "baseline.json"
    baseline.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "verdict": "pass",
                "engine": "sglang",
                "key_metrics": {"total_token_throughput": 1e9},
            }
        )
    )
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r", "--baseline", str(baseline))
    assert code == 1 and rep["baseline"]["used"] is False and "baseline.reference" in rep["failed_checks"]
    assert check(rep, "baseline.reference")["message"] == (
        "FAILED the speed figures were not compared with the group's reference: the reference was measured on "
        "engine 'sglang', this server is 'test-engine'; to accept the change on purpose, promote this gate to the "
        "group's reference: --promote-baseline (role variable sglang_gate_promote_baseline: true)"
    )
    # accepted on purpose: the same gate with --promote-baseline passes and replaces the reference
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r2", "--baseline", str(baseline), "--promote-baseline")
    assert code == 0 and rep["baseline"]["updated"] is True
    assert check(rep, "baseline.reference")["message"].startswith(
        "accepted on purpose (--promote-baseline replaces the group's reference): the speed figures were not compared"
    )
    stored = json.loads(baseline.read_text())
    assert stored["reference"]["engine"] == "test-engine" and stored["history"][0]["engine"] == "sglang"


def test_baseline_of_another_workload_fails_the_comparison(engine_factory, tmp_path, capsys):
    eng = engine_factory()
    over = {"throughput": {"enabled": True, "num_prompts": 8}, **NO_ANSWERS}
    cfg = write_config(tmp_path, merge(ONLY_READINESS, over))
    baseline = tmp_path / "baseline.json"
    code, _, _ = _gate(capsys, eng, cfg, tmp_path / "r1", "--baseline", str(baseline), "--update-baseline")
    assert code == 0
    stored = json.loads(baseline.read_text())
    assert stored["reference"]["workload"]["throughput.request_rate"] == "inf"
    stored["reference"]["workload"]["throughput.num_prompts"] = 256
    stored["reference"]["key_metrics"]["total_token_throughput"] = 1e9
    baseline.write_text(json.dumps(stored))
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r2", "--baseline", str(baseline))
    assert code == 1 and rep["baseline"]["used"] is False and rep["failed_checks"] == ["baseline.reference"]
    assert (
        "the workload changed since the reference was measured: throughput.num_prompts: 256 -> 8; "
        in (rep["baseline"]["note"])
    )


def test_api_key_from_env_works_and_is_never_written(engine_factory, tmp_path, capsys, monkeypatch):
    secret = "sk-test-9f8e7d6c"
    eng = engine_factory("--api-key", secret)
    cfg = write_config(
        tmp_path,
        merge(
            ONLY_READINESS,
            {
                "throughput": {"enabled": True, "num_prompts": 8},
                "single_stream": {"enabled": True, "max_tokens": 5},
            },
        ),
    )
    monkeypatch.delenv("SGLANG_API_KEY", raising=False)
    code, out, rep = _gate(capsys, eng, cfg, tmp_path / "nokey")
    assert code == 1
    c = check(rep, "throughput.failed_requests")
    assert "HTTP 401" in c["message"] and "SGLANG_API_KEY" in c["message"]
    monkeypatch.setenv("SGLANG_API_KEY", secret)
    code, out, rep = _gate(capsys, eng, cfg, tmp_path / "key")
    assert code == 0
    for f in ("report.json", "summary.md"):
        assert secret not in (tmp_path / "key" / f).read_text()
    assert secret not in out
    assert rep["phases"]["server_info_raw"]["api_key"] == "***redacted***"
    assert rep["phases"]["server_info_raw"]["model_path"]  # only secret names are redacted
    # --api-key-file (the gate's container on a host reads the key from a tmpfs file)
    monkeypatch.delenv("SGLANG_API_KEY", raising=False)
    keyfile = tmp_path / "api_key"
    keyfile.write_text(secret + "\n")
    code, out, rep = _gate(capsys, eng, cfg, tmp_path / "keyfile", "--api-key-file", str(keyfile))
    assert code == 0 and "API key from --api-key-file" in out and secret not in out
    assert 0 < rep["gate_process"]["cpu_s"] < 60 and rep["gate_process"]["max_rss_mb"] > 10
    assert secret not in (tmp_path / "keyfile" / "report.json").read_text()
    keyfile.write_text("")
    code, _out, err = run_gate(capsys, "gate", "--url", eng.url, "--config", str(cfg), "--report",
                               str(tmp_path / "empty"), "--api-key-file", str(keyfile))  # fmt: skip
    assert code == 2 and err.strip() == f"--api-key-file: {keyfile} must hold the key on one line"
    assert not (tmp_path / "empty" / "report.json").exists()


def test_wait_subcommand(engine_factory, capsys):
    from validate.cli import main

    eng = engine_factory("--engine-startup-delay-s", "1", wait=False)
    assert main(["wait", "--url", eng.url, "--timeout", "20", "--interval", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "ready after" in out


def test_wait_times_out(capsys):
    from testengine.harness import free_port
    from validate.cli import main

    assert main(["wait", "--url", f"http://127.0.0.1:{free_port()}", "--timeout", "1", "--interval", "0.3"]) == 1
    assert "not ready within 1s" in capsys.readouterr().out


@pytest.mark.skipif(os.environ.get("CI_SKIP_SLOW") == "1", reason="CI_SKIP_SLOW")
def test_reference_config_fails_an_8_tok_s_single_stream(engine_factory, tmp_path, capsys):
    """The reference gate's 60 tok/s floor (MTP on) catches the 8 tok/s reference run's defect."""
    eng = engine_factory("--engine-fault", "slow_single:8")
    import yaml

    ref = yaml.safe_load((REPO / "validate/configs/reference.yml").read_text())
    ref = merge(
        ref,
        {
            **ONLY_READINESS,
            "single_stream": {"enabled": True, "max_tokens": 10},
            "readiness": {"timeout_s": 10, "interval_s": 1},
        },
    )
    cfg = tmp_path / "ref.yml"
    cfg.write_text(yaml.safe_dump(ref))
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r")
    c = check(rep, "single_stream.decode_tok_s")
    assert code == 1 and not c["passed"] and c["required"] == 60


@pytest.mark.docker
def test_docker_container_log_of_the_gate_window_is_fetched_and_scanned(engine_factory, tmp_path, capsys):
    """docker:NAME reads the container's log since the gate started: a crash printed during the
    load is found, a line printed before the gate is not part of the window."""
    import shutil
    import uuid

    if not shutil.which("docker"):
        pytest.skip("no docker CLI")
    name = f"gate-logtest-{uuid.uuid4().hex[:8]}"
    line = "RuntimeError: CUDA error: an illegal memory access was encountered"
    before = "CUDA error: printed before the gate started"
    run = subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "none",
            "local/debian:bookworm",
            "sh",
            "-c",
            f"echo '{before}'; sleep 3; echo '{line}' >&2; sleep 60",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        if run.returncode != 0:
            pytest.skip(f"cannot run a container here: {run.stderr.strip()[:200]}")
        eng = engine_factory()
        time.sleep(1.5)  # the first line is now older than the gate
        cfg = write_config(tmp_path, merge(ONLY_READINESS, {"single_stream": {"enabled": True, "max_tokens": 160}}))
        code, _, _ = run_gate(
            capsys,
            "gate",
            "--url",
            eng.url,
            "--config",
            str(cfg),
            "--report",
            str(tmp_path / "r"),
            "--log",
            f"docker:{name}",
        )
        rep = load_report(tmp_path / "r")
        c = check(rep, "logs.crash_signatures")
        assert code == 1 and not c["passed"] and line in c["message"]
        fetched = (tmp_path / "r" / f"container-{name}.log").read_text()
        assert fetched.count(line) == 1 and before not in fetched
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)


def _gate_subprocess(eng, cfg, report, nofile: tuple[int, int]):
    import resource

    return subprocess.run(
        [sys.executable, "-m", "validate", "gate", "--url", eng.url, "--config", str(cfg), "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile),
    )


def test_gate_raises_its_open_file_limit_or_refuses_the_step_that_cannot_fit(engine_factory, tmp_path):
    eng = engine_factory()
    cfg = write_config(
        tmp_path,
        merge(ONLY_READINESS, {"stability": {"enabled": True, "concurrency": [8, 300], "requests_per_step": 8}}),
    )
    # soft 100 but hard 4096: the gate raises the soft limit itself and both steps run
    proc = _gate_subprocess(eng, cfg, tmp_path / "raised", (100, 4096))
    rep = load_report(tmp_path / "raised")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "open-file limit raised 100 -> 364" in proc.stdout
    assert rep["phases"]["open_files"]["soft"] == 364 and check(rep, "stability.concurrency_300")["passed"]
    # hard 200: it cannot; the 300-stream step is refused by name, the 8-stream step still runs
    proc = _gate_subprocess(eng, cfg, tmp_path / "capped", (100, 200))
    rep = load_report(tmp_path / "capped")
    assert proc.returncode == 1
    assert check(rep, "stability.concurrency_8")["passed"]
    c = check(rep, "stability.concurrency_300")
    assert not c["passed"] and "needs 364 open files for 300 concurrent streams" in c["message"]
    assert "may open 200 (hard limit 200)" in c["message"]


def test_finalize_judges_the_gate_window_log_before_the_baseline_is_written(engine_factory, tmp_path, capsys):
    eng = engine_factory()
    cfg = write_config(tmp_path, merge(ONLY_READINESS, {"throughput": {"enabled": True, "num_prompts": 8}}))
    baseline = tmp_path / "baseline.json"
    code, _, rep = _gate(capsys, eng, cfg, tmp_path / "r", "--baseline", str(baseline))
    assert code == 0 and not baseline.exists()
    window = tmp_path / "window.log"

    def finalize() -> tuple[int, dict]:
        args = ["--report", str(tmp_path / "r"), "--log", str(window), "--baseline", str(baseline), "--update-baseline"]
        code, _, _ = run_gate(capsys, "finalize", *args)
        return code, load_report(tmp_path / "r")

    # what SGLang >= 0.5.17 logs when a decode step produced NaN (utils/async_probe.py)
    window.write_text("[2026-12-03 08:00:01 TP0] NaN detected in sampler: next_token_logits; values were sanitized\n")
    code, rep = finalize()
    c = check(rep, "logs.crash_signatures")
    assert code == 1 and rep["verdict"] == "fail" and rep["exit_code"] == 1 and not c["passed"]
    assert "nan_in_decode" in c["message"] and str(window) in c["message"]
    assert rep["failed_checks"] == ["logs.crash_signatures"] and not baseline.exists()
    assert rep["phases"]["logs"]["files"] == [str(eng.log), str(window)]  # the gate's own log scanned again
    assert "FAIL" in (tmp_path / "r" / "summary.md").read_text()
    window.write_text("[2026-12-03 08:00:01 TP0] Decode batch. #running-req: 8\n")
    code, rep = finalize()
    assert code == 0 and rep["verdict"] == "pass" and baseline.exists() and rep["baseline"]["updated"] is True
