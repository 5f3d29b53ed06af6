"""Preflight reaches each host and checks what would make the rollout fail there later: the NVIDIA
driver against the image's CUDA (13: driver 580 or newer), MIG, and free disk. Real
`ansible-playbook playbooks/preflight.yml` on a copy of the local inventory (its own lock), with a
fake nvidia-smi whose output has the shape of the recorded H200's `nvidia-smi -q`
(tests/fixtures/nvidia-smi-h200-2026-12-02/nvidia-smi-q.txt)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from roles_testlib import RECORDED_SMI_Q, REPO, ansible_playbook, recorded_nvidia_smi

MIG_OFF = "MIG Mode\n        Current                                        : Disabled"
RECORDED = RECORDED_SMI_Q.read_text()
JUDGE = "Judge every host before any host changes"


def _preflight(tmp_path: Path, smi_text: str, *extra: str):
    # the local inventory reads ../../validate/configs: a copy at the same depth, next to a link to it
    inv = tmp_path / "repo" / "inventory" / "local"
    shutil.copytree(REPO / "inventory" / "local", inv)
    (tmp_path / "repo" / "validate").symlink_to(REPO / "validate")
    smi = recorded_nvidia_smi(tmp_path, smi_text)
    return ansible_playbook(
        "-i", str(inv), "playbooks/preflight.yml", "-e", "sglang_gpu_host_prepare=true",
        "-e", "sglang_gpu_count=1", "-e", "sglang_server_tp_size=1",  # the recorded H200 has one GPU
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
