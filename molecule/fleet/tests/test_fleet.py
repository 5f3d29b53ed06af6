"""molecule/fleet verify: the state of each host after a rollout that one host's gate stopped."""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))
import helpers

RELEASE_A = "local/sglang-test-engine:release-a"
RELEASE_B = "local/sglang-test-engine:release-b"
EPH = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))


def _ts(text: str) -> datetime:
    """Docker's RFC 3339 nanosecond timestamps and ours, to the second."""
    return datetime.fromisoformat(text.strip().rstrip("Z").split(".")[0])


def _server(host):
    name = f"mol-sglang-{helpers.inventory_name(host)}"
    return name, helpers.container(host, name)


def _summary():
    summaries = helpers.rollout_summaries()
    assert summaries, f"no rollout summary under {helpers.reports_dir()}"
    return summaries[-1]


def _host_entry(summary, name):
    return next((h for h in summary["hosts"] if h["host"] == name), None)


def test_every_host_is_running_and_healthy(host):
    name, info = _server(host)
    assert info["State"]["Running"], helpers.container_logs(host, name)
    assert info["State"].get("Health", {}).get("Status", "healthy") in ("healthy", "starting")


def test_each_host_runs_the_image_it_should(host):
    me = helpers.inventory_name(host)
    name, info = _server(host)
    tags = helpers.image_ref(host, info["Image"])
    expected = RELEASE_B if me == "mol-fleet-h1" else RELEASE_A
    assert expected in tags, f"{me} runs {tags}, expected {expected}\n{helpers.container_logs(host, name)}"


def test_failed_host_kept_its_flashinfer_cache(host):
    me = helpers.inventory_name(host)
    if me != "mol-fleet-h2":
        pytest.skip("only mol-fleet-h2 was set to fail its gate")
    _, info = _server(host)
    mount = helpers.flashinfer_mount(info)
    # back on release-a's key, and the volume it used before the attempt is the one mounted again
    assert "fi0.6.3" in mount["Name"], mount
    volumes = host.check_output("docker volume ls -q --filter name=mol-fic-%s-", me).split()
    assert mount["Name"] in volumes
    # the cache of the failed release-b attempt is kept too (never removed on a failed gate)
    assert any("fi0.7.2-" in v for v in volumes), volumes


def test_host_after_the_stop_was_not_touched(host):
    me = helpers.inventory_name(host)
    if me != "mol-fleet-h3":
        pytest.skip("only mol-fleet-h3 comes after the stop")
    _, info = _server(host)
    started = _ts(info["State"]["StartedAt"])
    rollout_began = _ts((EPH / "rollout-release-b.started").read_text())
    assert started < rollout_began, f"{me} was restarted at {started}, after the rollout began at {rollout_began}"


def test_summary_names_the_rolled_back_host_and_its_failed_check(host):
    summary = _summary()
    h2 = _host_entry(summary, "mol-fleet-h2")
    assert h2 is not None, summary
    assert h2["rolled_back"] is True, h2
    assert h2["failed_checks"], h2
    h1 = _host_entry(summary, "mol-fleet-h1")
    assert h1 is not None and h1["outcome"] == "ok", h1
    assert "mol-fleet-h2" in summary["rolled_back"] and "mol-fleet-h2" in summary["failed"], summary
    # the stop: h3 comes after the failed batch, so the rollout never reached it
    assert _host_entry(summary, "mol-fleet-h3") is None, summary
    assert "mol-fleet-h3" in summary["not_reached"], summary


H1_KEY = "sk-molecule-fleet-h1-3c9a"


def test_gates_ran_next_to_the_servers_and_the_summary_says_so(host):
    summary = _summary()
    for name in ("mol-fleet-h1", "mol-fleet-h2"):
        entry = _host_entry(summary, name)
        assert entry is not None and entry["gate_location"] == "host", entry
    reports = helpers.gate_reports("mol-fleet-h1")
    last = reports[-1]
    # h1's server wants its key: a pass means the gate container read it from the tmpfs file
    assert last["verdict"] == "pass" and last["labels"]["gate_location"] == "host", last["labels"]
    assert last["url"].startswith("http://127.0.0.1:31201"), last["url"]
    for path in helpers.reports_dir().glob("mol-fleet-h1/*/*"):
        if path.is_file():
            assert H1_KEY.encode() not in path.read_bytes(), path


def test_no_gate_container_and_no_key_file_is_left(host):
    me = helpers.inventory_name(host)
    left = host.check_output("docker ps -aq --filter label=io.sglang-deploy.role=gate").split()
    assert left == [], left
    assert not host.file(f"/dev/shm/sglang-molecule-gate/{me}/api_key").exists
    # the serving image carries the gate it ran: validate/, versioned in a label
    label = host.check_output(
        "docker image inspect -f '{{ index .Config.Labels \"io.sglang-deploy.validate.version\" }}' %s", RELEASE_B
    )
    assert len(label.strip()) == 16 and int(label.strip(), 16) >= 0, label
