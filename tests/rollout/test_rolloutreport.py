"""The rollout's records and summary (rolloutreport): what each outcome writes, values not names."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import rolloutreport as rr

GATE_FAIL = {
    "verdict": "fail",
    "location": "controller",
    "reason": "2 checks failed",
    "failed_checks": ["baseline.total_token_throughput", "answers.reference"],
    "messages": ["FAILED regression"],
    "rolled_back": True,
    "rolled_back_to": "img:a",
    "report_dir": "/r/h1",
}
HV = {
    "sglang_server_image_before": "img:a",
    "sglang_image_ref": "img:b",
    "sglang_image": "img",
    "sglang_image_id": "sha256:b",
    "sglang_server_changed": True,
    "sglang_server_last_good": {"image": "img:a"},
    "flashinfer_cache_name": "fi-k1",
    "flashinfer_cache_key": "k1",
    "flashinfer_cache_warm": False,
    "flashinfer_cache_seeded": "",
    "flashinfer_cache_size_bytes": "4096",
    "sglang_rollout_stage": "gate",
}


def test_a_passing_host_runs_the_target_image():
    r = rr.final("h1", "run-1", False, HV | {"sglang_gate_result": {"verdict": "pass", "report_dir": "/r/h1"}})
    assert (r.outcome, r.gate, r.image_after, r.rolled_back, r.failure) == ("ok", "pass", "img:b", False, "")
    assert r.cache.start == "cold" and r.cache.size_bytes == 4096 and r.image_id == "sha256:b"
    assert r.image_pinned_by == ""  # the canary deploys what the tag names
    # Ansible hands a folded (>-) template's value with its spaces; the record keeps the words
    later = rr.final("h2", "run-1", False, HV | {"sglang_image_pinned_by": " canary h1 "})
    assert later.image_pinned_by == "canary h1" and later.to_dict()["image_pinned_by"] == "canary h1"


def test_a_failed_gate_records_the_rollback_and_why():
    hv = HV | {"sglang_gate_result": GATE_FAIL, "sglang_rollout_failed": True, "sglang_rollout_failure": "gate failed"}
    r = rr.final("h1", "run-1", False, hv)
    assert (r.outcome, r.image_after, r.rolled_back, r.gate_reason) == ("failed", "img:a", True, "2 checks failed")
    assert r.failed_checks == ["baseline.total_token_throughput", "answers.reference"]
    assert r.messages == ["FAILED regression"] and r.failure == "gate failed"


def test_where_a_failed_host_ended_up():
    failed = HV | {"sglang_rollout_failed": True}
    first = failed | {"sglang_gate_result": {"verdict": "fail"}, "sglang_server_last_good": {}}
    assert rr.final("h", "r", False, first).image_after == "(stopped: first deploy failed)"
    assert rr.final("h", "r", False, failed | {"sglang_gate_result": {"verdict": "fail"}}).image_after == "img:a"
    assert rr.final("h", "r", False, failed).image_after == "img:a"  # failed before the gate: what ran before
    assert rr.final("h", "r", True, HV).image_after == "(check mode: nothing changed)"
    seeded = rr.final("h", "r", False, HV | {"flashinfer_cache_seeded": "from h0", "flashinfer_cache_warm": True})
    assert seeded.cache.start == "seeded" and rr.final("h", "r", False, {}).cache.start == ""
    assert rr.final("h", "r", False, HV | {"flashinfer_cache_warm": True}).cache.start == "warm"
    assert rr.final("h", "r", False, {"sglang_image": "img"}).image_target == "img"


def test_in_progress_and_lost_records_name_the_stage():
    p = rr.in_progress("h2", "run-1", False, HV, "image")
    assert (p.outcome, p.stage, p.image_after, p.gate) == ("in progress", "image", "(in progress: image)", "not run")
    lost = rr.lost("h2", "run-1", False, HV)
    assert (lost.outcome, lost.stage, lost.failure) == ("unreachable", "gate", "unreachable during gate")
    assert lost.image_after == "(unknown: unreachable during gate)" and lost.image_id == "sha256:b"
    assert lost.messages[0].startswith("unreachable during gate: the controller lost its connection.")
    assert lost.cache.name == "fi-k1"
    # the callback's path: the record as written, completed with the task it was lost in
    marked = rr.mark_lost(p.to_dict(), "Load the image")
    assert marked["failed_task"] == "Load the image" and marked["failure"] == "unreachable during image"
    assert rr.mark_lost({"host": "x"}, "")["failure"] == "unreachable during ?"


def test_records_are_written_whole_and_the_summary_sorts_the_hosts(tmp_path: Path):
    run = tmp_path / "run-7"
    ok = rr.final("h1", "run-7", False, HV | {"sglang_gate_result": {"verdict": "pass", "baseline_written": "rtx"}})
    failed = {"sglang_gate_result": GATE_FAIL, "sglang_rollout_failed": True, "sglang_image_id": "sha256:d"}
    bad = rr.final("h2", "run-7", False, HV | failed)
    put_back = {"sglang_server_put_back": "drained by run-6", "sglang_image_id": "sha256:a"}
    same = rr.final("h3", "run-7", False, HV | put_back)
    gone = rr.lost("h4", "run-7", False, HV | {"sglang_image_id": "sha256:c"})
    for r in (ok, bad, same, gone):
        written = rr.write_record(run, r)
    path = rr.record_path(run, "h4")
    assert written == rr.read_record(path) and written["outcome"] == "unreachable"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 and not list(run.glob("hosts/*.tmp"))
    assert json.loads((run / "hosts" / "h2.json").read_text())["rolled_back"] is True
    s = rr.summarize(rr.read_records(run), ["h1", "h2", "h3", "h4", "h5"], "run-7", finished=True)
    assert (s["moved"], s["unchanged"], s["failed"], s["unreachable"]) == (["h1"], ["h3"], ["h2"], ["h4"])
    assert s["rolled_back"] == ["h2"] and s["put_back"] == ["h3"] and s["not_reached"] == ["h5"]
    assert s["image_ids"] == ["sha256:a", "sha256:b", "sha256:c", "sha256:d"]
    assert s["finished"] is True and s["run_id"] == "run-7"
    assert s["baselines_written"] == ["rtx"] and written["baseline_written"] == ""  # h1 wrote its group's
    rr.write_summary(run, s, "# summary\n")
    assert json.loads((run / "rollout-summary.json").read_text())["failed"] == ["h2"]
    assert (run / "rollout-summary.md").read_text() == "# summary\n"


def test_stage_marks_carry_over_from_record_to_record_and_give_durations(tmp_path: Path, monkeypatch):
    """Each in-progress record adds the stage it enters, the final one "done"; the lost record of a
    host keeps them. A repeated mark (the same stage written twice) is not a new stage."""
    clock = iter([100.0, 112.5, 112.9, 160.0])
    monkeypatch.setattr(rr.records.time, "time", lambda: next(clock))
    run = tmp_path / "run-1"
    for stage in ("image", "server", "server", "gate"):
        rr.write_record(run, rr.in_progress("h1", "run-1", False, HV, stage), stage)
    rec = rr.write_record(run, rr.final("h1", "run-1", False, HV), "done")
    path = rr.record_path(run, "h1")
    assert rr.read_record(path) == rec
    assert [(m["stage"], m["at"]) for m in rec["stages"]] == [
        ("image", 100.0), ("server", 112.5), ("gate", 112.9), ("done", 160.0),
    ]  # fmt: skip
    assert rr.stage_durations(rec) == {"image": 12.5, "server": 0.4, "gate": 47.1}
    lost = rr.mark_lost(rec, "Wait")
    rr.write_record(run, lost)  # the callback's write: no new mark, the marks kept
    assert rr.read_record(path)["stages"] == rec["stages"]


def test_a_stage_entered_twice_counts_both_spans_and_the_open_one_none():
    rec = {"stages": [{"stage": "gate", "at": 10}, {"stage": "rollback", "at": 15}, {"stage": "gate", "at": 16}]}
    assert rr.stage_durations(rec) == {"gate": 5.0, "rollback": 1.0}
    assert rr.stage_durations({"stages": []}) == {} and rr.stage_durations({}) == {}
