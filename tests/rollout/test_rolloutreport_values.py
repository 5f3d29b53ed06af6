"""Whole values of what rolloutreport writes: a host record, a host's fleet-state entry, the
summary. The other rollout tests check the fields a scenario is about; these compare every field
(what the next run, the summary template and a dashboard read), so a field that is dropped,
renamed or computed from the wrong variable fails here (mutmut found such gaps: README of the
mutation results, benchmarks/results/mutation-2026-12-06-rolloutreport.json)."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import rolloutreport as rr
from rolloutreport.state import host_state

HV = {
    "sglang_rollout_stage": "gate",
    "sglang_server_image_before": "img:a",
    "sglang_image_ref": "img:b",
    "sglang_image": "img",
    "sglang_image_id": "sha256:b",
    "sglang_image_repo_digest": "reg/img@sha256:bb",
    "sglang_image_pinned_by": "canary h1",
    "sglang_server_changed": True,
    "sglang_server_put_back": "",
    "sglang_server_in_rotation": False,
    "sglang_server_drained_why": "its server is replaced",
    "flashinfer_cache_name": "fi-k1",
    "flashinfer_cache_key": "k1",
    "flashinfer_cache_warm": False,
    "flashinfer_cache_seeded": "/srv/seeds/k1.tar",
    "flashinfer_cache_seed_refused": "",
    "flashinfer_cache_archived": "/srv/seeds/k1.tar",
    "flashinfer_cache_size_bytes": "8192",
}
UPDATED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def _no_time(d: dict) -> dict:
    assert UPDATED.match(d.pop("updated")), d
    return d


def test_an_in_progress_record_has_every_field_from_its_variables():
    r = rr.in_progress("h2", "run-1", False, HV, "gate").to_dict()
    assert r == {
        "host": "h2",
        "run_id": "run-1",
        "check_mode": False,
        "outcome": "in progress",
        "stage": "gate",
        "image_before": "img:a",
        "image_target": "img:b",
        "image_id": "sha256:b",
        "image_repo_digest": "reg/img@sha256:bb",
        "image_pinned_by": "canary h1",
        "image_after": "(in progress: gate)",
        "changed": True,
        "gate": "not run",
        "gate_location": "",
        "gate_reason": "",
        "failed_checks": [],
        "messages": [],
        "rolled_back": False,
        "put_back": "",
        "in_rotation": "no",
        "drained_why": "its server is replaced",
        "failure": "",
        "failed_task": "",
        "report_dir": "",
        "baseline_written": "",
        "cache": {
            "name": "fi-k1",
            "key": "k1",
            "start": "seeded",
            "seeded": "/srv/seeds/k1.tar",
            "seed_refused": "",
            "archived": "/srv/seeds/k1.tar",
            "size_bytes": 8192,
        },
        "stages": [],
    }


def test_cache_start_and_rotation_words():
    def cache(**hv):
        return rr.final("h", "r", False, {k: v for k, v in (HV | hv).items() if v is not None}).cache

    assert cache(flashinfer_cache_seeded="").start == "cold"
    assert cache(flashinfer_cache_seeded="", flashinfer_cache_warm=True).start == "warm"
    assert cache(flashinfer_cache_warm=None).start == ""  # the cache stage never ran
    assert cache(flashinfer_cache_size_bytes=None).size_bytes == 0
    assert cache(flashinfer_cache_seed_refused="checksum mismatch").seed_refused == "checksum mismatch"
    served = rr.final("h", "r", False, HV | {"sglang_server_in_rotation": True})
    assert (served.in_rotation, served.drained_why) == ("yes", "")  # a why only while drained
    untouched = rr.final("h", "r", False, {k: v for k, v in HV.items() if k != "sglang_server_in_rotation"})
    assert (untouched.in_rotation, untouched.drained_why) == ("", "")


def test_a_lost_record_keeps_what_the_controller_knew_and_names_the_task():
    r = rr.lost("h3", "run-2", False, HV, task="Wait for the gate").to_dict()
    assert (r["outcome"], r["image_after"], r["failure"], r["failed_task"]) == (
        "unreachable",
        "(unknown: unreachable during gate)",
        "unreachable during gate",
        "Wait for the gate",
    )
    assert r["messages"] == [f"unreachable during gate: {rr.records.NEXT_RUN}"]
    assert r["cache"]["name"] == "fi-k1" and r["image_id"] == "sha256:b" and r["run_id"] == "run-2"
    assert rr.lost("h3", "run-2", True, {}).to_dict()["image_after"] == "(unknown: unreachable during ?)"


def test_records_are_written_whole_private_and_atomically(tmp_path: Path):
    run = tmp_path / "reports" / "run-1"
    written = rr.write_record(run, rr.in_progress("h1", "run-1", False, HV, "image"), mark="image")
    path = run / "hosts" / "h1.json"
    assert json.loads(path.read_text()) == written and written["stages"][0]["stage"] == "image"
    assert path.read_text().startswith('{\n    "baseline_written": "",\n    "cache": {')  # sorted keys, 4 spaces
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert stat.S_IMODE((run / "hosts").stat().st_mode) == 0o750
    assert not list((run / "hosts").glob("*.tmp"))
    # a damaged earlier record: its marks are lost, the new one is written whole
    path.write_text("{half")
    again = rr.write_record(run, rr.in_progress("h1", "run-1", False, HV, "cache"), mark="cache")
    assert [m["stage"] for m in again["stages"]] == ["cache"]


def test_stage_durations_add_up_repeated_stages_and_leave_the_open_one_out():
    rec = {
        "stages": [
            {"stage": "image", "at": 100.0},
            {"stage": "cache", "at": 103.5},
            {"stage": "image", "at": 110.0},
            {"stage": "gate", "at": 111.25},
        ]
    }
    assert rr.stage_durations(rec) == {"image": 4.75, "cache": 6.5}  # 3.5 + 1.25
    assert rr.stage_durations({}) == {}


def test_a_host_state_entry_from_each_kind_of_record():
    lost = rr.lost("h2", "run-1", False, HV).to_dict()
    assert _no_time(vars(host_state(lost))) == {
        "run_id": "run-1",
        "outcome": "unreachable",
        "stage": "gate",
        "image_after": "(unknown: unreachable during gate)",
        "image_id": "sha256:b",
        "pending_repair": True,
        "drained": True,
        "drained_why": "its server is replaced",
        "drained_by": "run-1",  # its drain hook ran in run-1
        "put_back_run": "",
    }
    back = rr.final("h2", "run-2", False, HV | {"sglang_server_in_rotation": True}).to_dict()
    entry = _no_time(vars(host_state(back, vars(host_state(lost)))))
    assert (entry["outcome"], entry["pending_repair"], entry["drained"], entry["drained_why"]) == (
        "ok",
        False,
        False,
        "",
    )
    assert (entry["run_id"], entry["image_after"], entry["stage"]) == ("run-2", "img:b", "gate")
    # no hook ran this time: the rotation and its why stay what they were
    quiet = {**back, "in_rotation": "", "drained_why": ""}
    kept = _no_time(vars(host_state(quiet, {"drained": True, "drained_why": "rolled back"})))
    assert (kept["drained"], kept["drained_why"]) == (True, "rolled back")
    assert _no_time(vars(host_state(quiet)))["drained"] is False
    # drained by this run without a why of its own: the earlier why stays
    assert host_state({**back, "in_rotation": "no", "drained_why": ""}, {"drained_why": "maintenance"}).drained_why == (
        "maintenance"
    )
    assert host_state(rr.in_progress("h", "r", False, HV, "server").to_dict()).pending_repair is True
    # a record with nothing in it (hand-written, or an older bundle's): every field empty, never "None"
    assert _no_time(vars(host_state({}))) == {
        "run_id": "",
        "outcome": "",
        "stage": "",
        "image_after": "",
        "image_id": "",
        "pending_repair": False,
        "drained": False,
        "drained_why": "",
        "drained_by": "",
        "put_back_run": "",
    }
    assert host_state({"in_rotation": "no"}).drained_why == ""


def test_the_state_file_whole_after_a_run_of_three_hosts(tmp_path: Path):
    path = tmp_path / "fleet-state.json"
    rr.merge_record(path, rr.final("h3", "run-1", False, HV | {"sglang_server_in_rotation": True}).to_dict())
    rr.merge_record(path, rr.lost("h1", "run-1", False, HV).to_dict())
    rr.merge_record(path, rr.final("h2", "run-1", False, HV | {"sglang_server_drained_why": "gate failed"}).to_dict())
    state = rr.read_state(path)
    assert state["schema"] == 1 and sorted(state["hosts"]) == ["h1", "h2", "h3"]
    assert state["image_in_flight"] == {
        "run_id": "run-1",
        "image": "img:b",
        "image_id": "sha256:b",
        "repo_digest": "reg/img@sha256:bb",
    }
    assert rr.pending_hosts(state) == ["h1"]
    assert rr.drained_hosts(state) == {"h1": "its server is replaced", "h2": "gate failed"}  # sorted by host
    # an entry without a why (written by an older bundle) reads as none; order by host name
    listed = rr.drained_hosts({"hosts": {"b": {"drained": True}, "a": {"drained": True, "drained_why": "x"}}})
    assert list(listed.items()) == [("a", "x"), ("b", "")]
    assert rr.pending_hosts({"hosts": {"z": {"pending_repair": True}, "a": {"pending_repair": True}}}) == ["a", "z"]
    assert rr.drained_hosts({}) == {} and rr.pending_hosts({}) == []
    # the runs that lost a host: each once, in the file's order; an "in progress" host (a controller
    # that died) or a failed one names no run, nor does an entry without a run id
    lost = {"hosts": {"a": {"outcome": "unreachable", "run_id": "r2"}, "b": {"outcome": "failed", "run_id": "r1"},
                      "c": {"outcome": "unreachable", "run_id": "r1"}, "d": {"outcome": "unreachable", "run_id": "r2"},
                      "e": {"outcome": "in progress", "run_id": "r3"}, "f": {"outcome": "unreachable"}}}  # fmt: skip
    assert rr.lost_runs(lost) == ["r2", "r1"] and rr.lost_runs({}) == []
    # a record without an image ID (lost before its image stage) leaves the flight alone
    rr.merge_record(path, rr.lost("h4", "run-1", False, {"sglang_rollout_stage": "gpu_host"}).to_dict())
    assert rr.read_state(path)["image_in_flight"]["image_id"] == "sha256:b"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    # a record with an image ID and nothing else: the flight's other fields are empty, never "None"
    other = tmp_path / "other.json"
    rr.merge_record(other, {"host": "h9", "image_id": "sha256:z"})
    assert rr.read_state(other)["image_in_flight"] == {
        "run_id": "",
        "image": "",
        "image_id": "sha256:z",
        "repo_digest": "",
    }


def test_the_summary_whole(tmp_path: Path):
    ok = rr.final("a1", "run-1", False, HV | {"sglang_gate_result": {"verdict": "pass"}}).to_dict()
    same = rr.final("a2", "run-1", False, HV | {"sglang_gate_result": {"verdict": "skipped"}}).to_dict()
    back = rr.final("a3", "run-1", False, HV | {"sglang_server_put_back": "drained by run-0"}).to_dict()
    bad = rr.final(
        "b1",
        "run-1",
        False,
        HV
        | {
            "sglang_rollout_failed": True,
            "sglang_image_id": "sha256:c",
            "sglang_gate_result": {"verdict": "fail", "rolled_back": True, "rolled_back_to": "img:a"},
        },
    ).to_dict()
    gone = rr.lost("b2", "run-1", False, HV).to_dict()
    s = rr.summarize(
        [ok, same, back, bad, gone], ["a1", "a2", "a3", "b1", "b2", "c1"], "run-1", False, {"g1": "b1"},
        waves=[["a2", "a3"], ["c1"]],
    )  # fmt: skip
    assert s == {
        "run_id": "run-1",
        "finished": False,
        "hosts": [ok, same, back, bad, gone],
        "image_ids": ["sha256:b", "sha256:c"],
        "not_reached": ["c1"],
        "moved": ["a1"],
        "unchanged": ["a2", "a3"],
        "rolled_back": ["b1"],
        "put_back": ["a3"],
        "left_drained": ["a1", "a2", "a3", "b1", "b2"],  # HV says out of rotation
        # without the state file: the hosts this run's records leave drained
        "out_of_rotation": {h: {"why": "its server is replaced", "by": "this run"} for h in ("a1", "a2", "a3", "b1", "b2")},  # noqa: E501
        "failed": ["b1"],
        "canaries": {"g1": "b1"},
        "failed_canaries": {"g1": "b1"},
        "waves": [["a2", "a3"], ["c1"]],
        "unreachable": ["b2"],
        "baselines_written": [],
    }
    wrote = [{**ok, "baseline_written": "g2"}, {**same, "baseline_written": "g1"}, {**back, "baseline_written": "g2"}]
    assert rr.summarize(wrote, ["a1", "a2", "a3"], "run-1", True)["baselines_written"] == ["g1", "g2"]
    assert rr.summarize([ok], ["a1"], "run-1", True, {"g1": "a1"})["failed_canaries"] == {}
    # a canary lost (unreachable) is a failed canary: no wave started after it
    lost = rr.summarize([ok, gone], ["a1", "b2"], "run-1", False, {"g1": "a1", "g2": "b2"})
    assert (lost["failed_canaries"], lost["unreachable"], lost["failed"]) == ({"g2": "b2"}, ["b2"], [])
    assert rr.summarize([ok], ["a1"], "run-1", True)["canaries"] == {}
    served = {**ok, "in_rotation": "yes"}
    assert rr.summarize([served], ["a1"], "run-1", True)["left_drained"] == []
    # with the state file: every host out of rotation now, whoever drained it, and the hosts put back
    # right after preflight whose own turn never came (no record of this run)
    state = {
        "hosts": {
            "a1": {"drained": False, "put_back_run": "run-1"},
            "c1": {"drained": True, "drained_why": "gate failed", "drained_by": "run-0"},
            "c2": {"drained": True, "drained_why": "found it so", "drained_by": "found drained on the host (run x)"},
            "c3": {"drained": True, "drained_why": "", "drained_by": ""},
            "c4": {"drained": True, "drained_why": "rollback failed", "drained_by": "run-1"},
            "c5": {"drained": False, "put_back_run": "run-0"},
        }
    }
    full = rr.summarize([served, back], ["a1", "a3", "c1"], "run-1", True, state=state)
    assert full["put_back"] == ["a1", "a3"] and full["left_drained"] == ["a3"]
    assert full["out_of_rotation"] == {
        "c1": {"why": "gate failed", "by": "run run-0"},
        "c2": {"why": "found it so", "by": "found drained on the host (run x)"},
        "c3": {"why": "", "by": "an earlier run"},
        "c4": {"why": "rollback failed", "by": "this run"},
    }

    run = tmp_path / "run-1"
    rr.write_summary(run, s, "# Rollout run-1\n")
    assert (run / "rollout-summary.md").read_text() == "# Rollout run-1\n"
    assert json.loads((run / "rollout-summary.json").read_text()) == s
    for name in ("rollout-summary.md", "rollout-summary.json"):
        assert stat.S_IMODE((run / name).stat().st_mode) == 0o640, name
    assert sorted(p.name for p in run.iterdir()) == ["rollout-summary.json", "rollout-summary.md"]
