"""The gate's node_exporter textfile (validate/textfile.py, ``python -m validate textfile``): what
Prometheus reads of a host's last gate, checked with promtool and parsed with prometheus_client."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from validate import textfile

REPO = Path(__file__).resolve().parents[2]
# a real gate report: SGLang 0.5.17 on the H200, answered by a model with other weights (failed)
FAILED = REPO / "tests/fixtures/sglang-0.5.17-h200-2026-12-04/gate-answers-other.report.json"
LABELS = {"image": "reg/sglang-glm5:0.5.23-cu130", "model": "glm-5", "profile": "rtx_pro_6000"}


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "validate", "textfile", *args],
        cwd=REPO, input=stdin, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_failed_real_report_says_which_check_failed(tmp_path: Path, promtool, prom_samples) -> None:
    out = tmp_path / "sglang_gate_sglang.prom"
    args = [f"--label={k}={v}" for k, v in LABELS.items()]
    run = cli("--report", str(FAILED), "--out", str(out), *args)
    assert run.returncode == 0, run.stderr
    assert "fail (answers.reference)" in run.stdout
    text = out.read_text()
    lint = promtool(text)
    assert lint.returncode == 0 and lint.stdout + lint.stderr == "", lint.stdout + lint.stderr
    got = prom_samples(text)
    base = frozenset({**LABELS, "engine": "sglang"}.items())
    assert got[("sglang_gate_passed", base)] == 0.0
    assert got[("sglang_gate_failed_checks", base)] == 1.0
    report = json.loads(FAILED.read_text())
    for check in report["checks"]:
        want = 1.0 if check["passed"] else 0.0
        assert got[("sglang_gate_check_passed", base | {("check", check["name"])})] == want, check["name"]
    assert got[("sglang_gate_duration_seconds", base)] == report["duration_s"] == 3.78
    ended = datetime.fromisoformat(report["started_at"]).timestamp() + 3.78
    assert got[("sglang_gate_last_run_timestamp_seconds", base)] == pytest.approx(ended)
    # the load phases were off in that gate: no throughput or latency series at all (not a zero)
    assert not any("throughput" in name or "latency" in name for name, _ in got)


def test_figures_are_in_base_units_and_the_rollouts_verdict_wins(tmp_path: Path, promtool, prom_samples) -> None:
    report = json.loads(FAILED.read_text())
    report["verdict"], report["failed_checks"] = "pass", []
    report["checks"] = [c | {"passed": True} for c in report["checks"]]
    report["key_metrics"] = {
        "total_token_throughput": 35083.0, "output_token_throughput": 11694.5, "request_throughput": 91.4,
        "single_stream_decode_tok_s": 617.0, "p99_ttft_ms": 377.0, "p99_e2e_latency_ms": 2781.0,
        "mean_e2e_latency_ms": None,
    }  # fmt: skip
    out = tmp_path / "g.prom"
    # the gate passed, but the rollout could not read the server's log of the gate window
    run = cli("--report", "-", "--out", str(out), "--verdict", "fail", "--failed-check", "logs.window",
              *[f"--label={k}={v}" for k, v in LABELS.items()], stdin=json.dumps(report))  # fmt: skip
    assert run.returncode == 0, run.stderr
    text = out.read_text()
    assert promtool(text).returncode == 0
    got = prom_samples(text)
    base = frozenset({**LABELS, "engine": "sglang"}.items())
    assert got[("sglang_gate_passed", base)] == 0.0
    assert got[("sglang_gate_check_passed", base | {("check", "logs.window")})] == 0.0
    assert got[("sglang_gate_failed_checks", base)] == 1.0
    assert got[("sglang_gate_total_token_throughput_tokens_per_second", base)] == 35083.0
    assert got[("sglang_gate_output_token_throughput_tokens_per_second", base)] == 11694.5
    assert got[("sglang_gate_request_throughput_requests_per_second", base)] == 91.4
    assert got[("sglang_gate_single_stream_decode_tokens_per_second", base)] == 617.0
    assert got[("sglang_gate_p99_ttft_seconds", base)] == pytest.approx(0.377)
    assert got[("sglang_gate_p99_e2e_latency_seconds", base)] == pytest.approx(2.781)
    assert ("sglang_gate_mean_e2e_latency_seconds", base) not in got  # not measured: no series


def test_no_report_is_a_failed_gate(tmp_path: Path, prom_samples) -> None:
    m = textfile.GateMetrics.from_report({}, {"engine": "test-engine"}, "fail", ["readiness"])
    got = prom_samples(textfile.render(m))
    assert got[("sglang_gate_passed", frozenset({"engine": "test-engine", "image": "", "model": "",
                                                 "profile": ""}.items()))] == 0.0  # fmt: skip
    assert m.failed == ["readiness"] and m.duration_s is None and m.finished_at is None


def test_the_file_is_replaced_by_a_rename_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    out = tmp_path / "sglang_gate_x.prom"
    out.write_text("# stale\n")
    before = out.stat().st_ino
    textfile.write(textfile.GateMetrics.from_report(json.loads(FAILED.read_text()), LABELS), out)
    assert out.stat().st_ino != before  # a new file renamed over the old one, not rewritten in place
    assert [p.name for p in tmp_path.iterdir()] == [out.name]
    assert out.read_text().startswith("# HELP sglang_gate_passed")


def test_a_report_that_is_not_an_object_exits_2(tmp_path: Path) -> None:
    run = cli("--report", "-", "--out", str(tmp_path / "x.prom"), stdin="[1, 2]")
    assert run.returncode == 2 and "must be a JSON object" in run.stderr, run.stderr
    assert not (tmp_path / "x.prom").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--out", "x.txt"], "node_exporter's textfile collector reads only *.prom files"),
        (["--out", "x.prom", "--label", "host=h1"], "KEY one of image, model, profile, engine"),
    ],
)
def test_bad_use_exits_2_naming_the_flag(tmp_path: Path, args: list[str], needle: str) -> None:
    run = cli("--report", str(FAILED), *[a.replace("x.", str(tmp_path / "x.")) for a in args])
    assert run.returncode == 2 and needle in run.stderr, run.stderr
