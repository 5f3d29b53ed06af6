"""molecule/upgrade verify: a FlashInfer/CUDA upgrade gets a fresh cache; the old one stays."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))
import helpers

NAME = "mol-sglang-mol-upgrade-h1"


def _records():
    """This host's rollout records, oldest first: converge (a), upgrade (b), redeploy (b)."""
    files = sorted(helpers.reports_dir().glob("*/hosts/mol-upgrade-h1.json"), key=lambda p: p.stat().st_mtime)
    records = [json.loads(p.read_text()) for p in files]
    return [r for r in records if not r["check_mode"]]  # the --check run before the upgrade changed nothing


def test_release_b_runs_on_a_new_cache_key(host):
    info = helpers.container(host, NAME)
    assert "local/sglang-test-engine:release-b" in helpers.image_ref(host, info["Image"])
    mount = helpers.flashinfer_mount(info)
    assert "fi0.7.2-" in mount["Name"] and "cu13.0" in mount["Name"], mount


def test_release_a_cache_is_kept(host):
    volumes = host.check_output("docker volume ls -q --filter name=mol-fic-mol-upgrade-h1-").split()
    assert any("fi0.6.3" in v and "cu12.9" in v for v in volumes), volumes
    assert any("fi0.7.2-" in v and "cu13.0" in v for v in volumes), volumes


def test_upgrade_started_cold_and_restart_found_it_warm(host):
    records = _records()
    assert len(records) >= 3, records
    converge, upgrade, redeploy = records[-3:]
    assert converge["cache"]["start"] == "cold", converge
    assert upgrade["cache"]["start"] == "cold", upgrade  # new key: nothing stale reused
    assert upgrade["cache"]["key"] != converge["cache"]["key"]
    assert redeploy["cache"]["start"] == "warm", redeploy
    assert redeploy["cache"]["size_bytes"] > 0
    # the engine itself saw the cache warm after the restart
    logs = helpers.container_logs(host, NAME, tail=400)
    assert "flashinfer cache: warm" in logs, logs


def test_upgrade_passed_its_gate(host):
    reports = helpers.gate_reports("mol-upgrade-h1")
    assert reports and reports[-1]["verdict"] == "pass"


def test_traffic_hooks_drain_before_the_replacement_and_undrain_after_the_gate(host):
    """converge: first start, undrain after its gate; upgrade: drain, new gate, undrain; redeploy: nothing."""
    lines = (helpers.reports_dir().parent / "traffic-hooks.log").read_text().split("\n")
    events = [line.split() for line in lines if line.strip()]
    assert [(e[0], e[1]) for e in events] == [
        ("undrain", "mol-upgrade-h1"),
        ("drain", "mol-upgrade-h1"),
        ("undrain", "mol-upgrade-h1"),
    ], events
    reports = [r for r in helpers.gate_reports("mol-upgrade-h1") if "release-b" in r["labels"].get("image", "")]
    assert reports, "no gate report of release-b"
    gate_started = reports[0]["started_at"][:19]
    assert events[1][2] <= gate_started <= events[2][2], (events, gate_started)
    info = helpers.container(host, NAME)
    assert info["Config"].get("StopTimeout") == 20, info["Config"].get("StopTimeout")


def test_check_run_before_the_upgrade_showed_the_change_and_changed_nothing(host):
    """side_effect ran `deploy.yml --check --diff` with release-b first (nothing started: checked there)."""
    log = helpers.nested_log("check-upgrade")
    assert "TASK [flashinfer_cache : Create the cache volume mol-fic-mol-upgrade-h1-fi0.7.2-cu13.0-" in log, log[-3000:]
    run = log.index("TASK [sglang_server : Run the serving container from local/sglang-test-engine:release-b]")
    section = log[run : log.index("TASK [", run + 10)]
    # the diff names the new image, its release and its cache volume
    assert "changed: [mol-upgrade-h1]" in section and "\n+    image: sha256:" in section, section[:3000]
    assert "+        io.sglang-deploy.test-engine.release: release-b" in section
    assert "+        io.sglang-deploy.cache: mol-fic-mol-upgrade-h1-fi0.7.2-cu13.0-" in section
    flat = " ".join(log.split())  # the summary table wraps long cells
    assert "(check mode: nothing changed)" in flat and "failed=0" in flat
    check = [json.loads(p.read_text()) for p in helpers.reports_dir().glob("*/hosts/mol-upgrade-h1.json")]
    assert [r["gate"] for r in check if r["check_mode"]] == ["check-mode"]
