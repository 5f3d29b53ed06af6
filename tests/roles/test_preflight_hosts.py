"""Preflight reaches each host and checks what would make the rollout fail there later: the NVIDIA
driver against the image's CUDA (13: driver 580 or newer), MIG, free disk, the GPUs' arch against
the profile, Xid events since the host's last good deploy, and the NVIDIA container runtime. Real
`ansible-playbook playbooks/preflight.yml` on a copy of the local inventory (its own lock), with a
fake nvidia-smi that replays the recorded H200 (tests/fixtures/nvidia-smi-h200-*), this machine's
docker, and a kernel log file."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from roles_testlib import RECORDED_SMI_Q, REPO, ansible_playbook, clean_kernel_log, recorded_nvidia_smi

MIG_OFF = "MIG Mode\n        Current                                        : Disabled"
RECORDED = RECORDED_SMI_Q.read_text()
JUDGE = "Judge every host before any host changes"


def _preflight(tmp_path: Path, smi_text: str, *extra: str, kernel_log: str | None = None):
    # the local inventory reads ../../validate/configs: a copy at the same depth, next to a link to it
    inv = tmp_path / "repo" / "inventory" / "local"
    shutil.copytree(REPO / "inventory" / "local", inv)
    (tmp_path / "repo" / "validate").symlink_to(REPO / "validate")
    smi = recorded_nvidia_smi(tmp_path, smi_text)
    klog = clean_kernel_log(tmp_path, *([kernel_log] if kernel_log is not None else []))
    return ansible_playbook(
        "-i", str(inv), "playbooks/preflight.yml", "-e", "sglang_gpu_host_prepare=true",
        "-e", "sglang_gpu_count=1", "-e", "sglang_server_tp_size=1",  # the recorded H200 has one GPU
        "-e", "sglang_gpu_arch=90",  # of compute capability 9.0 (the inventory's profile is sm_120)
        "-e", f"sglang_server_state_dir={tmp_path / 'state'}", "-e", json.dumps({"gpu_host_kernel_log_command": klog}),
        "-e", f"gpu_host_nvidia_smi={smi}", "-e", f"sglang_reports_dir={tmp_path / 'reports'}", *extra,
    )  # fmt: skip


def _judged(run, task: str, needle: str | None) -> None:
    """The preflight task ran; the run passed (needle None) or stopped saying ``needle``."""
    flat = " ".join(run.out.split())
    assert f"TASK [{task}]" in run.out
    if needle is None:
        assert run.rc == 0, flat[-3000:]
    else:
        assert run.rc != 0 and needle in flat, flat[-3000:]


def test_the_recorded_h200_passes(tmp_path: Path) -> None:
    run = _preflight(tmp_path, RECORDED)
    assert run.rc == 0, run.out[-3000:]
    assert f"TASK [{JUDGE}]" in run.out


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (("580.159.04", "570.86.15"), "NVIDIA driver 570.86.15 is older than 580 (sglang_preflight_min_driver"),
        ((MIG_OFF, MIG_OFF.replace("Disabled", "Enabled")), "MIG is enabled on 1 GPU(s): tensor parallelism needs"),
    ],
)  # fmt: skip
def test_old_driver_or_mig_stops_preflight_naming_it(tmp_path: Path, edit: tuple[str, str], needle: str) -> None:
    assert edit[0] in RECORDED
    run = _preflight(tmp_path, RECORDED.replace(edit[0], edit[1], 1))
    assert run.rc != 0
    assert needle in " ".join(run.out.split()), run.out[-3000:]


def test_a_full_disk_stops_preflight_naming_the_variable(tmp_path: Path) -> None:
    run = _preflight(tmp_path, RECORDED, "-e", "sglang_preflight_min_free_gb=100000")
    assert run.rc != 0
    flat = " ".join(run.out.split())
    assert "GB free on /var/lib (sglang_preflight_disk_path), at least 100000 GB are needed" in flat, flat[-3000:]


FABRIC_NA = (
    "State                                          : N/A\n        Status                                         : N/A"
)


@pytest.mark.parametrize(
    ("state", "status", "needle"),
    [
        ("Not Started", "N/A", "fabric is not ready on 1 GPU(s) (nvidia-smi -q Fabric State / Status: Not Started / N/A)"),  # noqa: E501
        ("Completed", "Failure", "(nvidia-smi -q Fabric State / Status: Completed / Failure): start the fabric"),
        ("Completed", "Success", None),
    ],
)  # fmt: skip
def test_an_nvswitch_fabric_that_is_not_up_stops_preflight(tmp_path: Path, state: str, status: str, needle) -> None:
    assert RECORDED.count(FABRIC_NA) == 1  # the recorded H200 (no NVSwitch) says N/A and passes above
    edited = FABRIC_NA.replace(": N/A", f": {state}", 1).replace("N/A", status, 1)
    run = _preflight(tmp_path, RECORDED.replace(FABRIC_NA, edited))
    _judged(run, JUDGE, needle)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("-e", "sglang_gpu_count=8"), "nvidia-smi sees 1 GPU(s), the profile needs 8 (sglang_gpu_count, the tensor-parallel size)"),  # noqa: E501
        (("-e", "sglang_gpu_min_memory_gib=141"), "its smallest GPU has 143771 MiB, the profile needs 141 GiB (sglang_gpu_min_memory_gib)"),  # noqa: E501
        (("-e", "sglang_gpu_min_memory_gib=140"), None),  # the H200's 143,771 MiB are 140.4 GiB
    ],
)  # fmt: skip
def test_fewer_or_smaller_gpus_than_the_profile_stop_preflight(tmp_path: Path, extra: tuple[str, ...], needle) -> None:
    run = _preflight(tmp_path, RECORDED, *extra)
    _judged(run, JUDGE, needle)


def test_gpus_of_another_arch_than_the_profile_stop_preflight(tmp_path: Path) -> None:
    """inventory/local's profile is sm_120 (RTX PRO 6000); the recorded GPU is an sm_90 H200."""
    run = _preflight(tmp_path, RECORDED, "-e", "sglang_gpu_arch=120")
    _judged(run, JUDGE, "localhost: its GPUs are sm_90 (NVIDIA H200), the profile expects sm_120 (sglang_gpu_arch): "
                        "put the host in its GPU profile's group, or correct sglang_gpu_arch.")  # fmt: skip


def test_an_air_gapped_b200_profile_stops_on_an_archive_without_flashinfer_kernel_binaries(tmp_path: Path) -> None:
    """The archive's NAME.json on the controller says the image carries no FlashInfer kernel binaries
    (io.sglang-deploy.flashinfer.cubins=none) and the hosts are offline with a B200 (sm_100) profile:
    refused before any host changes (preflight/cubins.py), beside the arch refusal of the recorded H200."""
    labels = {"io.sglang-deploy.engine": "sglang", "io.sglang-deploy.flashinfer.version": "0.7.2",
              "io.sglang-deploy.flashinfer.cubins": "none"}  # fmt: skip
    (tmp_path / "sglang-glm5_0.5.23.json").write_text(json.dumps({"labels": labels}))
    archive = {"sglang_image_source": "archive", "sglang_image_archive_on_host": False, "gpu_host_offline": True,
               "sglang_image_archive_path": str(tmp_path / "sglang-glm5_0.5.23.tar.gz")}  # fmt: skip
    run = _preflight(tmp_path, RECORDED, "-e", "sglang_gpu_arch=100", "-e", json.dumps(archive))
    _judged(run, JUDGE, "carries no FlashInfer kernel binaries (io.sglang-deploy.flashinfer.cubins=none), and this "
                        "B200-class host (sm_100) cannot download them")  # fmt: skip
    assert "its GPUs are sm_90 (NVIDIA H200), the profile expects sm_100" in " ".join(run.out.split())


XID = "NVRM: Xid (PCI:0000:00:06): 79, pid=2394, name=python3, GPU has fallen off the bus."


def test_xid_events_since_the_last_good_deploy_stop_preflight_and_older_ones_do_not(tmp_path: Path) -> None:
    """The kernel stamps lines in seconds since boot; the host's last good deploy is its last-good
    record's modification time. An Xid stamped after it stops the run, naming the GPU; the same
    event before it (the host passed a gate since) does not."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    log = f"[    1.000000] Linux version 6.1.0\n[{uptime - 100:12.6f}] {XID}\n"
    state = tmp_path / "state"
    state.mkdir()
    record = state / "sglang-test-engine.last-good.json"  # inventory/local's sglang_server_container_name
    record.write_text("{}")
    os.utime(record, (time.time() - 200, time.time() - 200))  # 100 s before the Xid
    run = _preflight(tmp_path, RECORDED, kernel_log=log)
    _judged(run, JUDGE, "localhost: 1 Xid event(s): GPU0: Xid 79 (GPU has fallen off the bus) in the kernel log since "
                        f"the last good deploy: [{uptime - 100:12.6f}] {XID}. Have the GPU checked")  # fmt: skip
    os.utime(record, None)  # the host passed a gate after the Xid
    shutil.rmtree(tmp_path / "repo")
    _judged(_preflight(tmp_path, RECORDED, kernel_log=log), JUDGE, None)


def test_a_docker_without_the_nvidia_runtime_that_the_role_will_not_add_stops_preflight(tmp_path: Path) -> None:
    """This machine's docker has no nvidia runtime; the gpu_host role would register it (daemon.json),
    unless told not to manage the daemon's config: then preflight stops the run, naming the fix."""
    run = _preflight(tmp_path, RECORDED, "-e", "gpu_host_manage_daemon_config=false")
    _judged(run, JUDGE, "localhost: docker has no nvidia runtime (")
    assert (
        "gpu_host_manage_daemon_config is false: run 'nvidia-ctk runtime configure --runtime=docker' on the host "
        "and reload docker, or set gpu_host_manage_daemon_config: true."
    ) in " ".join(run.out.split())


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("sglang_gate_port=70000",
         "Invalid sglang_gate settings for localhost: sglang_gate_port must be in 1..65535 (got 70000)"),
        ("sglang_gate_port=seventy", "argument 'sglang_gate_port' is of type str and we were unable to convert to int"),
    ],
)  # fmt: skip
def test_a_roles_bad_setting_stops_preflight_naming_it(tmp_path: Path, extra: str, needle: str) -> None:
    """The roles' settings checks (their argument specs, then preflight/role_rules.py through the
    settings_check action) run in preflight, before any host changes."""
    run = _preflight(tmp_path, RECORDED, "-e", extra)
    _judged(run, "Check the gate settings", needle)
    assert "PLAY [Roll out" not in run.out and all(c["changed"] == 0 for c in run.recap.values())
