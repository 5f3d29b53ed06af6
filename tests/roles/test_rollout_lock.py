"""One rollout at a time per inventory: preflight takes a lock held by the ansible-playbook process.

Real ansible-playbook runs of playbooks/preflight.yml on inventory/example (nothing contacted),
with a lock file left by another process: a live ansible-playbook blocks the run and is named; a
process that is gone leaves a stale lock that the next run takes over.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

from roles_testlib import BIN, REPO, ansible_env, ansible_playbook, example_gpu_hosts
from test_roles_static import DEMO_VAULT_PASSWORD


def _lock_path(reports: Path) -> Path:
    digest = hashlib.sha1(str(REPO / "inventory" / "example").encode()).hexdigest()[:12]
    return reports / f".rollout-{digest}.lock"


def _preflight(tmp_path: Path, reports: Path, run_id: str):
    password = tmp_path / "vault-pass"
    password.write_text(DEMO_VAULT_PASSWORD + "\n")
    return ansible_playbook(
        "-i", "inventory/example", "playbooks/preflight.yml", "--vault-password-file", str(password),
        "-l", "gpu-host-01.example.internal,localhost", "-e", "ansible_connection=local",
        "-e", f'{{"ansible_python_interpreter": "{BIN / "python"}"}}',
        "-e", f"sglang_reports_dir={reports}", "-e", f"sglang_run_id={run_id}",
        *example_gpu_hosts(tmp_path),
        "-e", "sglang_preflight_min_free_gb=1",
    )  # fmt: skip


def test_a_running_rollout_blocks_the_next_and_a_dead_one_is_taken_over(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    lock = _lock_path(reports)
    # a live process whose command line says ansible-playbook holds the lock
    holder = subprocess.Popen(["bash", "-c", "exec -a ansible-playbook sleep 120"])
    try:
        time.sleep(0.2)
        lock.write_text(json.dumps({"pid": holder.pid, "run_id": "20261203T0900Z", "user": "alice",
                                    "host": "ops-1", "started": "2026-12-03T09:00:00Z"}))  # fmt: skip
        run = _preflight(tmp_path, reports, "second")
        assert run.rc != 0
        assert "Another rollout of this inventory is running: run 20261203T0900Z by alice@ops-1" in run.out
        assert f"ansible-playbook pid {holder.pid}" in run.out
        assert json.loads(lock.read_text())["pid"] == holder.pid  # untouched
    finally:
        holder.kill()
        holder.wait()
    run = _preflight(tmp_path, reports, "third")
    assert run.rc == 0, run.out
    assert "took over a stale lock of run 20261203T0900Z by alice@ops-1" in run.out
    taken = json.loads(lock.read_text())
    assert taken["run_id"] == "third" and taken["pid"] != holder.pid


def _play(tmp_path: Path, name: str, tasks: str):
    play = tmp_path / name
    play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n" + tasks)
    env = {**ansible_env(), "ANSIBLE_ACTION_PLUGINS": str(REPO / "plugins" / "action")}
    python = f"ansible_python_interpreter={BIN / 'python'}"
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", python, str(play)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_release_removes_only_this_runs_lock(tmp_path):
    lock = tmp_path / "x.lock"
    proc = _play(
        tmp_path,
        "own.yml",
        f"    - rollout_lock: {{path: {lock}, state: present, run_id: r1}}\n"
        f"    - ansible.builtin.command: test -s {lock}\n"
        f"    - rollout_lock: {{path: {lock}, state: absent}}\n"
        f"    - ansible.builtin.command: test ! -e {lock}\n",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lock.write_text(json.dumps({"pid": 1, "run_id": "other"}))
    proc = _play(tmp_path, "other.yml", f"    - rollout_lock: {{path: {lock}, state: absent}}\n")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert json.loads(lock.read_text())["run_id"] == "other"  # another run's lock is not ours to remove
