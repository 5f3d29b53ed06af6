"""A lock the fleet sees: a rollout holds each host it works on (`<state dir>/rollout-host.lock`), and
a second rollout that reaches a held host stops there before changing anything, naming the holder.

Real `ansible-playbook deploy.yml` on a one-host inventory (local connection), narrowed with
`--tags gpu_host` and `sglang_gpu_host_prepare: false` so that only the run's own bookkeeping and the
lock run: what is asserted is the lock, not the deploy (test_roles_local_rollout.py has that).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from roles_testlib import BIN, REPO, ansible_env, docker_ok

from testengine.local_fleet import write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.skipif(not docker_ok(), reason="needs a running Docker engine")]


def _inventory(tmp: Path) -> Path:
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return write_inventory(
        tmp / "inventory",
        {"lk-h1": host},
        [1],
        sglang_gpu_host_prepare=False,
        sglang_reports_dir=str(tmp / "reports"),
        sglang_server_state_dir=str(tmp / "state"),
    )


def _deploy(inv: Path, run_id: str, *extra: str) -> tuple[int, str]:
    p = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inv), "deploy.yml", "--tags", "gpu_host",
         "-e", f"sglang_run_id={run_id}", *extra],
        cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    return p.returncode, " ".join((p.stdout + p.stderr).split())


def _hold(lock: Path, **holder: object) -> str:
    lock.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"run_id": "20261205T0100Z", "user": "alice", "controller": "ops-2", "pid": 4242,
                       "started": "2026-12-05T01:00:00+00:00", "epoch": int(time.time()) - 60, **holder})  # fmt: skip
    lock.write_text(text)
    return text


def test_a_held_host_is_left_alone_and_a_stale_lock_is_taken_over(tmp_path):
    inv = _inventory(tmp_path)
    lock = tmp_path / "state" / "rollout-host.lock"
    held = _hold(lock)
    rc, out = _deploy(inv, "second")
    assert rc != 0
    assert (
        "lk-h1 is held by rollout run 20261205T0100Z (alice@ops-2, ansible-playbook pid 4242, since "
        "2026-12-05T01:00:00+00:00); nothing was changed on it." in out
    ), out[-3000:]
    assert lock.read_text() == held  # not taken, not released
    record = json.loads((tmp_path / "reports" / "second" / "hosts" / "lk-h1.json").read_text())
    assert record["outcome"] == "failed" and "is held by rollout run 20261205T0100Z" in record["failure"]
    # --check stops the same way and takes nothing
    rc, out = _deploy(inv, "check", "--check")
    assert rc != 0 and "is held by rollout run 20261205T0100Z" in out and lock.read_text() == held
    # older than sglang_rollout_host_lock_stale_s: taken over, then released when the host is done
    _hold(lock, epoch=int(time.time()) - 7200)
    rc, out = _deploy(inv, "third", "-e", "sglang_rollout_host_lock_stale_s=3600")
    assert rc == 0, out[-3000:]
    assert not lock.exists()


def test_a_lock_left_by_a_dead_run_of_this_controller_is_taken_over(tmp_path):
    inv = _inventory(tmp_path)
    lock = tmp_path / "state" / "rollout-host.lock"
    me = subprocess.run(["hostname"], capture_output=True, text=True, check=True).stdout.strip()
    _hold(lock, controller=me, pid=2**22 + 1)  # no such process
    rc, out = _deploy(inv, "next")
    assert rc == 0, out[-3000:]
    assert not lock.exists()
    rc, out = _deploy(inv, "dry", "--check")  # no lock: --check passes and takes none
    assert rc == 0 and not lock.exists()
