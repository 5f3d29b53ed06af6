"""The fleet lock's logic, without Ansible: the host side (plugins/modules/rollout_fleet_lock.py,
imported as a file) on a temporary state folder, and the controller's judgement
(rolloutreport/fleet_lock.py) on answers shaped as the module returns them. The real playbooks
run it in tests/roles/test_rollout_host_lock.py."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
from pathlib import Path

from rolloutreport import fleet_lock

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("rollout_fleet_lock", REPO / "plugins/modules/rollout_fleet_lock.py")
assert _spec is not None and _spec.loader is not None
lockmod = importlib.util.module_from_spec(_spec)
sys.modules["rollout_fleet_lock"] = lockmod  # its dataclasses look their module up there
_spec.loader.exec_module(lockmod)


def _owner(run_id: str, token: str, started: float) -> dict[str, object]:
    return {"run_id": run_id, "token": token, "user": "alice", "controller": "ops-1",
            "started": "2026-12-07T10:00:00Z", "started_epoch": started}  # fmt: skip


OLD, YOUNG = _owner("r-old", "aaaa", 100.0), _owner("r-young", "bbbb", 200.0)


def _lock(folder: Path) -> dict[str, object]:
    return json.loads((folder / "rollout.lock").read_text())


def test_take_is_one_step_and_names_the_holder(tmp_path):
    assert lockmod.take(str(tmp_path), OLD, 600, 0, "", False).outcome == "taken"
    assert _lock(tmp_path)["run_id"] == "r-old" and _lock(tmp_path)["token"] == "aaaa"
    held = lockmod.take(str(tmp_path), YOUNG, 600, 0, "", False)
    assert held.outcome == "held" and held.holder["run_id"] == "r-old" and held.holder["age_s"] < 5
    assert _lock(tmp_path)["token"] == "aaaa"  # not written
    assert lockmod.take(str(tmp_path), OLD, 600, 0, "", False).outcome == "ours"


def test_stale_only_by_the_heartbeat_age(tmp_path):
    lockmod.take(str(tmp_path), OLD, 600, 0, "", False)
    data = _lock(tmp_path)
    data["heartbeat"] = time.time() - 601
    (tmp_path / "rollout.lock").write_text(json.dumps(data))
    assert lockmod.take(str(tmp_path), YOUNG, 900, 0, "", False).outcome == "held"  # 601 s < 900 s
    took = lockmod.take(str(tmp_path), YOUNG, 600, 0, "", False)
    assert took.outcome == "took_over" and took.holder["run_id"] == "r-old"
    assert _lock(tmp_path)["run_id"] == "r-young" and _lock(tmp_path)["took_over"]["run_id"] == "r-old"


def test_heartbeat_refreshes_only_our_lock_and_fails_on_another(tmp_path):
    lockmod.take(str(tmp_path), OLD, 600, 0, "", False)
    before = _lock(tmp_path)["heartbeat"]
    time.sleep(0.05)
    assert lockmod.heartbeat(str(tmp_path), OLD, False)[0] is True
    assert _lock(tmp_path)["heartbeat"] > before
    ours, current = lockmod.heartbeat(str(tmp_path), YOUNG, False)
    assert ours is False and current is not None and current["run_id"] == "r-old"


def test_break_takes_the_named_runs_lock_only(tmp_path):
    lockmod.take(str(tmp_path), OLD, 600, 0, "", False)
    assert lockmod.take(str(tmp_path), YOUNG, 600, 0, "r-other", False).outcome == "held"
    broke = lockmod.take(str(tmp_path), YOUNG, 600, 0, "r-old", False)
    assert broke.outcome == "broke" and _lock(tmp_path)["broke"]["run_id"] == "r-old"


def test_the_lock_of_the_run_that_lost_the_host_is_taken_back(tmp_path):
    """The controller's fleet state names the runs that recorded a host unreachable: such a run
    stopped there and releases nothing more, so its lock is taken back at once on any host (a batch
    lost whole leaves it on the others too); another run's fresh lock is not, nor a run whose id
    only contains a lost run's."""
    lockmod.take(str(tmp_path), OLD, 600, 0, "", False)
    assert lockmod.take(str(tmp_path), YOUNG, 600, 0, "", False, lost_by=["r-other", "r-ol"]).outcome == "held"
    back = lockmod.take(str(tmp_path), YOUNG, 600, 0, "", False, lost_by=["r-other", "r-old"])
    assert back.outcome == "reclaimed" and _lock(tmp_path)["reclaimed"]["run_id"] == "r-old"
    v = fleet_lock.judge(
        {"h1": _res("reclaimed", holder={"run_id": "r-old"}, holder_text="run r-old (x)")}, "r2", 600, False
    )
    assert v.won and v.warnings == [
        "run r2 takes back the lock left by run r-old (x) on h1"
        " (that run lost a host and stopped: this controller's fleet state)"
    ]


def test_release_removes_only_our_lock(tmp_path):
    lockmod.take(str(tmp_path), OLD, 600, 0, "", False)
    assert lockmod.release(str(tmp_path), YOUNG, False)[0] is False and (tmp_path / "rollout.lock").exists()
    assert lockmod.release(str(tmp_path), OLD, False)[0] is True and not (tmp_path / "rollout.lock").exists()


def test_check_mode_writes_nothing(tmp_path):
    folder = tmp_path / "state"
    assert lockmod.take(str(folder), OLD, 600, 0, "", True).outcome == "taken"
    assert not folder.exists()
    lockmod.take(str(folder), OLD, 600, 0, "", False)
    text = (folder / "rollout.lock").read_text()
    assert lockmod.take(str(folder), YOUNG, 600, 30, "r-old", True).outcome == "broke"  # would break, at once
    assert (folder / "rollout.lock").read_text() == text


def test_the_older_run_waits_for_the_younger_to_let_go_and_the_younger_never_waits(tmp_path):
    lockmod.take(str(tmp_path), YOUNG, 600, 0, "", False)
    start = time.monotonic()
    assert lockmod.take(str(tmp_path), OLD, 600, 1, "", False).outcome == "held"  # younger kept it: gave up after 1 s
    assert 0.9 < time.monotonic() - start < 5
    timer = threading.Timer(1.5, lockmod.release, (str(tmp_path), YOUNG, False))
    timer.start()
    try:
        assert lockmod.take(str(tmp_path), OLD, 600, 20, "", False).outcome == "taken"
    finally:
        timer.cancel()
    start = time.monotonic()
    assert lockmod.take(str(tmp_path), YOUNG, 600, 20, "", False).outcome == "held"  # the older holds: no wait
    assert time.monotonic() - start < 1


def test_the_older_run_does_not_wait_for_a_younger_run_that_won(tmp_path):
    """A younger run that holds every host (its judgement marked its locks "holding") keeps them to its
    end: the older one stops at once instead of rolling after it."""
    lockmod.take(str(tmp_path), YOUNG, 600, 0, "", False)
    assert _lock(tmp_path)["phase"] == "taking"
    assert lockmod.heartbeat(str(tmp_path), YOUNG, False, "holding")[0] is True
    assert _lock(tmp_path)["phase"] == "holding"
    start = time.monotonic()
    held = lockmod.take(str(tmp_path), OLD, 600, 20, "", False)
    assert held.outcome == "held" and held.holder["run_id"] == "r-young" and time.monotonic() - start < 1


def test_racing_takers_exactly_one_wins(tmp_path):
    owners = [_owner(f"r{i}", f"t{i}", 100.0 + i) for i in range(8)]
    outcomes: dict[str, str] = {}
    threads = [threading.Thread(target=lambda o=o: outcomes.__setitem__(
        str(o["run_id"]), lockmod.take(str(tmp_path), o, 600, 0, "", False).outcome)) for o in owners]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [run for run, outcome in outcomes.items() if outcome == "taken"]
    assert len(winners) == 1 and _lock(tmp_path)["run_id"] == winners[0]
    assert sorted(outcomes.values()) == ["held"] * 7 + ["taken"]


def _res(outcome: str, **more: object) -> dict[str, object]:
    return {"outcome": outcome, "changed": False, **more}


def test_the_judge_rolls_only_with_every_host():
    won = fleet_lock.judge({"h1": _res("taken"), "h2": _res("ours")}, "r1", 600, False)
    assert won.won and won.taken == ["h1", "h2"] and won.msg == "run r1 holds the rollout lock of all 2 hosts"
    holder = "run r0 (bob@ops-2, started 2026-12-07T09:00:00Z, heartbeat 12 s ago)"
    lost = fleet_lock.judge({"h1": _res("taken"), "h2": _res("held", holder_text=holder),
                             "h3": {"unreachable": True, "msg": "ssh: no route"}}, "r1", 600, False)  # fmt: skip
    assert not lost.won and lost.taken == ["h1"] and lost.held == {"h2": holder}
    assert lost.no_answer == {"h3": "ssh: no route"}
    assert lost.msg.startswith(f"another rollout holds hosts of this run: {holder} holds h2; h3: the lock could not")
    assert "Run r1 changed nothing and releases the 1 host locks it took (h1)." in lost.msg
    assert (
        "sglang_rollout_host_lock_stale_s (600 s)" in lost.msg and "sglang_rollout_break_lock=<its run id>" in lost.msg
    )


def test_the_judge_in_check_mode_releases_nothing_and_says_what_a_real_run_would_do():
    holder = "run r0 (bob@ops-2, started x, heartbeat 5 s ago)"
    v = fleet_lock.judge({"h1": _res("taken"), "h2": _res("held", holder_text=holder)}, "r1", 600, True)
    assert not v.won and v.taken == []
    assert v.msg.startswith("check mode: a real run would stop here, another rollout holds hosts of this run")
    stale = fleet_lock.judge({"h1": _res("took_over", holder={"run_id": "r0"}, holder_text=holder)}, "r1", 600, True)
    assert stale.won and stale.warnings == [
        f"run r1 would take over the stale lock of {holder} on h1 (heartbeat older than 600 s)"
    ]


def test_what_was_broken_is_logged_in_the_run_folder(tmp_path):
    holder = "run r0 (bob@ops-2, started x, heartbeat 9000 s ago)"
    v = fleet_lock.judge({"h1": _res("broke", holder={"run_id": "r0"}, holder_text=holder), "h2": _res("taken")},
                         "r1", 600, False, "r0")  # fmt: skip
    assert v.won and v.warnings == [f"run r1 breaks the lock of {holder} on h1 (sglang_rollout_break_lock)"]
    path = fleet_lock.log_events(tmp_path / "r1", v, "r1", "alice", "ops-1")
    assert path is not None
    events = fleet_lock.read_log(tmp_path / "r1")
    assert [(e["host"], e["what"], e["previous"]["run_id"], e["by"]) for e in events] == [
        ("h1", "broke", "r0", "alice@ops-1")
    ]
    assert fleet_lock.log_events(tmp_path / "r2", fleet_lock.judge({"h1": _res("taken")}, "r2", 600, False),
                                 "r2", "a", "b") is None  # fmt: skip
