"""molecule/fleet verify: the state of each host after a rollout that one host's gate stopped."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))
import helpers

RELEASE_A = "local/sglang-test-engine:release-a"
RELEASE_B = "local/sglang-test-engine:release-b"
EPH = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))


def _server(host):
    name = f"mol-sglang-{helpers.inventory_name(host)}"
    return name, helpers.container(host, name)


def _log(label: str) -> str:
    return helpers.nested_log(label)


def _summary(label: str = "rollout-release-b"):
    return helpers.summary_after(label)


def _host_entry(summary, name):
    return next((h for h in summary["hosts"] if h["host"] == name), None)


def test_every_host_is_running_and_healthy(host):
    name, info = _server(host)
    assert info["State"]["Running"], helpers.container_logs(host, name)
    assert info["State"].get("Health", {}).get("Status", "healthy") in ("healthy", "starting")


def test_every_host_ends_on_release_b_after_the_repair(host):
    me = helpers.inventory_name(host)
    name, info = _server(host)
    tags = helpers.image_ref(host, info["Image"])
    assert RELEASE_B in tags, f"{me} runs {tags}, expected {RELEASE_B}\n{helpers.container_logs(host, name)}"


def test_failed_gate_rolled_back_and_kept_both_caches(host):
    me = helpers.inventory_name(host)
    if me != "mol-fleet-h2":
        pytest.skip("only mol-fleet-h2 was set to fail its gate")
    h2 = _host_entry(_summary(), me)
    assert h2["rolled_back"] is True and h2["image_after"] == RELEASE_A, h2
    volumes = host.check_output("docker volume ls -q --filter name=mol-fic-%s-", me).split()
    # release-a's cache stayed through the failed attempt; the failed attempt's cache was kept too
    # (never removed on a failed gate) and is the one release-b warms up on after the repair
    assert any("fi0.6.3-" in v for v in volumes) and any("fi0.7.2-" in v for v in volumes), volumes
    _, info = _server(host)
    assert "fi0.7.2-" in helpers.flashinfer_mount(info)["Name"]


def test_host_after_the_stop_was_not_touched_by_that_rollout(host):
    summary = _summary()
    assert _host_entry(summary, "mol-fleet-h3") is None and "mol-fleet-h3" in summary["not_reached"], summary
    assert not re.search(r"^changed: \[mol-fleet-h3\]", _log("rollout-release-b"), re.M)


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


def test_the_server_key_is_in_no_container_config_command_line_or_log(host):
    """h1's key reaches its server through a root-only file and the launcher, nowhere else."""
    if helpers.inventory_name(host) != "mol-fleet-h1":
        pytest.skip("only mol-fleet-h1 has a key")
    name, info = _server(host)
    assert H1_KEY not in str(info["Config"]) and H1_KEY not in str(info["Args"])
    assert info["Config"]["Entrypoint"][:3] == ["python3", "/opt/sglang-deploy/launch.py", "--api-key-file"]
    key_file = host.file("/dev/shm/sglang-molecule-gate/mol-fleet-h1-server/api-key")
    assert key_file.mode == 0o400 and key_file.user == "root"
    assert H1_KEY not in helpers.container_logs(host, name, tail=100000)
    cmdlines = host.check_output("docker exec %s sh -c 'cat /proc/[0-9]*/cmdline' | tr '\\0' ' '", name)
    assert "launch.py" in cmdlines and H1_KEY not in cmdlines


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


def test_host_lost_during_its_gate_stopped_the_rollout_and_is_named(host):
    summary = _summary("rollout-unreachable")
    assert summary["unreachable"] == ["mol-fleet-h2"], summary
    h2 = _host_entry(summary, "mol-fleet-h2")
    assert h2["outcome"] == "unreachable" and h2["stage"] == "gate", h2
    assert "mol-fleet-h3" in summary["not_reached"] and _host_entry(summary, "mol-fleet-h3") is None, summary
    assert "stopped mol-fleet-h2" not in _log("rollout-unreachable")  # the watcher is not part of the run


def test_second_run_finished_h2_first_then_moved_h3(host):
    log = _log("rollout-repair")
    repair = log.index("PLAY [Finish the hosts the last rollout left unreachable]")
    main = log.index("PLAY [Roll out host by host (canary first)]")
    assert "mol-fleet-h2" in log[repair:main] and "[mol-fleet-h3]" not in log[repair:main], log[repair:main][-2000:]
    summary = _summary("rollout-repair")
    assert summary["unreachable"] == [] and summary["failed"] == [] and summary["not_reached"] == [], summary
    h2 = _host_entry(summary, "mol-fleet-h2")
    assert h2["outcome"] == "ok" and h2["gate"] == "pass", h2  # re-gated: its config never passed one
    h3 = _host_entry(summary, "mol-fleet-h3")
    assert h3["outcome"] == "ok" and h3["image_after"] == RELEASE_B, h3
    # the repaired host was compared with its own group's reference, not one of its own
    assert sorted(p.name for p in helpers.reports_dir().glob("baseline-*.json")) == ["baseline-sglang_servers.json"]
    report = helpers.gate_reports("mol-fleet-h2")[-1]
    assert report["verdict"] == "pass" and report["baseline"]["used"] is True, report["baseline"]
