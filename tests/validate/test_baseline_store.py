"""The group baseline: first pass writes, ordinary passes never replace, promotion keeps history, gates race safely."""

from __future__ import annotations

import json
import multiprocessing
import stat
from pathlib import Path

import pytest

from validate import baseline
from validate.files import dumps, write_json_atomic


def _report(total: float, host: str, verdict: str = "pass") -> dict:
    return {
        "verdict": verdict,
        "engine": "sglang",
        "started_at": f"2026-12-03T08:00:00+00:00/{host}",
        "labels": {"host": host},
        "config": {
            "throughput": {"num_prompts": 256, "input_len": 256, "output_len": 128, "request_rate": float("inf")}
        },
        "key_metrics": {"total_token_throughput": total, "p99_ttft_ms": None},
    }


def test_first_pass_writes_later_passes_do_not_and_promotion_keeps_history(tmp_path):
    path = tmp_path / "baseline-rtx.json"
    assert baseline.record(path, _report(1000, "h0", "fail"), promote=False) == (
        False,
        "baseline not written: the gate failed",
    )
    assert not path.exists()
    written, note = baseline.record(path, _report(1000, "h1"), promote=False)
    assert written and "first passing gate" in note
    # a fleet sliding 5% per host: none of these replace the reference
    for i, total in enumerate((950, 902, 857), start=2):
        written, note = baseline.record(path, _report(total, f"h{i}"), promote=False)
        assert not written and "never replaces" in note
    ref = baseline.load(path)
    assert ref is not None and ref.reference.key_metrics["total_token_throughput"] == 1000
    assert ref.reference.labels == {"host": "h1"} and ref.reference.workload["throughput.request_rate"] == "inf"
    for i in range(7):
        assert baseline.record(path, _report(2000 + i, f"p{i}"), promote=True)[0]
    ref = baseline.load(path)
    assert ref.reference.key_metrics["total_token_throughput"] == 2006 and ref.reference.how.startswith("promoted")
    assert [h.key_metrics["total_token_throughput"] for h in ref.history] == [2005, 2004, 2003, 2002, 2001]


def _race(args: tuple[str, int]) -> bool:
    path, i = args
    return baseline.record(path, _report(1000 + i, f"h{i}"), promote=False)[0]


def test_concurrent_first_passes_write_exactly_one_reference(tmp_path):
    path = str(tmp_path / "baseline.json")
    with multiprocessing.get_context("fork").Pool(8) as pool:
        wrote = pool.map(_race, [(path, i) for i in range(16)])
    assert sum(wrote) == 1
    ref = baseline.load(path)
    winner = wrote.index(True)
    assert ref.reference.key_metrics["total_token_throughput"] == 1000 + winner and ref.history == []
    assert not list(tmp_path.glob(".*.tmp"))  # no temp file left behind


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ([], "must be a JSON object"),
        ({"schema": "other/1", "reference": {}}, "schema 'other/1'"),
        ({"schema": baseline.SCHEMA, "reference": {"engine": "sglang", "workload": {}}}, "reference.key_metrics"),
        (
            {"schema": baseline.SCHEMA, "reference": {"engine": "", "workload": {}, "key_metrics": {}}},
            "reference.engine",
        ),
        ({"verdict": "fail", "engine": "sglang"}, "not a baseline and not a passing report"),
        (
            {"schema": baseline.SCHEMA, "reference": {"engine": "x", "workload": {}, "key_metrics": {"a": "fast"}}},
            "key_metrics.a",
        ),
    ],
)
def test_malformed_baselines_name_the_field(tmp_path, doc, fragment):
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(baseline.BaselineError) as exc:
        baseline.load(path)
    assert fragment in str(exc.value) and str(path) in str(exc.value)


def test_unusable_file_is_not_overwritten_by_an_ordinary_pass(tmp_path):
    path = tmp_path / "b.json"
    path.write_text("{not json")
    written, note = baseline.record(path, _report(1000, "h1"), promote=False)
    assert not written and "unusable" in note and path.read_text() == "{not json"
    assert baseline.record(path, _report(1000, "h1"), promote=True)[0]


def test_legacy_passing_report_is_read_as_a_reference(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(json.dumps(_report(1234, "old"), allow_nan=True))  # older reports carried Infinity
    ref = baseline.load(path)
    assert ref.reference.key_metrics["total_token_throughput"] == 1234 and ref.reference.how == "legacy report"
    assert ref.reference.workload["throughput.request_rate"] == "inf"


def test_written_json_is_strict_and_world_readable(tmp_path):
    path = tmp_path / "r" / "report.json"
    write_json_atomic(path, {"rate": float("inf"), "neg": float("-inf"), "nan": float("nan"), "n": [1.5]})
    text = path.read_text()
    assert json.loads(text) == {"rate": "inf", "neg": "-inf", "nan": None, "n": [1.5]}
    assert "Infinity" not in text and "NaN" not in text
    assert stat.S_IMODE(path.stat().st_mode) & 0o044 == 0o044  # group and others can read
    assert dumps({"a": 1}) == '{\n  "a": 1\n}\n'
    assert not list(Path(path.parent).glob(".*.tmp"))


def test_a_baseline_that_turns_malformed_during_the_load_is_a_failed_comparison_not_an_exception(tmp_path):
    from validate.config import parse_config
    from validate.gate import GroupReference, compare_baseline

    path = tmp_path / "b.json"
    path.write_text('{"schema": "sglang-gate-baseline/2", "reference": {"engine": "sglang"}}')
    info, checks = compare_baseline(
        GroupReference.read(str(path)), "sglang", parse_config({}), {"total_token_throughput": 1.0}
    )
    assert [c.name for c in checks] == ["baseline.reference"] and not checks[0].passed and info["used"] is False
    assert checks[0].message.startswith(
        f"FAILED the speed figures were not compared with the group's reference: the group's reference cannot be "
        f"read: {path}: reference.workload: Field required; to accept"
    )
    assert info["note"] == checks[0].message


def test_the_reference_keeps_its_noise_answers_and_accuracy_and_is_never_patched(tmp_path):
    path = tmp_path / "baseline.json"
    answers = {
        "max_new_tokens": 32,
        "answers": [{"prompt": "p", "prompt_ids": [1], "answer_ids": [2], "logprobs": [-1.0]}],
    }
    acc = {"settings": {"seed": 1}, "questions": 50, "correct": 49, "invalid": 0, "accuracy": 0.98}
    first = {**_report(1000, "h1"), "key_noise": {"total_token_throughput": 0.031}}
    assert baseline.record(path, {**first, "reference_answers": answers, "accuracy": acc}, promote=False)[0]
    ref = baseline.load(path).reference
    assert ref.noise == {"total_token_throughput": 0.031} and ref.answers == answers and ref.accuracy == acc
    other = {"max_new_tokens": 32, "answers": []}
    written, note = baseline.record(path, {**_report(900, "h3"), "reference_answers": other}, promote=False)
    assert not written and note.startswith("baseline kept: the group's reference is from 2026-12-03T08:00:00+00:00/h1")
    assert baseline.load(path).reference.answers == answers  # answers, once recorded, are not replaced either
    assert baseline.load(path).history == []
    failed = {**_report(900, "h4", "fail"), "reference_answers": other}
    assert baseline.record(path, failed, promote=False) == (False, "baseline not written: the gate failed")
    # a reference without answers or accuracy (an older gate's) is not patched by a later pass: the later gate
    # fails its comparison (validate/gate.py GroupReference.part) until a promotion replaces the whole reference
    old = tmp_path / "old.json"
    assert baseline.record(old, _report(1000, "h1"), promote=False)[0]
    assert not baseline.record(old, {**_report(900, "h2"), "reference_answers": answers}, promote=False)[0]
    assert baseline.load(old).reference.answers is None


def test_settings_and_changes_name_what_makes_answers_comparable():
    answers = {"max_new_tokens": 32, "answers": [{"prompt": "a"}, {"prompt": "b"}]}
    got = baseline.answer_settings(answers)
    assert got["max_new_tokens"] == 32 and len(got["prompts"]) == 16
    assert (
        baseline.answer_settings({**answers, "answers": [{"prompt": "b"}, {"prompt": "a"}]})["prompts"]
        != got["prompts"]
    )
    assert baseline.answer_settings({})["max_new_tokens"] is None
    assert baseline.changes({"a": 1, "b": 2, "gone": 0}, {"a": 1, "b": 3, "new": "x"}) == [
        "b: 2 -> 3",
        "new: None -> 'x'",
    ]
    assert baseline.changes({"a": 1}, {"a": 1}) == []


def test_the_workload_names_every_field_that_makes_figures_comparable():
    config = {
        "throughput": {
            "num_prompts": 64,
            "input_len": 512,
            "output_len": 96,
            "request_rate": "Infinity",
            "max_concurrency": 32,
            "repeats": 5,  # not part of the workload: more runs measure the same thing
        },
        "single_stream": {"prompt": "Count", "max_tokens": 200, "timeout_s": 9},
    }
    assert baseline.workload(config) == {
        "throughput.num_prompts": 64,
        "throughput.input_len": 512,
        "throughput.output_len": 96,
        "throughput.request_rate": "inf",
        "throughput.max_concurrency": 32,
        "single_stream.prompt": "Count",
        "single_stream.max_tokens": 200,
        "single_stream.route": "/generate",  # counted from streamed ids: not the chat route's figures of before
    }
    for rate in (float("inf"), "inf", "Infinity"):
        assert baseline.workload({"throughput": {"request_rate": rate}})["throughput.request_rate"] == "inf"
    assert baseline.workload({"throughput": {"request_rate": 8.0}})["throughput.request_rate"] == 8.0
    assert baseline.reference_of({"config": {}}, "x").engine == "unknown"


def test_a_field_error_names_its_path_and_a_failed_report_its_verdict(tmp_path):
    with pytest.raises(baseline.BaselineError) as exc:
        baseline.parse({"schema": baseline.SCHEMA}, "b.json")
    assert str(exc.value) == "b.json: reference: Field required"
    with pytest.raises(baseline.BaselineError) as exc:
        baseline.parse({"verdict": "fail"}, "r.json")
    assert str(exc.value) == "r.json: not a baseline and not a passing report (verdict 'fail')"


def test_what_a_write_leaves_on_disk(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "g" / "baseline.json"
    report = {**_report(1000, "h1"), "started_at": ""}
    assert baseline.record(path, report, promote=False) == (
        True,
        f"baseline written (first passing gate of the group): {path}",
    )
    doc = json.loads(path.read_text())
    assert sorted(doc) == ["history", "reference", "schema", "written_at"] and doc["history"] == []
    assert doc["written_at"].endswith("+00:00")  # UTC, with its offset
    assert path.with_name("baseline.json.lock").exists() and not (tmp_path / "None.lock").exists()
    assert baseline.record(path, _report(900, "h2"), promote=False) == (
        False,
        "baseline kept: the group's reference is from an earlier gate "
        "(an ordinary pass never replaces it; --promote-baseline does)",
    )
    answers = {"max_new_tokens": 8, "answers": []}
    assert baseline.record(path, {**_report(900, "h3"), "reference_answers": answers}, promote=True)[0]
    doc = json.loads(path.read_text())
    assert sorted(doc) == ["history", "reference", "schema", "written_at"] and doc["written_at"].endswith("+00:00")
    assert doc["reference"]["answers"] == answers and len(doc["history"]) == 1
    path.write_text("{broken")
    assert baseline.record(path, _report(1100, "h4"), promote=True)[0]  # an unusable file: no history to keep
    assert json.loads(path.read_text())["history"] == []
