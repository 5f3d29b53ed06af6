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
