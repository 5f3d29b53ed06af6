"""Preflight over SSH: what would stop a run mid-fleet (Xid events since the host's last good deploy,
GPUs of another arch than the profile, a docker without the NVIDIA runtime that the role will not
add) is found on every host in one run, before any host changes, each refusal naming its host and
the fix, and a healthy host beside them is not refused.

Real `ansible-playbook playbooks/preflight.yml` over four SSH test hosts (testengine.ssh_fleet:
loopback addresses of one sshd container of the molecule host image, `become` through sudo, the
project's ansible.cfg). Each host answers nvidia-smi from the recorded H200 (one GPU, sm_90;
tests/fixtures/nvidia-smi-h200-*), reads its own kernel log file, and asks this machine's docker
(no nvidia runtime). tests/roles/test_preflight_hosts.py checks each rule alone on the local
connection; this file checks they reach hosts over SSH and are told apart per host.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from roles_testlib import ansible_playbook, clean_kernel_log, docker_ok, recorded_nvidia_smi

from testengine import ssh_fleet
from testengine.harness import free_port
from testengine.local_fleet import write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.skipif(not docker_ok(), reason="needs a running Docker engine")]

XID = "NVRM: Xid (PCI:0000:00:06): 79, pid=2394, name=python3, GPU has fallen off the bus."


def test_each_hosts_fault_is_refused_over_ssh_naming_the_host_and_nothing_changes(tmp_path: Path) -> None:
    smi = recorded_nvidia_smi(tmp_path)
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    xid_log = tmp_path / "xid"
    xid_log.mkdir()
    faults = {
        "p-ok": {},
        # an Xid 100 s ago; the host's last good deploy 200 s ago
        "p-xid": {"gpu_host_kernel_log_command": clean_kernel_log(xid_log, f"[{uptime - 100:12.6f}] {XID}\n")},
        "p-arch": {"sglang_gpu_arch": "120"},  # the profile says RTX PRO 6000 (sm_120); the GPU is an H200
        "p-runtime": {"gpu_host_manage_daemon_config": False},  # no nvidia runtime, and the role may not add it
    }
    port, hosts = free_port(), {}
    for i, (name, fault) in enumerate(faults.items(), start=1):
        state = tmp_path / "state" / name
        state.mkdir(parents=True)
        hosts[name] = {**ssh_fleet.host_vars(i, port), "sglang_server_state_dir": str(state),
                       "sglang_server_container_name": f"pre-sglang-{name}", **fault}  # fmt: skip
    record = tmp_path / "state" / "p-xid" / "pre-sglang-p-xid.last-good.json"
    record.write_text("{}")
    os.utime(record, (time.time() - 200, time.time() - 200))
    inv = write_inventory(
        tmp_path / "inventory", hosts, [1], sglang_reports_dir=str(tmp_path / "reports"),
        sglang_gpu_host_prepare=True, sglang_gpu_count=1, sglang_server_tp_size=1, sglang_gpu_arch="90",
        gpu_host_nvidia_smi=str(smi), gpu_host_kernel_log_command=clean_kernel_log(tmp_path),
    )  # fmt: skip
    with ssh_fleet.loopback_sshd("preflight-sshd", port, shared=[tmp_path]):
        run = ansible_playbook("-i", str(inv), "playbooks/preflight.yml")
    said = " ".join(run.out.split())
    assert run.rc != 0, said[-4000:]
    assert run.recap["p-ok"]["unreachable"] == 0 and "TASK [Judge every host before any host changes]" in run.out
    assert (
        f"p-xid: 1 Xid event(s): GPU0: Xid 79 (GPU has fallen off the bus) in the kernel log since the last good "
        f"deploy: [{uptime - 100:12.6f}] {XID}. Have the GPU checked"
    ) in said, said[-4000:]
    assert (
        "p-arch: its GPUs are sm_90 (NVIDIA H200), the profile expects sm_120 (sglang_gpu_arch): put the host in "
        "its GPU profile's group, or correct sglang_gpu_arch."
    ) in said, said[-4000:]
    assert "p-runtime: docker has no nvidia runtime (" in said and (
        "gpu_host_manage_daemon_config is false: run 'nvidia-ctk runtime configure --runtime=docker' on the host "
        "and reload docker, or set gpu_host_manage_daemon_config: true."
    ) in said, said[-4000:]
    # the healthy host refused for nothing, each fault on its own host only
    assert "Preflight refused 3 of 4 hosts: nothing was changed on any host." in said, said[-4000:]
    refused = re.findall(r"(p-[a-z]+): (1 Xid|its GPUs are|docker has no)", said.split("refused:", 1)[0])
    expected = [("p-arch", "its GPUs are"), ("p-runtime", "docker has no"), ("p-xid", "1 Xid")]
    assert sorted(set(refused)) == expected, refused
    assert {h: r["changed"] for h, r in run.recap.items() if h.startswith("p-")} == dict.fromkeys(faults, 0)
