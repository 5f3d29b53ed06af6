"""One canary per GPU profile: the first host of each sglang_gate_baseline_group rolls first, all
canaries at once, before any wave; a failed canary stops the rollout before any other host.

Real `ansible-playbook deploy.yml` over three SSH test hosts (testengine.ssh_fleet: loopback
addresses of one sshd container, `become` through sudo, the project's ansible.cfg; each with its
own TEST ENGINE container, port and cache volume on this machine's Docker daemon): c-h1 and c-h2
in profile "g1", c-h3 in "g2", serial [1, "100%"]. Without per-profile canaries c-h3 would first
be deployed in the 100 % wave.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from roles_testlib import deploy, docker_ok, remove_test_fleet
from ssh_hosts import loopback_sshd

from testengine import ssh_fleet
from testengine.local_fleet import short_gate_config, write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not docker_ok(), reason="needs a running Docker engine")]  # fmt: skip

HOSTS = {"c-h1": "g1", "c-h2": "g1", "c-h3": "g2"}
BASE_PORT = 31760


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of this module's loopback SSH test hosts' sshd."""
    yield from loopback_sshd(tmp_path_factory, "canary-sshd")


def _inventory(tmp: Path, ssh_port: int, faulty: str = "") -> Path:
    inv = tmp / "inventory"
    (inv / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    hosts = {}
    for i, (name, profile) in enumerate(HOSTS.items()):
        hosts[name] = {
            **ssh_fleet.host_vars(i + 1, ssh_port),
            "sglang_server_port": BASE_PORT + i,
            "sglang_server_container_name": f"canary-sglang-{name}",
            "flashinfer_cache_volume_prefix": f"canary-fic-{name}",
            "sglang_server_state_dir": str(tmp / "state" / name),
            "sglang_gate_baseline_group": profile,
        }
    if faulty:  # its server dies under the gate's load: its gate fails
        hosts[faulty]["sglang_test_engine_env"] = {
            "TEST_ENGINE_FAULT": "crash_above:8",
            "TEST_ENGINE_COLD_START_S": "1",
        }
    write_inventory(
        inv, hosts, [1, "100%"],
        sglang_reports_dir=str(tmp / "reports"), sglang_gate_config=short_gate_config(baseline={"tolerance": 0.5}),
    )  # fmt: skip
    return inv


def _cleanup() -> None:
    remove_test_fleet(HOSTS, "canary")


def _record(tmp: Path, run_id: str, host: str) -> dict:
    return json.loads((tmp / "reports" / run_id / "hosts" / f"{host}.json").read_text())


def test_each_profile_has_its_canary_before_any_wave(tmp_path, sshd):
    _cleanup()
    try:
        run = deploy(_inventory(tmp_path, sshd), "20261206T100000Z")
        log = run.stdout + run.stderr
        assert run.returncode == 0, log[-5000:]
        canaries = log.index("PLAY [Canaries - one host of each GPU profile, before any wave]")
        wave = log.index("PLAY [Roll out host by host (canary first)]")
        assert "[c-h1]" in log[canaries:wave] and "[c-h3]" in log[canaries:wave], log[canaries:wave][-3000:]
        assert "[c-h2]" not in log[canaries:wave]
        summary = json.loads((tmp_path / "reports" / "20261206T100000Z" / "rollout-summary.json").read_text())
        assert sorted(summary["moved"]) == ["c-h1", "c-h2", "c-h3"] and summary["failed"] == [], summary
        h2, h3 = (_record(tmp_path, "20261206T100000Z", h) for h in ("c-h2", "c-h3"))
        # c-h3, the canary of g2, was done before c-h2 (a g1 host of the wave) started
        assert h3["stages"][-1]["stage"] == "done" and h3["stages"][-1]["at"] <= h2["stages"][0]["at"], (h2, h3)
        # c-h2 deployed the image c-h1 (the canary of its profile g1) deployed; the canaries, what their tag named
        h1 = _record(tmp_path, "20261206T100000Z", "c-h1")
        assert (h2["image_pinned_by"], h2["image_id"]) == ("canary c-h1", h1["image_id"]), (h1, h2)
        assert h1["image_pinned_by"] == "" and h3["image_pinned_by"] == "" and h1["image_id"].startswith("sha256:")
        # both canaries passed their gates against their own profile's reference
        assert sorted(p.name for p in (tmp_path / "reports").glob("baseline-*.json")) == [
            "baseline-g1.json",
            "baseline-g2.json",
        ]
    finally:
        _cleanup()


def test_a_failed_canary_stops_every_profile_before_the_wave(tmp_path, sshd):
    _cleanup()
    try:
        run = deploy(_inventory(tmp_path, sshd, faulty="c-h3"), "20261206T110000Z")
        log = run.stdout + run.stderr
        assert run.returncode != 0, log[-5000:]
        # the failed canary ends the run in its own play: no wave starts
        assert "fatal: [c-h3]" in log and "PLAY [Roll out host by host (canary first)]" not in log, log[-5000:]
        summary = json.loads((tmp_path / "reports" / "20261206T110000Z" / "rollout-summary.json").read_text())
        assert summary["failed"] == ["c-h3"] and summary["not_reached"] == ["c-h2"], summary
        assert summary["moved"] == ["c-h1"], summary
        assert summary["failed_canaries"] == {"g2": "c-h3"}, summary
        said = " ".join(log.split())
        assert "CANARY FAILED: c-h3, the canary of GPU profile g2, failed; no wave starts" in said, log[-5000:]
        md = (tmp_path / "reports" / "20261206T110000Z" / "rollout-summary.md").read_text()
        assert "**Stopped**: canary c-h3 failed (GPU profile g2); no wave started." in md, md
        out = subprocess.run(["docker", "ps", "-a", "--filter", "name=canary-sglang-c-h2", "-q"],
                             capture_output=True, text=True, check=False).stdout  # fmt: skip
        assert out.strip() == ""  # c-h2 never got a server
    finally:
        _cleanup()
