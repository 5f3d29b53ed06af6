"""The fleet's node_exporter textfile on the controller (rolloutreport/metrics.py): what Prometheus
reads of the newest run and of the fleet state, checked with promtool and parsed with prometheus_client."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest

import rolloutreport as rr
from rolloutreport.metrics import outcome, registry

# a run that moved h1 and h2, rolled h3 back (its gate failed, the rollout stopped), never reached h4
SUMMARY = {
    "run_id": "20261207T100000Z",
    "finished": False,
    "hosts": [{"host": h, "image_target": "reg/sglang:0.5.23"} for h in ("h1", "h2", "h3")],
    "moved": ["h1", "h2"], "unchanged": [], "rolled_back": ["h3"], "put_back": [], "left_drained": [],
    "failed": ["h3"], "unreachable": [], "not_reached": ["h4"],
}  # fmt: skip
# the fleet as runs so far left it: h5 lost mid-gate after its drain, h6 at a stage when the controller
# died (before any drain), h7 left out of rotation by a rollback whose server never answered again
STATE = {
    "schema": 1,
    "image_in_flight": {},
    "hosts": {
        "h1": {"outcome": "ok", "pending_repair": False, "drained": False},
        "h2": {"outcome": "ok", "pending_repair": False, "drained": False},
        "h3": {"outcome": "failed", "pending_repair": False, "drained": False},
        "h5": {"outcome": "unreachable", "pending_repair": True, "drained": True},
        "h6": {"outcome": "in progress", "pending_repair": True, "drained": False},
        "h7": {"outcome": "failed", "pending_repair": False, "drained": True},
    },
}


def test_the_textfile_counts_the_run_and_the_fleet(tmp_path: Path, promtool, prom_samples) -> None:
    path = rr.write_fleet_metrics(tmp_path / "metrics" / "sglang_rollout.prom", SUMMARY, STATE)
    text = path.read_text()
    lint = promtool(text)
    assert lint.returncode == 0 and lint.stdout + lint.stderr == "", lint.stdout + lint.stderr
    got = prom_samples(text)

    def one(name: str, **labels: str) -> float:
        return got[(name, frozenset(labels.items()))]

    want_run = {"moved": 2, "unchanged": 0, "rolled_back": 1, "put_back": 0, "left_drained": 0, "failed": 1,
                "unreachable": 0, "not_reached": 1}  # fmt: skip
    assert {r: one("sglang_rollout_last_run_hosts", result=r) for r in want_run} == want_run
    assert {o: one("sglang_rollout_last_run_outcome", outcome=o) for o in ("succeeded", "failed", "unreachable",
            "in_progress")} == {"succeeded": 0, "failed": 1, "unreachable": 0, "in_progress": 0}  # fmt: skip
    assert one("sglang_rollout_last_run_finished") == 0
    assert one("sglang_rollout_last_run_info", run_id="20261207T100000Z", image="reg/sglang:0.5.23") == 1
    want_fleet = {"ok": 2, "failed": 2, "unreachable": 1, "in_progress": 1, "drained": 2, "pending_repair": 2}
    assert {s: one("sglang_fleet_hosts", state=s) for s in want_fleet} == want_fleet
    assert {h: one("sglang_fleet_host_pending_repair", host=h) for h in STATE["hosts"]} == {
        "h1": 0, "h2": 0, "h3": 0, "h5": 1, "h6": 1, "h7": 0}  # fmt: skip
    assert {h: one("sglang_fleet_host_drained", host=h) for h in STATE["hosts"]} == {
        "h1": 0, "h2": 0, "h3": 0, "h5": 1, "h6": 0, "h7": 1}  # fmt: skip
    assert [p.name for p in path.parent.iterdir()] == ["sglang_rollout.prom"]  # no temporary file left


def test_the_timestamp_is_when_the_summary_was_written(prom_samples) -> None:
    got = prom_samples(generate_latest(registry(SUMMARY, STATE, now=1796616000.0)).decode())
    assert got[("sglang_rollout_last_run_timestamp_seconds", frozenset())] == 1796616000.0


@pytest.mark.parametrize(
    ("over", "want"),
    [
        ({}, "failed"),
        ({"failed": [], "unreachable": ["h3"]}, "unreachable"),
        ({"failed": [], "not_reached": []}, "in_progress"),
        ({"failed": [], "not_reached": [], "finished": True}, "succeeded"),
        ({"failed": [], "finished": True}, "in_progress"),  # a --limit run left h4 out: not the whole run
    ],
)
def test_the_outcome_of_a_run(over: dict, want: str) -> None:
    assert outcome(SUMMARY | over) == want


def test_the_path_default_override_and_off(tmp_path: Path) -> None:
    run_dir = tmp_path / "reports" / "run1"
    assert rr.metrics_path(run_dir) == tmp_path / "reports" / "metrics" / "sglang_rollout.prom"
    assert rr.metrics_path(run_dir, "/var/lib/prometheus/node-exporter/x.prom") == Path(
        "/var/lib/prometheus/node-exporter/x.prom"
    )
    assert rr.metrics_path(run_dir, "") is None
    with pytest.raises(ValueError, match=r"reads only \*\.prom files"):
        rr.write_fleet_metrics(tmp_path / "x.txt", SUMMARY, STATE)
