"""Bad config or usage: exit 2, one clear line naming the field, never a traceback."""

from __future__ import annotations

import pytest
from _gate_helpers import REPO, run_gate, write_config

from validate.config import load_config

URL = "http://127.0.0.1:9"  # never contacted: config errors stop the gate first


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"throughput": {"num_prompt": 5}},
            "throughput.num_prompt: unknown key (allowed here: enabled, num_prompts",
        ),
        ({"throughput": {"min_total_tok_s": "abc"}}, "throughput.min_total_tok_s: must be a number > 0"),
        ({"single_stream": {"min_decode_tok_s": -3}}, "single_stream.min_decode_tok_s: must be a number > 0"),
        (
            {"stability": {"concurrency": [16, 0]}},
            "stability.concurrency[1]: must be a whole number > 0 (got 0)",
        ),
        ({"baseline": {"metrics": ["speed"]}}, "baseline.metrics[0]: must be one of: total_token_throughput"),
        ({"baseline": {"tolerance": 2}}, "baseline.tolerance: must be a number > 0 and <= 1 (got 2)"),
        ({"readiness": {"timeout_s": None}}, "readiness.timeout_s: must be a number > 0 (got None)"),
        ({"thruput": {}}, "thruput: unknown key (allowed here: progress_interval_s, readiness, throughput"),
        ({"logs": {"extra_signatures": [{"name": "x", "pattern": "("}]}}, "not a valid regular expression"),
    ],
)
def test_bad_field_is_named(tmp_path, capsys, overrides, expected):
    cfg = write_config(tmp_path, overrides)
    code, out, err = run_gate(capsys, "gate", "--url", URL, "--config", str(cfg), "--report", str(tmp_path / "r"))
    assert code == 2
    assert expected in err
    assert "Traceback" not in err + out
    assert not (tmp_path / "r" / "report.json").exists()


def test_missing_file_and_bad_yaml(tmp_path, capsys):
    code, _, err = run_gate(
        capsys, "gate", "--url", URL, "--config", str(tmp_path / "nope.yml"), "--report", str(tmp_path / "r")
    )
    assert code == 2 and "gate config: file not found" in err
    bad = tmp_path / "bad.yml"
    bad.write_text("throughput:\n  num_prompts: [1,\n")
    code, _, err = run_gate(capsys, "gate", "--url", URL, "--config", str(bad), "--report", str(tmp_path / "r"))
    assert code == 2 and "not valid YAML at line" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--label", "novalue"], "--label: must be key=value"),
        (["--log", "/nonexistent/server.log"], "--log: file not found"),
        (["--update-baseline"], "--update-baseline: needs --baseline FILE"),
        (["--patch-record", "/nonexistent/patches.json"], "--patch-record: patch record not found"),
    ],
)
def test_bad_usage_is_named(tmp_path, capsys, extra, expected):
    cfg = write_config(tmp_path)
    code, _, err = run_gate(capsys, "gate", "--url", URL, "--config", str(cfg), "--report", str(tmp_path / "r"), *extra)
    assert code == 2 and expected in err and "Traceback" not in err


def test_bad_url_is_named(tmp_path, capsys):
    cfg = write_config(tmp_path)
    code, _, err = run_gate(
        capsys, "gate", "--url", "localhost:30000", "--config", str(cfg), "--report", str(tmp_path / "r")
    )
    assert code == 2 and "--url: must look like http://HOST:PORT" in err


def test_missing_required_flag_is_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        run_gate(capsys, "gate", "--url", URL)
    assert exc.value.code == 2
    assert "--config" in capsys.readouterr().err


def test_shipped_configs_are_valid():
    ref = load_config(REPO / "validate" / "configs" / "reference.yml")
    assert ref.throughput.min_total_tok_s == 1846 and ref.throughput.min_output_tok_s == 615
    assert ref.single_stream.min_decode_tok_s == 30 and ref.stability.concurrency == [256, 512, 1024]
    assert ref.throughput.num_prompts == 256 and ref.throughput.request_rate == float("inf")
    # The 8 tok/s reference run (500 tokens in 62.6 s) must fail the single-stream floor.
    assert ref.single_stream.min_decode_tok_s > 500 / 62.6
    ci = load_config(REPO / "validate" / "configs" / "test-engine.yml")
    assert ci.stability.concurrency == [16, 32, 64] and ci.throughput.num_prompts == 64
