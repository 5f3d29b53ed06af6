"""molecule/hosts verify: gpu_host on Debian 12 (engine present, air-gapped) and Debian 13 (fresh),
reached over SSH as `deploy` with sudo; `--tags gpu_host` did nothing else; the side effect's
failures name what they found on the recorded H200."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))
import helpers


def _me(host) -> str:
    return host.backend.get_hostname()


def _installed(host, package: str) -> str | None:
    """The installed version of a package, or None (dpkg's own answer, as the role reads it)."""
    out = host.run("dpkg-query -W -f='${db:Status-Abbrev} ${Version}' %s", package)
    if out.rc != 0 or not out.stdout.startswith("ii"):
        return None
    return out.stdout.split(" ", 1)[1].strip()


def test_reached_over_ssh_as_deploy_with_sudo(host):
    assert host.backend.NAME == "ansible"
    assert host.check_output("echo $SUDO_USER") == "deploy"
    assert host.check_output("id -u") == "0"  # become worked through sudo, not a root login


def test_debian_release(host):
    want = {"mol-hosts-deb12": "12", "mol-hosts-deb13": "13"}[_me(host)]
    assert host.system_info.distribution == "debian"
    assert host.file("/etc/os-release").content_string.count(f'VERSION_ID="{want}"') == 1


def test_python_libraries_for_the_modules_are_there(host):
    assert _installed(host, "python3-requests")
    assert _installed(host, "python3-debian")


def test_existing_engine_is_kept_and_docker_io_is_not_installed(host):
    if _me(host) != "mol-hosts-deb12":
        pytest.skip("only mol-hosts-deb12 has an engine before gpu_host runs")
    assert _installed(host, "docker-ce") == "5:27.5.1-1~debian.12~bookworm"
    assert _installed(host, "docker.io") is None


def test_fresh_host_got_debians_docker_io(host):
    if _me(host) != "mol-hosts-deb13":
        pytest.skip("only mol-hosts-deb13 starts without an engine")
    assert _installed(host, "docker.io"), "docker.io was not installed on a host without an engine"
    assert host.file("/usr/sbin/dockerd").exists


def test_air_gapped_host_fetched_nothing(host):
    if _me(host) != "mol-hosts-deb12":
        pytest.skip("only mol-hosts-deb12 is air-gapped")
    lists = host.run("find /var/lib/apt/lists -name '*_Packages*'")
    assert lists.stdout.strip() == "", f"apt-get update ran on an offline host: {lists.stdout}"
    assert not host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").exists


def test_daemon_json_has_the_runtime_live_restore_and_log_rotation(host):
    config = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert config["runtimes"]["nvidia"] == {"args": [], "path": "nvidia-container-runtime"}
    assert config["live-restore"] is True
    assert config["log-driver"] == "json-file" and config["log-opts"] == {"max-file": "5", "max-size": "100m"}


def test_log_settings_leave_a_restart_pending_on_the_host_and_nothing_restarted(host):
    """dockerd reads log settings only at start: the restart waits for the rollout's drain (a run
    narrowed to `--tags gpu_host` never does it), recorded on the host so no run forgets it."""
    pending = json.loads(host.file("/var/lib/sglang-deploy/docker-restart-pending.json").content_string)
    assert pending["settings"] == ["log-driver", "log-opts"]


def test_tags_gpu_host_started_no_server():
    """Nothing but host preparation ran: no server container, no cache volume on the machine."""
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", "name=mol-sglang-mol-hosts", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == ""
    vols = subprocess.run(
        ["docker", "volume", "ls", "-q", "--filter", "name=mol-fic-mol-hosts"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert vols.stdout.strip() == ""


def test_wrong_arch_stops_preflight_on_the_recorded_h200():
    """Preflight asks each host's nvidia-smi for its GPUs' compute capability (over SSH, with sudo):
    both hosts are refused before any host changes, in one line naming them, not at the canary's turn."""
    log = " ".join(helpers.nested_log("wrong-arch").split())  # long lines come back wrapped
    assert (
        "mol-hosts-deb12, mol-hosts-deb13: its GPUs are sm_90 (NVIDIA H200), the profile expects sm_120 "
        "(sglang_gpu_arch): put the host in its GPU profile's group, or correct sglang_gpu_arch."
    ) in log, log[-3000:]
    assert "Preflight refused 2 of 2 hosts: nothing was changed on any host." in log
    assert "PLAY [Canaries" not in log and "PLAY [Roll out" not in log and "Check the GPUs' health" not in log


def test_offline_host_names_the_missing_package_and_installs_nothing(host):
    log = " ".join(helpers.nested_log("offline-missing").split())
    want = "gpu_host_offline is true and mol-hosts-deb12 lacks nvidia-container-toolkit-base: nothing was installed"
    assert want in log, log[-3000:]
    if _me(host) == "mol-hosts-deb12":
        assert _installed(host, "nvidia-container-toolkit-base") is None
