"""summary.md is what an operator reads at 3 a.m.: each check's figure with its unit, ratios in percent."""

from __future__ import annotations

from validate.report import render_summary


def _report(*checks: dict) -> dict:
    return {
        "schema_version": 2,
        "verdict": "fail",
        "failed_checks": [c["name"] for c in checks if not c["passed"]],
        "checks": list(checks),
    }


def test_spread_reads_as_a_percentage_not_a_rounded_ratio():
    # The overflow run on the H200: a 13.5 % spread showed as "0.1 ratio | <= 0.1".
    text = render_summary(
        _report(
            {
                "name": "throughput.spread",
                "passed": False,
                "measured": 0.1353,
                "required": 0.1,
                "unit": "ratio",
                "message": "FAILED unstable",
                "op": "<=",
            }
        )
    )
    assert "| **FAIL** | throughput.spread | 13.5 % | <= 10.0 % | FAILED unstable |" in text


def test_figures_keep_their_units_on_both_sides():
    text = render_summary(_report(
        {"name": "throughput.total_tok_s", "passed": True, "measured": 6619.52, "required": 1000.0,
         "unit": "tok/s", "message": "ok", "op": ">="},
        {"name": "throughput.failed_requests", "passed": False, "measured": 724, "required": 0,
         "unit": "requests", "message": "FAILED 724 of 768", "op": "<="},
        {"name": "stability", "passed": False, "measured": None, "required": None, "unit": "", "message": "x"},
    ))  # fmt: skip
    assert "| ok | throughput.total_tok_s | 6,619.5 tok/s | >= 1,000.0 tok/s | ok |" in text
    assert "| **FAIL** | throughput.failed_requests | 724 requests | <= 0 requests | FAILED 724 of 768 |" in text
    assert "| **FAIL** | stability | - | - | x |" in text


def test_a_refused_throughput_phase_and_a_stopped_gate_read_as_words():
    """An open-file refusal leaves a throughput dict without figures: it used to raise KeyError 'completed'."""
    report = {
        **_report(),
        "stopped": {"phase": "stability step 2/3", "reason": "it received SIGTERM"},
        "phases": {"throughput": {"runs": [], "refused": "needs 1088 open files for 1024 concurrent streams"}},
    }
    text = render_summary(report)
    assert "Throughput phase refused: needs 1088 open files for 1024 concurrent streams" in text
    assert "**Stopped** in phase stability step 2/3 because it received SIGTERM." in text
    assert "## Throughput at saturation" not in text


def test_the_accuracy_reads_as_one_line_of_counts():
    settings = {"set": "sglang-deploy-arithmetic", "version": 1, "seed": 1, "shots": 5}
    acc = {"settings": settings, "questions": 200, "correct": 0, "invalid": 3, "failed": 1, "accuracy": 0.0}
    text = render_summary({**_report(), "phases": {"accuracy": {**acc, "seconds": 14.25}}})
    assert (
        "Accuracy on known answers: 0 of 200 right (0.000), 3 invalid, 1 failed, in 14.2 s "
        "(sglang-deploy-arithmetic v1, seed 1, 5-shot)." in text
    )
    assert "Accuracy on known answers" not in render_summary(_report())
