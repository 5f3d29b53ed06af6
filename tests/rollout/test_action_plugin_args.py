"""The rollout's action plugins refuse wrong arguments with Ansible's own validator, naming the
option and its allowed values, before they touch anything (real ansible-playbook, localhost only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _play(tmp_path: Path, task: str) -> subprocess.CompletedProcess[str]:
    book = tmp_path / "play.yml"
    book.write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n    - {task}\n")
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_ACTION_PLUGINS=str(REPO / "plugins" / "action"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCALHOST_WARNING="0",
        PYTHONPATH=str(REPO),
    )
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(book)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        (
            "rollout_record: {dir: REPORTS, state: done}",
            "value of state must be one of: in_progress, final, lost, got: done",
        ),
        ("rollout_record: {state: final}", "missing required arguments: dir"),
        ("rollout_summary: {dir: REPORTS}", "missing required arguments: hosts"),
        ("rollout_summary: {dir: REPORTS, hosts: [a], colour: red}", "Unsupported parameters for (rollout_summary)"),
        (
            "rollout_lock: {path: REPORTS/x.lock, state: held}",
            "value of state must be one of: present, absent, got: held",
        ),
        ("rollout_lock: {path: relative.lock}", "rollout_lock: path must be an absolute path (got 'relative.lock')"),
    ],
)
def test_wrong_arguments_fail_before_anything_is_written(tmp_path, task, expected):
    reports = tmp_path / "reports"
    reports.mkdir()
    run = _play(tmp_path, task.replace("REPORTS", str(reports)))
    out = run.stdout + run.stderr
    assert run.returncode == 2, out
    assert expected in out
    assert list(reports.iterdir()) == []


def test_right_arguments_write_the_summary(tmp_path):
    reports = tmp_path / "reports" / "20261205T2300Z"
    reports.mkdir(parents=True)
    run = _play(tmp_path, f"rollout_summary: {{dir: {reports}, hosts: [h1], finished: 'true'}}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(p.name for p in reports.iterdir()) == ["rollout-summary.json", "rollout-summary.md"]
