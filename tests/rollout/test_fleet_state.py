"""The fleet state file (rolloutreport/state.py): what the next run learns from the runs before it,
and what a --check or --limit run in between must not take away. Records are built with the same
functions the rollout's plugin uses, from host variables as the roles leave them."""

from __future__ import annotations

import json
import multiprocessing
import stat
from pathlib import Path

import pytest

import rolloutreport as rr

HV = {
    "sglang_image_ref": "img:b",
    "sglang_image_id": "sha256:b",
    "sglang_image_repo_digest": "reg/img@sha256:bb",
    "sglang_server_image_before": "img:a",
    "sglang_rollout_stage": "gate",
}
DRAINED = {"sglang_server_in_rotation": False, "sglang_server_drained_why": "its server is replaced"}


def _rec(host: str, run: str, kind: str = "ok", check: bool = False, **hv) -> dict:
    v = HV | hv
    if kind == "lost":
        return rr.lost(host, run, check, v).to_dict()
    if kind == "in progress":
        return rr.in_progress(host, run, check, v, "server").to_dict()
    failed = {"sglang_rollout_failed": True} if kind == "failed" else {}
    gate = {"sglang_gate_result": {"verdict": "pass" if kind == "ok" else "fail"}}
    return rr.final(host, run, check, v | failed | gate).to_dict()


def test_a_lost_host_is_pending_and_stays_so_through_check_and_limit_runs(tmp_path):
    path = tmp_path / "reports" / "fleet-state.json"
    rr.merge_record(path, _rec("h1", "run-1"))
    rr.merge_record(path, _rec("h2", "run-1", "lost", **DRAINED))
    state = rr.read_state(path)
    assert rr.pending_hosts(state) == ["h2"]
    assert rr.drained_hosts(state) == {"h2": "its server is replaced"}
    h2 = state["hosts"]["h2"]
    assert (h2["run_id"], h2["outcome"], h2["stage"], h2["pending_repair"]) == ("run-1", "unreachable", "gate", True)
    assert state["hosts"]["h1"]["pending_repair"] is False and state["hosts"]["h1"]["drained"] is False

    # a --check run records every host "in progress" then "ok": none of it reaches the state
    assert rr.merge_record(path, _rec("h2", "run-2", "in progress", check=True)) is None
    assert rr.merge_record(path, _rec("h2", "run-2", check=True)) is None
    # a --limit h1 run records only h1
    rr.merge_record(path, _rec("h1", "run-3"))
    state = rr.read_state(path)
    assert rr.pending_hosts(state) == ["h2"] and state["hosts"]["h2"]["run_id"] == "run-1"
    assert state["hosts"]["h1"]["run_id"] == "run-3"

    # the repair: h2 re-gated and undrained
    rr.merge_record(path, _rec("h2", "run-4", "in progress"))
    assert rr.pending_hosts(rr.read_state(path)) == ["h2"]  # a controller dying now leaves it pending
    rr.merge_record(path, _rec("h2", "run-4", sglang_server_in_rotation=True))
    state = rr.read_state(path)
    assert rr.pending_hosts(state) == [] and rr.drained_hosts(state) == {}
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_host_whose_hooks_did_not_run_keeps_its_rotation(tmp_path):
    path = tmp_path / "fleet-state.json"
    rr.merge_record(path, _rec("h2", "run-1", "failed", **DRAINED))  # a failed rollback: left drained
    rr.merge_record(path, _rec("h2", "run-2", "failed"))  # stopped before its drain hook this time
    state = rr.read_state(path)
    assert state["hosts"]["h2"]["drained"] is True and state["hosts"]["h2"]["drained_why"] == "its server is replaced"
    assert state["hosts"]["h2"]["run_id"] == "run-2" and state["hosts"]["h2"]["pending_repair"] is False


def test_the_image_in_flight_lands_only_when_every_host_moved(tmp_path):
    path = tmp_path / "fleet-state.json"
    rr.merge_record(path, _rec("h1", "run-1"))
    flight = {"run_id": "run-1", "image": "img:b", "image_id": "sha256:b", "repo_digest": "reg/img@sha256:bb"}
    assert rr.read_state(path)["image_in_flight"] == flight
    stopped = {"failed": ["h2"], "unreachable": [], "not_reached": ["h3"]}
    assert rr.finish_run(path, stopped, check_mode=False)["image_in_flight"] == flight
    for k in ("failed", "unreachable", "not_reached"):
        assert rr.finish_run(path, {k: ["h9"]}, check_mode=False)["image_in_flight"] == flight, k
    assert rr.finish_run(path, {"failed": [], "unreachable": [], "not_reached": []}, check_mode=True) is None
    assert rr.read_state(path)["image_in_flight"] == flight  # a --check summary lands nothing
    done = rr.finish_run(path, {"failed": [], "unreachable": [], "not_reached": []}, check_mode=False)
    assert done["image_in_flight"] == {} and rr.read_state(path)["image_in_flight"] == {}


def test_a_limit_run_that_passes_keeps_the_image_in_flight_for_the_host_still_pending(tmp_path):
    path = tmp_path / "fleet-state.json"
    clean = {"failed": [], "unreachable": [], "not_reached": []}
    rr.merge_record(path, _rec("h1", "run-1"))
    rr.merge_record(path, _rec("h2", "run-1", "lost"))
    rr.finish_run(path, {**clean, "unreachable": ["h2"]}, check_mode=False)
    # --limit h1: h1 passes again, the run itself is clean, h2 is still pending
    rr.merge_record(path, _rec("h1", "run-2"))
    kept = rr.finish_run(path, clean, check_mode=False)["image_in_flight"]
    # the run that started the image keeps its name (the repair's record says "run-1 (unfinished)")
    assert kept == {"run_id": "run-1", "image": "img:b", "image_id": "sha256:b", "repo_digest": "reg/img@sha256:bb"}
    # another image is another flight, named after the run that started it
    rr.merge_record(path, _rec("h1", "run-3", sglang_image_id="sha256:c", sglang_image_repo_digest=""))
    assert rr.read_state(path)["image_in_flight"]["run_id"] == "run-3"
    rr.merge_record(path, _rec("h2", "run-3", sglang_image_id="sha256:c", sglang_image_repo_digest=""))
    assert rr.finish_run(path, clean, check_mode=False)["image_in_flight"] == {}  # repaired: landed


def test_no_file_is_an_empty_fleet_and_a_damaged_one_is_an_error(tmp_path):
    assert rr.read_state(tmp_path / "none.json") == {"schema": 1, "hosts": {}, "image_in_flight": {}}
    bad = tmp_path / "fleet-state.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"not a fleet state file .*fix or remove it"):
        rr.read_state(bad)
    bad.write_text(json.dumps({"schema": 2, "hosts": {}}))
    with pytest.raises(ValueError, match="of schema 1"):
        rr.read_state(bad)
    bad.write_text(json.dumps({"schema": 1, "hosts": []}))
    with pytest.raises(ValueError):
        rr.read_state(bad)
    with pytest.raises(ValueError):  # never overwritten by a merge either
        rr.merge_record(bad, _rec("h1", "run-1"))
    assert rr.state_path(Path("/r/run-1")) == Path("/r/fleet-state.json")
    assert rr.state_path(Path("/r/run-1"), "/srv/state.json") == Path("/srv/state.json")


def _merge_many(args: tuple[str, int]) -> None:
    path, worker = args
    for i in range(25):
        rr.merge_record(Path(path), _rec(f"w{worker}-h{i}", "run-1"))


def test_forks_writing_at_once_lose_no_host(tmp_path):
    """Ansible's forks record hosts at the same time: the lock makes each read-modify-write whole."""
    path = tmp_path / "fleet-state.json"
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_merge_many, [(str(path), w) for w in range(4)])
    assert len(rr.read_state(path)["hosts"]) == 100


def test_the_put_back_after_preflight_changes_only_the_rotation(tmp_path):
    """set_rotation (the put-back right after preflight, before the host's own turn): a drained host put
    back keeps its outcome, stage and image, and the run that put it back is named; a host found
    drained on the host, unknown to the file, gets an entry saying so; check mode changes nothing."""
    path = tmp_path / "fleet-state.json"
    rr.merge_record(path, _rec("h1", "run-1", "failed", **DRAINED))
    before = rr.read_state(path)["hosts"]["h1"]
    assert (before["drained"], before["drained_by"], before["put_back_run"]) == (True, "run-1", "")
    assert rr.set_rotation(path, "h1", "run-2", True, check_mode=True) is None
    assert rr.read_state(path)["hosts"]["h1"]["drained"] is True
    rr.set_rotation(path, "h1", "run-2", True)
    after = rr.read_state(path)["hosts"]["h1"]
    assert (after["drained"], after["drained_why"], after["drained_by"], after["put_back_run"]) == (
        False,
        "",
        "",
        "run-2",
    )
    assert (after["outcome"], after["run_id"], after["image_after"]) == ("failed", "run-1", before["image_after"])
    assert rr.drained_hosts(rr.read_state(path)) == {}
    # found drained on the host: the file did not know it
    rr.set_rotation(
        path,
        "h9",
        "run-2",
        False,
        "found drained on the host (marker of run x: y)",
        "found drained on the host (run x)",
    )
    h9 = rr.read_state(path)["hosts"]["h9"]
    assert (h9["drained"], h9["drained_by"], h9["outcome"], h9["pending_repair"]) == (
        True, "found drained on the host (run x)", "", False,
    )  # fmt: skip
    assert rr.out_of_rotation(rr.read_state(path), "run-2") == {
        "h9": {"why": "found drained on the host (marker of run x: y)", "by": "found drained on the host (run x)"}
    }
    # a known drained host that stays drained keeps its why and who
    rr.merge_record(path, _rec("h3", "run-2", "failed", **DRAINED))
    rr.set_rotation(path, "h3", "run-3", False)
    assert rr.out_of_rotation(rr.read_state(path), "run-3")["h3"] == {
        "why": "its server is replaced",
        "by": "run run-2",
    }
