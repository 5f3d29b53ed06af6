"""Helpers shared by the tests of roles/, playbooks/ and inventory/ (run ansible-playbook, read YAML)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
ROLE_NAMES = ("gpu_host", "sglang_image", "flashinfer_cache", "sglang_server", "sglang_gate")
BIN = Path(sys.executable).parent
RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
    r"\s+failed=(?P<failed>\d+)",
    re.M,
)


@dataclass
class Run:
    """One ansible-playbook run: exit code, combined output and the parsed PLAY RECAP."""

    rc: int
    out: str
    recap: dict[str, dict[str, int]]

    def changed(self, host: str = "localhost") -> int:
        return self.recap[host]["changed"]


def ansible_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_ROLES_PATH=str(ROLES),
        ANSIBLE_LOCAL_TEMP=str(Path(os.environ.get("TMPDIR", "/tmp")) / "ansible-local-roles-tests"),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def ansible_playbook(*args: str, timeout: int = 600, env: dict[str, str] | None = None) -> Run:
    """Run .venv's ansible-playbook from the repository root (so ansible.cfg applies); ``env`` adds to
    its environment (e.g. ARA recording on)."""
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), *args],
        cwd=REPO,
        env={**ansible_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    out = proc.stdout + proc.stderr
    recap = {m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")} for m in RECAP.finditer(out)}
    return Run(proc.returncode, out, recap)


def deploy(inventory: Path, run_id: str, *more: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    """``ansible-playbook -i inventory deploy.yml`` as an operator runs it, with this run id."""
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), "deploy.yml", "-e", f"sglang_run_id={run_id}", *more],
        cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def remove_test_fleet(hosts: Iterable[str], prefix: str) -> None:
    """Remove the containers ``<prefix>-sglang-<host>`` and cache volumes ``<prefix>-fic-<host>-*``
    a test-engine fleet test made (testengine.local_fleet names them so)."""
    for name in hosts:
        subprocess.run(["docker", "rm", "-f", f"{prefix}-sglang-{name}"], capture_output=True, check=False)
        vols = subprocess.run(["docker", "volume", "ls", "-q", "--filter", f"name={prefix}-fic-{name}-"],
                              capture_output=True, text=True, check=False).stdout.split()  # fmt: skip
        if vols:
            subprocess.run(["docker", "volume", "rm", "-f", *vols], capture_output=True, check=False)


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def docker_ok() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


def docker_json(*args: str) -> Any:
    """``docker inspect``-style JSON, or None when the object does not exist."""
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return None
    data = json.loads(proc.stdout)
    return data[0] if isinstance(data, list) and data else data


def run_role_tasks(tmp_path: Path, role: str, tasks_from: str, extra_vars: dict[str, Any], *args: str) -> Any:
    """Run ``role``'s ``tasks_from`` file against localhost (local connection) with ``extra_vars``."""
    play = tmp_path / f"{role}-{tasks_from}.yml"
    play.write_text(
        "---\n"
        f"- name: {role} {tasks_from} only\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        f"    - name: {tasks_from}\n      ansible.builtin.include_role:\n        name: {role}\n"
        f"        tasks_from: {tasks_from}\n"
    )
    var_file = tmp_path / f"{role}-{tasks_from}-vars.json"
    var_file.write_text(json.dumps(extra_vars))
    return ansible_playbook("-i", "localhost,", "-c", "local", str(play), "-e", f"@{var_file}", *args)


RECORDED_SMI_Q = REPO / "tests/fixtures/nvidia-smi-h200-2026-12-02/nvidia-smi-q.txt"
RECORDED_SMI_QUERY = REPO / "tests/fixtures/nvidia-smi-h200-2026-12-03/nvidia-smi-query-health.csv"


def recorded_nvidia_smi(
    tmp_path: Path, q_text: str | None = None, gpus: int = 1, total_mib: int | None = None,
    compute_cap: str | None = None, name: str | None = None,
) -> Path:  # fmt: skip
    """An nvidia-smi that answers `-q` with the recorded H200's output (or ``q_text``, an edit of it)
    and `--query-gpu=...` with the recorded H200's query (the fields preflight and gpu_health ask),
    and fails on anything else: what preflight asks every GPU host, on a machine without GPUs.

    ``gpus`` > 1 repeats the recorded GPU's section and row with other bus IDs, ``total_mib`` edits
    each GPU's memory, ``compute_cap`` and ``name`` each row's: the shape of an 8-GPU host of a
    profile's size and arch (inventory/example's profiles need 8 GPUs of at least 90 / 170 GiB, sm_120
    / sm_100; the recording is one 140 GiB sm_90 H200). Written in a folder of its own per arch."""
    text = RECORDED_SMI_Q.read_text() if q_text is None else q_text
    header, row = RECORDED_SMI_QUERY.read_text().strip().splitlines()
    if compute_cap is not None:
        row = row.replace(", 9.0, ", f", {compute_cap}, ")
    if name is not None:
        row = row.replace("NVIDIA H200", name)
        text = text.replace("NVIDIA H200", name)
    rows = [row.replace("0, ", f"{i}, ", 1).replace("00:06.0", f"00:{6 + i:02X}.0") for i in range(gpus)]
    if gpus > 1:
        head, _, gpu = text.partition("GPU 00000000:00:06.0\n")
        head = re.sub(r"(Attached GPUs\s*:\s*)1", rf"\g<1>{gpus}", head)
        text = head + "".join(f"GPU 00000000:00:{6 + i:02X}.0\n" + gpu for i in range(gpus))
    if total_mib is not None:
        text = re.sub(r"(FB Memory Usage\s*\n\s*Total\s*:\s*)\d+ MiB", rf"\g<1>{total_mib} MiB", text)
    folder = tmp_path / f"nvidia-smi-sm{(compute_cap or '9.0').replace('.', '')}"
    folder.mkdir(exist_ok=True)
    (folder / "nvidia-smi-q.txt").write_text(text)
    (folder / "nvidia-smi-query.csv").write_text("\n".join([header, *rows]) + "\n")
    smi = folder / "nvidia-smi"
    smi.write_text(
        f'#!/bin/sh\ncase "$1" in\n  -q) exec cat {folder}/nvidia-smi-q.txt ;;\n'
        f"  --query-gpu=*) exec cat {folder}/nvidia-smi-query.csv ;;\nesac\n"
        'echo "no recording for: $*" >&2\nexit 9\n'
    )
    smi.chmod(0o755)
    return smi


def clean_kernel_log(tmp_path: Path, lines: str = "[    0.000000] Linux version 6.1.0 (Debian)\n") -> list[str]:
    """``gpu_host_kernel_log_command`` printing ``lines`` (no Xid unless given): the machine's own
    dmesg may be unreadable (kernel.dmesg_restrict) or say anything."""
    log = tmp_path / "kern.log"
    log.write_text(lines)
    return ["cat", str(log)]


def example_gpu_hosts(tmp_path: Path) -> list[str]:
    """``-e`` arguments that make this machine answer preflight as inventory/example's GPU hosts:
    each profile's nvidia-smi (8 GPUs of its arch and size: rtx_pro_6000 sm_120, b200 sm_100; the
    recorded H200's output otherwise), chosen per host by its sglang_gpu_arch, and a kernel log
    without Xid events."""
    folder = None
    for cap, name in (("12.0", "NVIDIA RTX PRO 6000 Blackwell Server Edition"), ("10.0", "NVIDIA B200")):
        folder = recorded_nvidia_smi(tmp_path, gpus=8, total_mib=184320, compute_cap=cap, name=name).parent.parent
    return ["-e", f"gpu_host_nvidia_smi={folder}/nvidia-smi-sm{{{{ sglang_gpu_arch }}}}/nvidia-smi",
            "-e", json.dumps({"gpu_host_kernel_log_command": clean_kernel_log(tmp_path)})]  # fmt: skip
