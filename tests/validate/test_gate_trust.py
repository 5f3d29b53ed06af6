"""What a PASS means: the gate against servers that fail the way GPU servers fail.

Each test starts the SGLang-compatible TEST ENGINE (not SGLang) with one fault, runs the real
gate (``Gate.run`` or the CLI) and asserts the failed check's name and figures. Every one of
these servers passed the gate before: fast, HTTP 200, finish reason ``length``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from _gate_helpers import REPO, gate_in_process, merge, run_gate

FAST = ("--engine-decode-base-ms", "1", "--engine-decode-per-req-ms", "0")
SMALL = {
    "progress_interval_s": 1,
    "readiness": {"timeout_s": 10, "interval_s": 0.2, "request_timeout_s": 2},
    "throughput": {
        "num_prompts": 8,
        "input_len": 16,
        "output_len": 32,
        "repeats": 1,
        "max_spread": 10,
        "timeout_s": 20,
        "warmup_requests": 1,
    },
    "single_stream": {"max_tokens": 40, "timeout_s": 10},
    "stability": {"enabled": False},
    "logs": {"context_lines": 1},
    "accuracy": {"enabled": False},  # on where a test is about it (ACCURACY): the faults here strike the load
}
ACCURACY = {"accuracy": {"enabled": True, "questions": 8, "concurrency": 8, "timeout_s": 10}}
# only the answers decide (and the gate takes a few seconds): the load phases off
ANSWERS_ONLY = merge(ACCURACY, {"throughput": {"enabled": False}, "single_stream": {"enabled": False}})


def _gate(url, tmp_path, cfg=None, **opts):
    return gate_in_process(url, tmp_path, merge(SMALL, cfg or {}), "small.yml", **opts)


def _check(report, name):
    found = [c for c in report["checks"] if c["name"] == name]
    assert found, (name, [c["name"] for c in report["checks"]])
    return found[0]


def test_a_healthy_engine_passes_every_new_check(engine_factory, tmp_path):
    eng = engine_factory(*FAST)
    report, _ = _gate(eng.url, tmp_path, ACCURACY, model="test-engine/GLM-5-NVFP4", logs=[str(eng.log)])
    assert report["verdict"] == "pass", report["failed_checks"]
    assert _check(report, "accuracy.score")["measured"] == 1.0
    assert _check(report, "server.model")["passed"] and _check(report, "sampler_warmup.request")["passed"]
    assert _check(report, "throughput.warmup")["measured"] == 0
    assert _check(report, "server.restarted")["message"].startswith("same server process from 'after readiness'")
    tp = report["phases"]["throughput"]
    assert tp["completed"] == 8 and tp["total_output"] == 8 * 32 and tp["failure_reasons"] == {}


def test_one_token_repeated_is_a_failed_request_in_every_phase(engine_factory, tmp_path):
    eng = engine_factory(*FAST, "--engine-fault", "degenerate")
    report, _ = _gate(eng.url, tmp_path)
    tp = report["phases"]["throughput"]
    assert tp["failure_reasons"] == {"degenerate": 8} and tp["completed"] == 0
    c = _check(report, "throughput.failed_requests")
    assert not c["passed"] and c["measured"] == 8
    assert "degenerate answer: token id 0 repeated 32 times in a row (32 of 32 tokens): '!!!!" in c["message"]
    ss = _check(report, "single_stream.request")
    assert ss["measured"] == "degenerate" and "token id 0 repeated 40 times in a row (40 of 40 tokens)" in ss["message"]
    assert _check(report, "throughput.warmup")["measured"] == 1  # the warm-up's 32 tokens are judged too
    assert report["key_metrics"]["total_token_throughput"] == 0.0  # nothing counted from garbage


def test_a_server_whose_sampled_requests_fail_fails_the_gate(engine_factory, tmp_path):
    eng = engine_factory(*FAST, "--engine-fault", "sampled_error")
    report, _ = _gate(eng.url, tmp_path)
    w = _check(report, "sampler_warmup.request")
    assert not w["passed"] and w["measured"] == "http_error" and "HTTP 500" in w["message"]
    assert "sampling kernel not available" in w["message"]
    tp = report["phases"]["throughput"]
    assert tp["failure_reasons"] == {"http_error": 8}  # the load samples (sampling.temperature 1.0 by default)
    assert _check(report, "throughput.warmup")["measured"] == 1
    # the greedy single stream still works: only what production sends is broken
    assert report["phases"]["single_stream"]["success"] is True
    greedy = _gate(eng.url, tmp_path / "g", {"sampling": {"temperature": 0}})[0]
    assert greedy["phases"]["throughput"]["failure_reasons"] == {}  # the old gate's view: all fine
    assert not _check(greedy, "sampler_warmup.request")["passed"]  # the warm-up samples regardless


def test_a_usage_claim_four_times_the_stream_is_a_failed_request(engine_factory, tmp_path):
    eng = engine_factory(*FAST, "--engine-fault", "usage_inflate:4")
    report, _ = _gate(eng.url, tmp_path)
    tp = report["phases"]["throughput"]
    assert tp["failure_reasons"] == {"usage_mismatch": 8} and tp["total_output"] == 0
    assert "the server claims 128 tokens but streamed 32" in _check(report, "throughput.failed_requests")["message"]
    # the single stream counts the ids it streamed, never the server's word (the claim fails it)
    ss = _check(report, "single_stream.request")
    assert ss["measured"] == "usage_mismatch" and "the server claims 160 tokens but streamed 40" in ss["message"]
    assert report["key_metrics"]["single_stream_decode_tok_s"] is None


def test_more_tokens_than_asked_is_overlong(engine_factory, tmp_path):
    eng = engine_factory(*FAST, "--engine-fault", "overlong:3")
    report, _ = _gate(eng.url, tmp_path)
    assert report["phases"]["throughput"]["failure_reasons"] == {"overlong": 8}
    assert "streamed 35 tokens, more than the 32 asked for" in _check(report, "throughput.failed_requests")["message"]


def test_a_server_serving_another_model_fails_and_stops(engine_factory, tmp_path):
    eng = engine_factory(*FAST, "--served-model-name", "glm-4.6")
    report, _ = _gate(eng.url, tmp_path, model="zai-org/GLM-5-NVFP4")
    c = _check(report, "server.model")
    assert not c["passed"] and c["required"] == "zai-org/GLM-5-NVFP4"
    assert c["message"] == (
        "FAILED expected model 'zai-org/GLM-5-NVFP4'; the server names 'glm-4.6', 'test-engine/GLM-5-NVFP4'"
    )
    assert "throughput: skipped, the server serves another model" in report["skipped"]
    same = _gate(eng.url, tmp_path / "ok", {"model": "glm-4.6"})[0]  # the config's model works as --model does
    assert _check(same, "server.model")["passed"]


def test_a_restart_during_the_warm_ups_fails_server_restarted(engine_factory, tmp_path):
    # the engine "restarts" (new seed and start time, a start banner, a second of 503s) at its fifth
    # request (after the sampler warm-up and the three single streams): the throughput's warm-up
    eng = engine_factory(*FAST, "--engine-fault", "restart_after:4")
    report, _ = _gate(eng.url, tmp_path, logs=[str(eng.log)])
    c = _check(report, "server.restarted")
    assert not c["passed"]
    assert c["message"].startswith("FAILED the server restarted during the gate: its log shows a new start: ")
    # the log holds the start-up too: its banner is before the gate's start (the offset), the restart's after
    assert c["message"].endswith(f"{eng.log}: 1 start banner(s) ('Started server process [') after the gate began")
    assert report["phases"]["logs"]["starts_before"] == {str(eng.log): 1}
    ids = report["phases"]["identity"]
    assert ids[0]["facts"]["random_seed"] != ids[-1]["facts"]["random_seed"]
    # without the log the identity reads alone catch it
    eng2 = engine_factory(*FAST, "--engine-fault", "restart_after:4")
    alone = _gate(eng2.url, tmp_path / "nolog")[0]
    c2 = _check(alone, "server.restarted")
    assert not c2["passed"] and "random_seed" in c2["message"] and "startup_time" in c2["message"]
    assert c2["message"].startswith("FAILED the server restarted between 'after single_stream' and 'after throughput'")
    assert alone["skipped"][-2:] == ["stability: disabled in config", "logs: no --log file given"]


def test_a_slow_health_endpoint_fails_after_ready(engine_factory, tmp_path):
    eng = engine_factory(*FAST, "--engine-fault", "slow_health:1.2")
    report, _ = _gate(eng.url, tmp_path, {"readiness": {"max_health_latency_s": 0.5}})
    c = _check(report, "server.health_latency")
    assert not c["passed"] and c["required"] == 0.5 and 1.2 <= c["measured"] < 3


def test_a_stalled_stream_is_judged_within_the_phase_deadline(engine_factory, tmp_path):
    # tokens stop after 5 per request (the 4-token sampler warm-up still passes), the connection
    # stays open and /health still answers 200
    eng = engine_factory(*FAST, "--engine-fault", "stall_after:5")
    cfg = {
        "throughput": {"timeout_s": 3, "repeats": 3},
        "single_stream": {"enabled": False},
        "stability": {"enabled": True, "concurrency": [2, 4], "step_timeout_s": 30},
    }
    t0 = time.monotonic()
    report, _ = _gate(eng.url, tmp_path, cfg)
    took = time.monotonic() - t0
    assert took < 3 + 8, took  # one phase deadline plus a few seconds, not 3 runs + 2 steps of deadlines
    assert _check(report, "throughput.warmup")["measured"] == 1
    assert report["phases"]["throughput"]["failure_reasons"] == {"timeout": 8}
    assert report["skipped"][3] == (
        "stability: skipped, the server stalled (8 throughput requests still open at the 3s deadline)"
    )
    assert report["verdict"] == "fail"


def test_the_overall_deadline_stops_the_gate_and_keeps_the_report(engine_factory, tmp_path):
    eng = engine_factory(*FAST, "--engine-fault", "stall_after:5")
    t0 = time.monotonic()
    cfg = {"deadline_s": 2, "throughput": {"timeout_s": 60}, "single_stream": {"enabled": False}}
    report, said = _gate(eng.url, tmp_path, cfg)
    assert time.monotonic() - t0 < 6
    assert said[-1].startswith("FAILED stopped in phase throughput")
    assert report["stopped"] == {"phase": "throughput", "reason": "the gate's deadline_s (2s) passed"}
    c = _check(report, "gate.stopped")
    assert c["message"] == (
        "FAILED stopped in phase throughput because the gate's deadline_s (2s) passed; "
        "the report holds what was measured"
    )
    assert report["phases"]["sampler_warmup"]["ok"] is True  # what finished before is kept
    assert report["skipped"][-2] == "throughput: stopped, the gate's deadline_s (2s) passed"


def test_sigterm_writes_the_report_with_where_it_stopped(engine_factory, tmp_path):
    eng = engine_factory(*FAST, "--engine-fault", "stall_after:5")
    cfg = tmp_path / "gate.yml"
    cfg.write_text(json.dumps(merge(SMALL, {"throughput": {"timeout_s": 120}, "single_stream": {"enabled": False}})))
    out = tmp_path / "report"
    proc = subprocess.Popen(
        [sys.executable, "-m", "validate", "gate", "--url", eng.url, "--config", str(cfg), "--report", str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 30
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "throughput run 1/1" in line:
            break
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=20)
    assert proc.returncode == 1, "".join(lines) + rest
    report = json.loads((out / "report.json").read_text())
    assert report["stopped"] == {"phase": "throughput", "reason": "it received SIGTERM"}
    assert (
        "gate.stopped" in report["failed_checks"]
        and "**Stopped** in phase throughput" in (out / "summary.md").read_text()
    )


def test_probes_pass_on_the_expected_text_and_fail_without_it(engine_factory, tmp_path):
    eng = engine_factory(*FAST)
    probes = [
        {"prompt": "Count to five", "expect": "3, 4"},
        {"prompt": "Count to five", "expect_regex": r"^1, 2,"},
        {"prompt": "What is the capital of France?", "expect": "Paris"},
    ]
    report, _ = _gate(eng.url, tmp_path, {"answers": {"probes": probes}, "throughput": {"enabled": False}})
    assert [_check(report, f"answers.probe_{i}")["passed"] for i in (1, 2, 3)] == [True, True, False]
    assert _check(report, "answers.probe_3")["message"].startswith(
        "FAILED probe 3 ('What is the capital of France?'): the answer does not contains 'Paris': 'the test engine"
    )


def test_reference_answers_recorded_then_compared_and_other_weights_fail(engine_factory, tmp_path):
    base = tmp_path / "baseline.json"
    cfg = {"throughput": {"enabled": False}, "single_stream": {"enabled": False}}
    eng = engine_factory(*FAST)
    first, _ = _gate(eng.url, tmp_path / "1", cfg, baseline_path=str(base))
    rec = _check(first, "answers.reference")
    assert rec["passed"] and rec["message"].startswith("recorded 8 reference answers (the group has none yet")
    from validate import baseline as store

    assert store.record(base, first, promote=False)[0]
    stored = store.load(base).reference.answers
    assert len(stored["answers"]) == 8 and len(stored["answers"][0]["answer_ids"]) == 32
    same, _ = _gate(eng.url, tmp_path / "2", cfg, baseline_path=str(base))
    c = _check(same, "answers.reference")
    assert c["passed"] and c["measured"] == 0.0 and "greedy answers identical" in c["message"]
    other = engine_factory(*FAST, "--engine-weights-seed", "1")
    bad, _ = _gate(other.url, tmp_path / "3", cfg, baseline_path=str(base))
    c = _check(bad, "answers.reference")
    assert not c["passed"] and c["measured"] == pytest.approx(0.3, abs=1e-3)
    assert "greedy answers first diverge at token 0" in c["message"]


def test_usage_errors_come_before_any_load(tmp_path, capsys):
    cfg = tmp_path / "gate.yml"
    cfg.write_text("{}")
    url = "http://127.0.0.1:9"
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    unreadable = tmp_path / "server.log"
    unreadable.write_text("x")
    unreadable.chmod(0)
    cases = [
        (["--report", str(locked / "r")], "--report: cannot write into"),
        (["--report", str(tmp_path / "r"), "--log", str(tmp_path)], "is a folder, not a file"),
        (["--report", str(tmp_path / "r"), "--url", "http://no-such-host.invalid:30000"], "--url: cannot resolve host"),
    ]
    if os.geteuid() == 0:  # root reads and writes anything: the mode bits cannot refuse it
        cases = cases[1:]
    else:
        cases.append((["--report", str(tmp_path / "r"), "--log", str(unreadable)], "--log: cannot read"))
    for extra, expected in cases:
        args = ["gate", "--url", url, "--config", str(cfg), *extra]
        if "--url" in extra:
            args = ["gate", "--config", str(cfg), *extra]
        t0 = time.monotonic()
        code, _, err = run_gate(capsys, *args)
        assert code == 2 and expected in err, (extra, err)
        assert time.monotonic() - t0 < 5


def test_a_missing_container_is_a_usage_error(tmp_path, capsys, monkeypatch):
    from _gate_helpers import stub_docker

    argv = stub_docker(tmp_path, monkeypatch, 'echo "Error: No such object: sglang" >&2; exit 1')
    cfg = tmp_path / "gate.yml"
    cfg.write_text("{}")
    code, _, err = run_gate(
        capsys,
        "gate",
        "--url",
        "http://127.0.0.1:9",
        "--config",
        str(cfg),
        "--report",
        str(tmp_path / "r"),
        "--log",
        "docker:sglang",
    )
    assert code == 2 and err.strip() == "--log docker:sglang: no such container (Error: No such object: sglang)"
    assert argv.read_text().split() == ["inspect", "--format", "{{.State.Status}}", "sglang"]


def test_a_crash_of_the_gate_itself_still_writes_where_it_stopped(engine_factory, tmp_path, monkeypatch):
    from validate.phases import Measurer

    async def broken(self, when):
        raise RuntimeError("identity parser broke")

    monkeypatch.setattr(Measurer, "identity", broken)
    eng = engine_factory(*FAST)
    report, _ = _gate(eng.url, tmp_path)
    assert report["stopped"] == {"phase": "server info", "reason": "gate error RuntimeError: identity parser broke"}
    assert report["verdict"] == "fail" and "gate.stopped" in report["failed_checks"]
    assert report["phases"]["readiness"]["ready"] is True  # what was measured before the crash is kept


def test_answers_off_skips_the_phase_and_the_rule(engine_factory, tmp_path):
    eng = engine_factory(*FAST, "--engine-fault", "degenerate")
    report, _ = _gate(eng.url, tmp_path, {"answers": {"enabled": False}})
    assert report["skipped"][0] == "answers: disabled in config"
    assert report["phases"]["throughput"]["failure_reasons"] == {}  # what the gate saw before: all fine


# ----- accuracy on known answers: the first host of a group is judged too -----


def _cli(capsys, eng, tmp_path, name, over, *extra):
    """The real CLI in process on SMALL + ``over``; returns (exit code, report)."""
    cfg = tmp_path / f"{name}.yml"
    cfg.write_text(json.dumps(merge(SMALL, over)))
    code, _, err = run_gate(
        capsys, "gate", "--url", eng.url, "--config", str(cfg), "--report", str(tmp_path / name), *extra
    )
    assert "Traceback" not in err, err
    return code, json.loads((tmp_path / name / "report.json").read_text())


def test_fluent_wrong_answers_fail_the_first_host_of_a_group(engine_factory, tmp_path, capsys):
    """The stand-in proxy kind of fault: every digit the engine writes is one up; ids, counts and
    log-probabilities are the honest engine's. Everything else passes, and the group has no reference
    yet, so only answers checked against known answers can fail it."""
    eng = engine_factory(*FAST, "--engine-fault", "shifted_digits")
    base = tmp_path / "baseline.json"
    code, rep = _cli(capsys, eng, tmp_path, "first", ACCURACY, "--baseline", str(base), "--update-baseline")
    assert code == 1 and rep["failed_checks"] == ["accuracy.score"]
    c = _check(rep, "accuracy.score")
    assert c["measured"] == 0.0 and c["required"] == 0.5  # validate's default floor (the profiles set their own)
    assert "e.g. question 0: expected 10378, read 21489 from ' Working through the question" in c["message"]
    assert _check(rep, "answers.reference")["measured"] == "recorded"  # the ids are the honest ones
    assert _check(rep, "baseline.reference")["measured"] == "recorded"
    assert rep["baseline"]["updated"] is False and not base.exists()  # a failed first gate records nothing
    honest = engine_factory(*FAST)
    code, rep = _cli(capsys, honest, tmp_path, "honest", ACCURACY, "--baseline", str(base), "--update-baseline")
    assert code == 0 and rep["baseline"]["updated"] is True
    stored = json.loads(base.read_text())["reference"]
    assert stored["accuracy"] == rep["accuracy"] and stored["accuracy"]["correct"] == 8
    assert stored["accuracy"]["settings"]["fingerprint"] == rep["phases"]["accuracy"]["settings"]["fingerprint"]
    assert len(stored["answers"]["answers"]) == 8


def test_changed_settings_fail_the_comparison_until_promoted_on_purpose(engine_factory, tmp_path, capsys):
    eng = engine_factory(*FAST)
    base = tmp_path / "baseline.json"
    code, _ = _cli(capsys, eng, tmp_path, "r0", ANSWERS_ONLY, "--baseline", str(base), "--update-baseline")
    assert code == 0
    same = _cli(capsys, eng, tmp_path, "r1", ANSWERS_ONLY, "--baseline", str(base))[1]
    assert same["verdict"] == "pass" and _check(same, "accuracy.reference")["measured"] == 0.0
    changed = merge(ANSWERS_ONLY, {"accuracy": {"seed": 2}, "answers": {"reference": {"max_new_tokens": 16}}})
    code, rep = _cli(capsys, eng, tmp_path, "r2", changed, "--baseline", str(base), "--update-baseline")
    assert code == 1 and rep["failed_checks"] == ["answers.reference", "accuracy.reference"]
    when = rep["phases"]["accuracy"]["reference_from"]
    assert _check(rep, "answers.reference")["message"].startswith(
        f"FAILED the reference answers were not compared with the group's reference: reference answers settings "
        f"changed since the reference (from {when}): max_new_tokens: 32 -> 16; to accept the change on purpose, "
        "promote this gate to the group's reference: --promote-baseline (role variable sglang_gate_promote_baseline"
    )
    acc = _check(rep, "accuracy.reference")["message"]
    assert f"accuracy settings changed since the reference (from {when}): seed: 1 -> 2; fingerprint: '" in acc
    assert json.loads(base.read_text())["reference"]["accuracy"]["settings"]["seed"] == 1  # kept: a failure
    code, rep = _cli(capsys, eng, tmp_path, "r3", changed, "--baseline", str(base), "--promote-baseline")
    assert code == 0 and rep["baseline"]["updated"] is True and rep["failed_checks"] == []
    assert _check(rep, "accuracy.reference")["message"].startswith("accepted on purpose (--promote-baseline")
    doc = json.loads(base.read_text())
    assert doc["reference"]["accuracy"]["settings"]["seed"] == 2 and doc["reference"]["answers"]["max_new_tokens"] == 16
    assert doc["history"][0]["accuracy"]["settings"]["seed"] == 1
    after = _cli(capsys, eng, tmp_path, "r4", changed, "--baseline", str(base))[1]
    assert after["verdict"] == "pass" and _check(after, "answers.reference")["measured"] == 0.0


def test_a_finalize_that_promotes_accepts_what_the_gate_could_not_compare(engine_factory, tmp_path, capsys):
    """The role's way: the gate (on the host) cannot compare and fails; finalize --promote-baseline on the
    controller accepts that on purpose and writes the reference."""
    eng = engine_factory(*FAST)
    base = tmp_path / "baseline.json"
    base.write_text("{broken")
    code, rep = _cli(capsys, eng, tmp_path, "g", ANSWERS_ONLY, "--baseline", str(base))
    assert code == 1 and rep["failed_checks"] == ["answers.reference", "accuracy.reference", "baseline.reference"]
    assert "the group's reference cannot be read: " in _check(rep, "baseline.reference")["message"]
    window = tmp_path / "window.log"
    window.write_text("fine\n")
    code, _, _ = run_gate(
        capsys, "finalize", "--report", str(tmp_path / "g"), "--log", str(window), "--baseline", str(base)
    )
    assert code == 1 and base.read_text() == "{broken"
    code, _, _ = run_gate(
        capsys, "finalize", "--report", str(tmp_path / "g"), "--log", str(window), "--baseline", str(base),
        "--promote-baseline",
    )  # fmt: skip
    assert code == 0 and json.loads(base.read_text())["reference"]["how"] == "promoted (--promote-baseline)"
    final = json.loads((tmp_path / "g" / "report.json").read_text())
    assert final["verdict"] == "pass" and final["baseline"]["updated"] is True


def test_an_accuracy_phase_that_stalls_stops_the_phases_after_it(engine_factory, tmp_path):
    eng = engine_factory(*FAST, "--engine-fault", "stall_after:5")  # the 4-token sampled warm-up passes
    t0 = time.monotonic()
    report, _ = _gate(eng.url, tmp_path, merge(ACCURACY, {"accuracy": {"timeout_s": 1}}))
    assert time.monotonic() - t0 < 8
    assert report["skipped"][1:3] == [
        "single_stream: skipped, the server stalled (accuracy questions unanswered at the 1s deadline)",
        "throughput: skipped, the server stalled (accuracy questions unanswered at the 1s deadline)",
    ]
    assert report["phases"]["accuracy"]["timed_out"] is True
    assert _check(report, "accuracy.failed_requests")["message"].startswith(
        "FAILED accuracy: 8 of 8 requests failed (8 not finished within the 1s deadline or failed)"
    )


def test_a_reference_phase_that_stalls_stops_the_phases_after_it(engine_factory, tmp_path):
    eng = engine_factory(*FAST, "--engine-fault", "stall_after:5")
    cfg = {"answers": {"reference": {"timeout_s": 1}}, "throughput": {"timeout_s": 2}}
    t0 = time.monotonic()
    report, _ = _gate(eng.url, tmp_path, cfg, baseline_path=str(tmp_path / "b.json"))
    assert time.monotonic() - t0 < 8
    assert _check(report, "answers.reference")["message"] == "FAILED reference answers: no answer within 1s"
    assert report["skipped"][1] == (
        "single_stream: skipped, the server stalled (a reference answer did not come within "
        "answers.reference.timeout_s = 1s)"
    )


def test_the_deadline_bounds_the_log_fetch_and_the_report_is_written(tmp_path, capsys, monkeypatch, engine_factory):
    from _gate_helpers import stub_docker

    eng = engine_factory(*FAST)
    # `docker logs` never ends (a daemon that hangs); `docker inspect` answers at once
    stub_docker(tmp_path, monkeypatch, 'case "$1" in logs) exec sleep 60;; *) echo "0 2026-12-05T22:40:01Z";; esac')
    over = {"deadline_s": 4, "throughput": {"enabled": False}, "single_stream": {"enabled": False}}
    t0 = time.monotonic()
    code, rep = _cli(capsys, eng, tmp_path, "r", over, "--log", "docker:srv")
    took = time.monotonic() - t0
    assert code == 1 and took < 4 + 1.5, took  # the report written within deadline_s
    c = _check(rep, "logs.crash_signatures")
    assert (
        not c["passed"]
        and c["message"].startswith("FAILED cannot read log: docker logs srv: did not finish within ")
        and c["message"].endswith("s (the time left before the deadline)")
    )
    assert rep["stopped"] is None  # measuring had ended: only the fetch hit the deadline


def test_a_signal_while_the_report_is_written_waits_for_it(tmp_path):
    """SIGTERM after measuring, while the report and the baseline are written: the handlers are still in
    place, so the process finishes its report instead of dying without one (exit -15)."""
    script = tmp_path / "run.py"
    script.write_text(
        "import asyncio, os, signal, sys, time\n"
        "from validate.config import parse_config\n"
        "from validate.gate import Gate, GateOptions\n"
        "cfg = parse_config({'readiness': {'timeout_s': 0.3, 'interval_s': 0.1, 'request_timeout_s': 0.1}})\n"
        "def finish(report, left):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(0.3)\n"
        "    open(sys.argv[1], 'w').write(report['verdict'] + ' %.0f' % left)\n"
        "    return 7\n"
        "opts = GateOptions(url='http://127.0.0.1:9', config=cfg, config_path='x')\n"
        "print('finished', asyncio.run(Gate(opts, lambda m: None).run_then(finish)))\n"
    )
    out = tmp_path / "written"
    proc = subprocess.run([sys.executable, str(script), str(out)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "finished 7", proc.stdout + proc.stderr
    verdict, left = out.read_text().split()
    assert verdict == "fail" and 3000 < int(left) <= 3300  # what deadline_s leaves for the baseline's lock
