"""The rollout's action plugins refuse wrong arguments with Ansible's own validator, naming the
option and its allowed values, before they touch anything (real ansible-playbook, localhost only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _play(tmp_path: Path, task: str, *extra: str) -> subprocess.CompletedProcess[str]:
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
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(book), *extra],
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
            "value of state must be one of: in_progress, final, lost, rotation, got: done",
        ),
        ("rollout_record: {state: final}", "missing required arguments: dir"),
        ("rollout_summary: {dir: REPORTS}", "missing required arguments: hosts"),
        ("rollout_summary: {dir: REPORTS, hosts: [a], colour: red}", "Unsupported parameters for (rollout_summary)"),
        (
            "rollout_fleet_lock_judge: {results: {}, run_id: r1, run_dir: REPORTS}",
            "missing required arguments: stale_s",
        ),
        (
            "rollout_fleet_lock_judge: {results: {}, run_id: r1, run_dir: REPORTS, stale_s: soon}",
            "argument 'stale_s' is of type",
        ),
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
    assert (
        "Gate references written by this run (baseline-<group>.json): none."
        in (reports / "rollout-summary.md").read_text()
    )


def test_a_check_run_prunes_no_report_history_and_says_what_a_real_run_would(tmp_path):
    """At a run's last summary the report history is bounded (keep_runs), but ``--check`` removes
    nothing: its summary names the folders a real run would remove; the real run removes them."""
    reports = tmp_path / "reports"
    for i, name in enumerate(["20261201T0000Z", "20261202T0000Z", "20261203T0000Z"]):
        (reports / name / "hosts").mkdir(parents=True)
        os.utime(reports / name, (1_700_000_000 + i, 1_700_000_000 + i))
    current = reports / "20261204T0000Z"
    current.mkdir()
    task = f"rollout_summary: {{dir: {current}, hosts: [h1], finished: true, keep_runs: 2}}"
    check = _play(tmp_path, task, "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    older = ["20261201T0000Z", "20261202T0000Z", "20261203T0000Z"]
    assert sorted(p.name for p in reports.iterdir()) == [*older, current.name]
    md = (current / "rollout-summary.md").read_text()
    assert "would remove (--check: nothing removed) 2 older run folders: 20261201T0000Z, 20261202T0000Z." in md
    history = json.loads((current / "rollout-summary.json").read_text())["history"]
    assert history == {"keep_runs": 2, "removed": ["20261201T0000Z", "20261202T0000Z"], "check_mode": True}
    real = _play(tmp_path, task)
    assert real.returncode == 0, real.stdout + real.stderr
    left = sorted(p.name for p in reports.iterdir())
    # the real run also wrote the fleet's Prometheus textfile (the --check run above wrote none)
    assert left == ["20261203T0000Z", current.name, "fleet-state.json", "fleet-state.json.lock", "metrics"]
    md = (current / "rollout-summary.md").read_text()
    assert "removed 2 older run folders: 20261201T0000Z, 20261202T0000Z." in md
