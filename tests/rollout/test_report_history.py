"""The report history is bounded (rolloutreport/history.py): newest kept, state-named and current kept."""

from __future__ import annotations

import os
from pathlib import Path

import rolloutreport as rr


def _run(reports: Path, name: str, age_s: int, kind: str = "hosts") -> Path:
    d = reports / name
    (d / "hosts").mkdir(parents=True) if kind == "hosts" else d.mkdir(parents=True)
    if kind == "summary":
        (d / "rollout-summary.json").write_text("{}")
    t = 1_700_000_000 - age_s
    os.utime(d, (t, t))
    return d


def test_only_the_newest_runs_stay_but_not_those_the_state_names(tmp_path: Path):
    for i in range(8):  # run-0 the newest ... run-7 the oldest
        _run(tmp_path, f"run-{i}", age_s=i * 60, kind="summary" if i % 2 else "hosts")
    (tmp_path / "scratch").mkdir()  # not a run folder: never touched
    os.utime(tmp_path / "scratch", (1, 1))
    (tmp_path / "fleet-state.json").write_text("{}")
    state = {"hosts": {"h1": {"run_id": "run-6"}, "h2": {"run_id": "run-1"}}}
    removed = rr.prune_runs(tmp_path, keep=3, current="run-0", state=state)
    assert removed == ["run-7", "run-5", "run-4", "run-3"]  # oldest first; run-6 named by the state
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["fleet-state.json", "run-0", "run-1", "run-2", "run-6", "scratch"]


def test_the_current_run_is_kept_even_when_older_by_mtime_and_zero_keeps_all(tmp_path: Path):
    for i in range(4):
        _run(tmp_path, f"run-{i}", age_s=i * 60)
    assert rr.prune_runs(tmp_path, keep=0, current="x", state={}) == []
    assert rr.prune_runs(tmp_path, keep=1, current="run-3", state={"hosts": {"h": "not a dict"}}) == ["run-2", "run-1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-0", "run-3"]
    assert rr.prune_runs(tmp_path / "missing", keep=1, current="x", state={}) == []


def test_a_check_run_removes_nothing_and_says_what_a_real_run_would(tmp_path: Path):
    for i in range(4):
        _run(tmp_path, f"run-{i}", age_s=i * 60)
    assert rr.prune_runs(tmp_path, keep=2, current="run-0", state={}, dry_run=True) == ["run-3", "run-2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-0", "run-1", "run-2", "run-3"]
    # exactly `keep` runs: none is too many
    assert rr.prune_runs(tmp_path, keep=4, current="run-0", state={}) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-0", "run-1", "run-2", "run-3"]
