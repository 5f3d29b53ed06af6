# ruff: noqa: E501  (the expected messages are whole lines, compared word for word)
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
            "stability.concurrency[1]: must be a whole number > 0 and <= 16,384 (got 0)",
        ),
        ({"baseline": {"metrics": ["speed"]}}, "baseline.metrics[0]: must be one of: total_token_throughput"),
        ({"baseline": {"tolerance": 2}}, "baseline.tolerance: must be a number > 0 and <= 1 (got 2)"),
        ({"readiness": {"timeout_s": None}}, "readiness.timeout_s: must be a number > 0 and <= 86,400 (got None)"),
        (
            {"thruput": {}},
            "thruput: unknown key (allowed here: model, deadline_s, progress_interval_s, readiness, sampling, answers, accuracy, throughput",
        ),
        ({"logs": {"extra_signatures": [{"name": "x", "pattern": "("}]}}, "not a pattern RE2 accepts"),
        (
            {"throughput": {"num_prompts": True}},
            "throughput.num_prompts: must be a whole number > 0 and <= 100,000 (got True)",
        ),
        ({"stability": {"enabled": "yes"}}, "stability.enabled: must be true or false (got 'yes')"),
        (
            {"throughput": {"min_total_tok_s": "100"}},
            "throughput.min_total_tok_s: must be a number > 0 and <= 1,000,000,000 (or null) (got '100')",
        ),
        (
            {"readiness": {"timeout_s": float("inf")}},
            "readiness.timeout_s: must be a finite number > 0 and <= 86,400 (got inf)",
        ),
        (
            {"stability": {"step_timeout_s": float("nan")}},
            "stability.step_timeout_s: must be a finite number > 0 and <= 86,400 (got nan)",
        ),
        ({"throughput": {"repeats": 0}}, "throughput.repeats: must be a whole number > 0 and <= 20 (got 0)"),
        ({"throughput": {"max_spread": -0.1}}, "throughput.max_spread: must be a number > 0 and <= 10 (got -0.1)"),
    ],
)
def test_bad_field_is_named(tmp_path, capsys, overrides, expected):
    cfg = write_config(tmp_path, overrides)
    code, out, err = run_gate(capsys, "gate", "--url", URL, "--config", str(cfg), "--report", str(tmp_path / "r"))
    assert code == 2
    assert expected in err
    assert "Traceback" not in err + out
    assert not (tmp_path / "r" / "report.json").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "throughput:\n  num_prompts: 5\n  num_prompts: 6\n",
            "duplicate key 'num_prompts' at line 3 (first at line 2)",
        ),
        ("throughput: {}\nthroughput: {}\n", "duplicate key 'throughput' at line 2 (first at line 1)"),
        ("", "the file is empty"),
        ("# only a comment\n", "the file is empty"),
        ("- 1\n- 2\n", "the top level must be a mapping"),
    ],
)
def test_yaml_shape_errors_are_named(tmp_path, capsys, text, expected):
    cfg = tmp_path / "gate.yml"
    cfg.write_text(text)
    code, out, err = run_gate(capsys, "gate", "--url", URL, "--config", str(cfg), "--report", str(tmp_path / "r"))
    assert code == 2 and expected in err and "Traceback" not in out + err


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
        (["--promote-baseline"], "--promote-baseline: needs --baseline FILE"),
        (["--patch-record", "/nonexistent/patches.json"], "--patch-record: patch record not found"),
        (["--log", "docker:"], "--log: docker:NAME needs a container name (got 'docker:')"),
    ],
)
def test_bad_usage_is_named(tmp_path, capsys, extra, expected):
    # (an unusable baseline is no usage error: it fails baseline.reference, naming how to accept it)
    cfg = write_config(tmp_path)
    code, _, err = run_gate(capsys, "gate", "--url", URL, "--config", str(cfg), "--report", str(tmp_path / "r"), *extra)
    assert code == 2 and expected in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("localhost:30000", "--url: must look like http://HOST:PORT"),
        ("http://127.0.0.1:99999", "--url: bad port"),
        ("http://127.0.0.1:0", "--url: bad port"),
        ("http://127.0.0.1:30000/?x=1", "no query, fragment or spaces"),
        ("http://user:pw@127.0.0.1:30000", "must not carry credentials"),
        ("ftp://127.0.0.1:30000", "--url: must look like http://HOST:PORT"),
    ],
)
def test_bad_url_is_named(tmp_path, capsys, url, expected):
    cfg = write_config(tmp_path)
    code, _, err = run_gate(capsys, "gate", "--url", url, "--config", str(cfg), "--report", str(tmp_path / "r"))
    assert code == 2 and expected in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ("[1, 2]", "must be a JSON object"),
        ("{bad", "is not valid JSON"),
        ('{"fixes": ["dsa"]}', "fixes: must be an object"),
        (
            '{"fixes": {"dsa-fp8-page-table-guard": {"status": 3}}}',
            "fixes.dsa-fp8-page-table-guard.status: must be a string",
        ),
    ],
)
def test_malformed_patch_record_is_named(tmp_path, capsys, record, expected):
    cfg = write_config(tmp_path)
    rec = tmp_path / "patches.json"
    rec.write_text(record)
    code, _, err = run_gate(
        capsys, "gate", "--url", URL, "--config", str(cfg), "--report", str(tmp_path / "r"), "--patch-record", str(rec)
    )
    assert code == 2 and "--patch-record" in err and expected in err and "Traceback" not in err


def test_missing_required_flag_is_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        run_gate(capsys, "gate", "--url", URL)
    assert exc.value.code == 2
    assert "--config" in capsys.readouterr().err


def test_shipped_configs_are_valid():
    ref = load_config(REPO / "validate" / "configs" / "reference.yml")
    assert ref.throughput.min_total_tok_s == 1846 and ref.throughput.min_output_tok_s == 615
    assert ref.single_stream.min_decode_tok_s == 60 and ref.stability.concurrency == [256, 512, 1024]
    assert ref.throughput.num_prompts == 256 and ref.throughput.request_rate == float("inf")
    # The 8 tok/s reference run (500 tokens in 62.6 s) must fail the single-stream floor.
    assert ref.single_stream.min_decode_tok_s > 500 / 62.6
    ci = load_config(REPO / "validate" / "configs" / "test-engine.yml")
    assert ci.stability.concurrency == [16, 32, 64] and ci.throughput.num_prompts == 64


# Whole messages, word for word: the operator reads exactly this line (substring checks let a
# wrong bound, a lost "(or null)" or a wrong path slip through).
EXACT = [
    (
        {"throughput": {"num_prompts": 0}},
        "gate config: throughput.num_prompts: must be a whole number > 0 and <= 100,000 (got 0)",
    ),
    (
        {"throughput": {"warmup_requests": -1}},
        "gate config: throughput.warmup_requests: must be a whole number >= 0 and <= 1,024 (got -1)",
    ),
    (
        {"throughput": {"seed": 1.5}},
        "gate config: throughput.seed: must be a whole number >= 0 and <= 1,000,000,000 (got 1.5)",
    ),
    (
        {"throughput": {"max_concurrency": 0}},
        "gate config: throughput.max_concurrency: must be a whole number > 0 and <= 16,384 (or null) (got 0)",
    ),
    (
        {"throughput": {"min_total_tok_s": 0}},
        "gate config: throughput.min_total_tok_s: must be a number > 0 and <= 1,000,000,000 (or null) (got 0)",
    ),
    ({"throughput": {"max_spread": 11}}, "gate config: throughput.max_spread: must be a number > 0 and <= 10 (got 11)"),
    ({"throughput": {"max_noise": 1.5}}, "gate config: throughput.max_noise: must be a number > 0 and <= 1 (got 1.5)"),
    (
        {"throughput": {"max_spread": float("inf")}},
        "gate config: throughput.max_spread: must be a finite number > 0 and <= 10 (got inf)",
    ),
    ({"throughput": {"request_rate": -1}}, "gate config: throughput.request_rate: must be a number > 0 (got -1)"),
    ({"throughput": {"enabled": 1}}, "gate config: throughput.enabled: must be true or false (got 1)"),
    ({"readiness": {"interval_s": 0}}, "gate config: readiness.interval_s: must be a number > 0 and <= 86,400 (got 0)"),
    (
        {"single_stream": {"prompt": ""}},
        "gate config: single_stream.prompt: must be a string of at most 100,000 characters (must not be empty) (got '')",
    ),
    (
        {"single_stream": {"prompt": 5}},
        "gate config: single_stream.prompt: must be a string of at most 100,000 characters (got 5)",
    ),
    (
        {"stability": {"concurrency": []}},
        "gate config: stability.concurrency: must be a non-empty list of at most 16 items; each item a whole number > 0 and <= 16,384 (got [])",
    ),
    (
        {"stability": {"concurrency": "256"}},
        "gate config: stability.concurrency: must be a non-empty list of at most 16 items; each item a whole number > 0 and <= 16,384 (got '256')",
    ),
    (
        {"stability": {"concurrency": [8, True]}},
        "gate config: stability.concurrency[1]: must be a whole number > 0 and <= 16,384 (got True)",
    ),
    (
        {"stability": {"health_timeout_s": float("-inf")}},
        "gate config: stability.health_timeout_s: must be a finite number > 0 and <= 86,400 (got -inf)",
    ),
    (
        {"logs": {"context_lines": -2}},
        "gate config: logs.context_lines: must be a whole number >= 0 and <= 50 (got -2)",
    ),
    (
        {"logs": {"extra_signatures": [{"name": "x"}]}},
        "gate config: logs.extra_signatures[0].pattern: required key is missing",
    ),
    (
        {"logs": {"extra_signatures": [{"name": "x", "pattern": "a", "flags": 1}]}},
        "gate config: logs.extra_signatures[0].flags: unknown key (allowed here: name, pattern)",
    ),
    (
        {"logs": {"extra_signatures": [{"name": "", "pattern": "a"}]}},
        "gate config: logs.extra_signatures[0].name: must be a string of at most 100 characters (must not be empty) (got '')",
    ),
    (
        {"logs": {"extra_signatures": [{"name": "bad", "pattern": "(x"}]}},
        "gate config: logs.extra_signatures: signature 'bad': not a pattern RE2 accepts (no backreferences or look-around): missing ): (x",
    ),
    (
        {"logs": {"extra_signatures": "x"}},
        "gate config: logs.extra_signatures: must be a list of at most 64 items; each item a mapping (keys: name, pattern) (got 'x')",
    ),
    ({"baseline": {"tolerance": 0}}, "gate config: baseline.tolerance: must be a number > 0 and <= 1 (got 0)"),
    (
        {"baseline": {"metrics": ["p99_ttft_ms", "x"]}},
        "gate config: baseline.metrics[1]: must be one of: total_token_throughput, output_token_throughput, request_throughput, "
        "single_stream_decode_tok_s, p99_ttft_ms, p99_e2e_latency_ms, mean_e2e_latency_ms (got 'x')",
    ),
    (
        {"baseline": {"extra": 1}},
        "gate config: baseline.extra: unknown key (allowed here: tolerance, noise_z, max_drop, confirm, confirm_wait_s, metrics)",
    ),
    (
        {"baseline": 5},
        "gate config: baseline: must be a mapping (keys: tolerance, noise_z, max_drop, confirm, confirm_wait_s, metrics) (got 5)",
    ),
    ({"progress_interval_s": "10"}, "gate config: progress_interval_s: must be a number > 0 and <= 86,400 (got '10')"),
    (
        {"baseline": {"confirm_wait_s": 601}},
        "gate config: baseline.confirm_wait_s: must be a number >= 0 and <= 600 (got 601)",
    ),
]


@pytest.mark.parametrize(("data", "expected"), EXACT, ids=[e[1].split(":")[1].strip() for e in EXACT])
def test_each_rule_reads_as_one_exact_line(data, expected):
    from validate.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    assert str(exc.value) == expected


def test_every_bad_field_gets_its_own_line_once():
    from validate.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as exc:
        parse_config({"throughput": {"num_prompts": 0, "output_len": 0}, "thruput": 1})
    assert str(exc.value).splitlines() == [
        "gate config: throughput.num_prompts: must be a whole number > 0 and <= 100,000 (got 0)",
        "gate config: throughput.output_len: must be a whole number > 0 and <= 131,072 (got 0)",
        "gate config: thruput: unknown key (allowed here: model, deadline_s, progress_interval_s, readiness, sampling, answers, accuracy, throughput, single_stream, stability, logs, baseline)",
    ]


def test_top_level_and_empty_documents_say_which_file(tmp_path):
    from validate.config import ConfigError, parse_config

    for data, expected in (
        (None, "gate.yml: the file is empty (start from validate/configs/reference.yml)"),
        ([1], "gate.yml: the top level must be a mapping of sections"),
        ("text", "gate.yml: the top level must be a mapping of sections"),
    ):
        with pytest.raises(ConfigError) as exc:
            parse_config(data, "gate.yml")
        assert str(exc.value) == expected
    assert parse_config({}).throughput.repeats == 3 and parse_config(
        {"throughput": {"request_rate": "inf"}}
    ).throughput.request_rate == float("inf")
    assert parse_config({"throughput": {"request_rate": " Infinity "}}).throughput.request_rate == float("inf")
    assert parse_config({"throughput": {"min_total_tok_s": 100}}).throughput.min_total_tok_s == 100.0


def test_load_config_names_the_file_the_line_and_the_column(tmp_path):
    from validate.config import ConfigError, load_config

    cases = {
        "dup.yml": (
            "logs:\n  enabled: true\n  enabled: false\n",
            "duplicate key 'enabled' at line 3 (first at line 2)",
        ),
        "bad.yml": (
            "throughput:\n  num_prompts: [1\n",
            "not valid YAML at line 3, column 1: expected ',' or ']', but got '<stream end>'",
        ),
        "tab.yml": (
            "a:\n\t- b\n",
            "not valid YAML at line 2, column 1: found character '\\t' that cannot start any token",
        ),
    }
    for name, (text, tail) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ConfigError) as exc:
            load_config(path)
        assert str(exc.value) == f"gate config: {path}: {tail}"
    with pytest.raises(ConfigError) as exc:
        load_config(tmp_path)
    assert str(exc.value) == f"gate config: file not found: {tmp_path}"
    binary = tmp_path / "bin.yml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError) as exc:
        load_config(binary)
    assert str(exc.value).startswith(f"gate config: {binary}: cannot read: ") and "codec" in str(exc.value)
    ok = tmp_path / "ok.yml"
    ok.write_text("throughput:\n  repeats: 5\n")
    assert load_config(str(ok)).throughput.repeats == 5
    empty = tmp_path / "empty.yml"
    empty.write_text("")
    with pytest.raises(ConfigError) as exc:
        load_config(empty)
    assert str(exc.value) == f"gate config: {empty}: the file is empty (start from validate/configs/reference.yml)"


def _fields(model, prefix=()):
    from validate.config import _model_of

    for name, info in model.model_fields.items():
        yield (*prefix, name), info
        sub = _model_of(info.annotation)
        if sub is not None:
            yield from _fields(sub, (*prefix, name, 0) if "list" in str(info.annotation) else (*prefix, name))


def test_every_field_has_a_rule_and_every_constraint_is_said():
    """A new field or constraint the message builder does not know fails here, not at 3 a.m."""
    import typing

    import annotated_types

    from validate.config import BOUNDS, GateConfig, _field_for, _rule, _unannotate

    known = {getattr(annotated_types, a.capitalize()) for a, _ in BOUNDS} | {
        annotated_types.MinLen,
        annotated_types.MaxLen,
    }
    seen = 0
    for loc, _info in _fields(GateConfig):
        ann, meta = _field_for(loc)
        rule = _rule(ann, meta)
        assert rule.startswith("must be "), (loc, rule)
        inner = [_unannotate(a)[1] for a in (ann, *typing.get_args(ann))]
        for m in meta + [m for ms in inner for m in ms]:
            if type(m).__module__ == "annotated_types":
                assert type(m) in known, (loc, m)
        seen += 1
    assert seen == 89  # every field of every section (update when a field is added)
    assert _field_for(("throughput", "nope")) == (None, [])


BOUNDED = [
    (
        {"throughput": {"input_len": 100_000_000}},
        "gate config: throughput.input_len: must be a whole number > 0 and <= 131,072 (got 100000000)",
    ),
    (
        {"stability": {"concurrency": list(range(1, 200_001))}},
        "gate config: stability.concurrency: must be a non-empty list of at most 16 items; each item a whole "
        "number > 0 and <= 16,384 (got 200,000 items)",
    ),
    (
        {"throughput": {"num_prompts": 100_000, "input_len": 1000}},
        "gate config: throughput: 100000 prompts x 1000 tokens = 100,000,000 prompt tokens, more than the "
        "64,000,000 the gate holds in memory",
    ),
    (
        {"throughput": {"repeats": 5, "max_repeats": 3}},
        "gate config: throughput.max_repeats (3) must be >= throughput.repeats (5)",
    ),
    (
        {"logs": {"extra_signatures": [{"name": "dup", "pattern": r"(a)\1"}]}},
        "gate config: logs.extra_signatures: signature 'dup': not a pattern RE2 accepts (no backreferences or "
        "look-around): invalid escape sequence: \\1",
    ),
    (
        {"answers": {"probes": [{"prompt": "hi"}]}},
        "gate config: answers.probes[0]: give exactly one of expect (a substring) or expect_regex (an RE2 pattern)",
    ),
    (
        {"answers": {"probes": [{"prompt": "hi", "expect_regex": "(?=x)"}]}},
        "gate config: answers.probes[0]: expect_regex: not a pattern RE2 accepts (no backreferences or "
        "look-around): invalid perl operator: (?=",
    ),
    ({"sampling": {"temperature": 3}}, "gate config: sampling.temperature: must be a number >= 0 and <= 2 (got 3)"),
    ({"deadline_s": 100_000}, "gate config: deadline_s: must be a number > 0 and <= 86,400 (got 100000)"),
]


@pytest.mark.parametrize(("data", "expected"), BOUNDED, ids=[e[1].split(":")[1].strip() for e in BOUNDED])
def test_every_size_and_count_has_an_upper_bound_named_in_the_refusal(data, expected):
    from validate.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    assert str(exc.value) == expected


def test_check_config_parses_each_file_and_names_the_refused_one(tmp_path) -> None:
    """python -m validate check-config: what the rollout's preflight runs on every distinct gate config."""
    import subprocess
    import sys

    bad = tmp_path / "bad.yml"
    bad.write_text("throughput: {num_prompts: 0}\n")
    good = REPO / "validate" / "configs" / "reference.yml"
    proc = subprocess.run([sys.executable, "-m", "validate", "check-config", str(good), str(bad)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert f"{good}: ok (deadline 5100 s)" in proc.stdout + proc.stderr
    assert f"{bad}: gate config: throughput.num_prompts: must be a whole number > 0" in proc.stderr
    ok = subprocess.run([sys.executable, "-m", "validate", "check-config", str(good)], capture_output=True, check=False)
    assert ok.returncode == 0


def test_a_document_that_is_no_config_says_so_with_its_source():
    from validate.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as exc:
        parse_config(None)
    assert str(exc.value) == "gate config: the file is empty (start from validate/configs/reference.yml)"
    with pytest.raises(ConfigError) as exc:
        parse_config(["a"])
    assert str(exc.value) == "gate config: the top level must be a mapping of sections"
    with pytest.raises(ConfigError) as exc:
        parse_config([], "x.json: config")
    assert str(exc.value) == "x.json: config: the top level must be a mapping of sections"
