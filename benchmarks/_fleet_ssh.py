"""A fleet of N SSH hosts on this machine, for benchmarks/rollout.py: what the controller pays per host.

Every "host" is a loopback address (127.0.1.1, 127.0.1.2, ...) of ONE sshd: the molecule host image
(local/sglang-molecule-host: Debian 12, user ``deploy`` with passwordless sudo, the docker CLI on the
machine's daemon) run with the machine's network on port 2222, key-only. Ansible sees N distinct
hosts: one SSH connection, one fork, one set of facts and records each, which is what the controller
spends per host. The hosts' GPU work is not real: nvidia-smi answers with the recorded H200 output
(tests/fixtures/nvidia-smi-h200-2026-12-02), and the servers a real rollout stage starts are the
TEST ENGINE on this machine's 2 cores. Its numbers are this machine's, never a GPU fleet's.

Peak memory is the controller tree's proportional set size (PSS, /proc/<pid>/smaps_rollup),
sampled every 0.2 s: Ansible's forks share most of their pages with the parent, so summing their
RSS would count those pages once per fork.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import rolloutreport  # noqa: E402
from testengine import local_fleet  # noqa: E402

SSHD = "rollout-bench-sshd"
SSH_PORT = 2222
KEY = Path("/tmp/sglang-molecule-ssh/id_ed25519")
HOST_IMAGE = "local/sglang-molecule-host:latest"
RECORDED_SMI = ROOT / "tests/fixtures/nvidia-smi-h200-2026-12-02/nvidia-smi-q.txt"
RECORDED_QUERY = ROOT / "tests/fixtures/nvidia-smi-h200-2026-12-03/nvidia-smi-query-health.csv"
BASE_PORT = 32000  # the rollout stage's servers: BASE_PORT + host number


def address(i: int) -> str:
    """Host i's loopback address (1-based): 127.0.1.1 ... 127.0.1.254."""
    if not 1 <= i <= 254:
        raise ValueError(f"host number {i} is outside 1..254 (one /24 of loopback addresses)")
    return f"127.0.1.{i}"


def host_name(i: int) -> str:
    return f"bench-ssh-h{i:03d}"


def start_sshd(workdir: Path) -> None:
    """The one sshd every host address reaches (molecule's host image, the machine's network)."""
    subprocess.run(["bash", str(ROOT / "molecule/resources/build-instance.sh")], check=True, capture_output=True)
    smi = workdir / "nvidia-smi"
    shutil.copy(RECORDED_SMI, workdir / "nvidia-smi-q.txt")
    shutil.copy(RECORDED_QUERY, workdir / "nvidia-smi-query.csv")
    # a kernel log file: the container may not read dmesg
    (workdir / "kern.log").write_text("[    0.000000] Linux version 6.1.0 (Debian)\n")
    smi.write_text('#!/bin/sh\n[ "$1" = -q ] && exec cat /opt/bench/nvidia-smi-q.txt\n'
                   'case "$1" in --query-gpu=*) exec cat /opt/bench/nvidia-smi-query.csv ;; esac\nexit 9\n')
    smi.chmod(0o755)
    stop_sshd()
    sshd = f"ssh-keygen -A >/dev/null && exec /usr/sbin/sshd -D -e -p {SSH_PORT} -o MaxStartups=1000 -o MaxSessions=100"
    subprocess.run(
        ["docker", "run", "-d", "--name", SSHD, "--network", "host",
         "-v", "/var/run/docker.sock:/var/run/docker.sock",
         "-v", f"{KEY}.pub:/home/deploy/.ssh/authorized_keys:ro",
         "-v", f"{workdir}:/opt/bench:ro", "-v", f"{smi}:/usr/local/bin/nvidia-smi:ro",
         HOST_IMAGE, "/bin/sh", "-c", sshd],
        check=True, capture_output=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        probe = subprocess.run(
            ["ssh", "-p", str(SSH_PORT), "-i", str(KEY), "-o", "StrictHostKeyChecking=no",
             "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
             f"deploy@{address(1)}", "true"],
            capture_output=True, check=False,
        )  # fmt: skip
        if probe.returncode == 0:
            return
        time.sleep(0.5)
    raise RuntimeError(f"sshd in container {SSHD} did not answer on {address(1)}:{SSH_PORT} within 30 s")


def stop_sshd() -> None:
    subprocess.run(["docker", "rm", "-f", SSHD], capture_output=True, check=False)


def write_inventory(
    directory: Path, hosts: int, serial: list[int | str], gpu_checks: bool, distinct: bool = True
) -> Path:
    """N SSH hosts, production-shaped (become, key, sudo); ``gpu_checks``: preflight asks nvidia-smi
    (the recorded one-GPU H200, so the profile asks for 1 GPU of at least 100 GiB).

    ``distinct``: each host gets its own port, container, volume and state paths, as hosts that
    share one machine's docker must when servers really start (the rollout stage), and every host
    is then a settings set of its own (preflight's worst case). Without it the hosts differ only in
    their address, as a fleet's hosts of one GPU profile do (their settings in group_vars)."""
    per_host = {
        host_name(i): {"ansible_host": address(i)} | ({
            "sglang_server_port": BASE_PORT + i,
            "sglang_server_container_name": f"bench-sglang-{host_name(i)}",
            "flashinfer_cache_volume_prefix": f"bench-fic-{host_name(i)}",
            "sglang_server_state_dir": f"/tmp/rollout-bench/{host_name(i)}/state",
            "sglang_gate_secret_dir": f"/dev/shm/rollout-bench-{host_name(i)}",
        } if distinct else {})
        for i in range(1, hosts + 1)
    }  # fmt: skip
    return local_fleet.write_inventory(
        directory, per_host, serial,
        ansible_connection="ssh", ansible_port=SSH_PORT, ansible_user="deploy", ansible_become=True,
        ansible_ssh_private_key_file=str(KEY), ansible_python_interpreter="/usr/bin/python3",
        ansible_ssh_common_args="-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
        sglang_gpu_host_prepare=gpu_checks, sglang_gpu_count=1, sglang_gpu_min_memory_gib=100, sglang_server_tp_size=1,
        sglang_gpu_arch="90", gpu_host_kernel_log_command=["cat", "/opt/bench/kern.log"],
        sglang_reports_dir=str(directory / "reports"),
        sglang_gate_config=local_fleet.gate_config(baseline={"tolerance": 0.5}),
        sglang_gate_location="controller", sglang_gate_host="127.0.0.1", sglang_gate_baseline_group="sglang_servers",
    )  # fmt: skip


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _tree(root: int) -> list[int]:
    """root and every descendant (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


@dataclass
class StageRun:
    """One ansible-playbook run over N hosts: the controller's wall time, CPU and peak memory."""

    stage: str
    hosts: int
    forks: int
    rc: int
    wall_s: float
    cpu_s: float  # the ansible-playbook tree (forks, ssh clients): the controller's CPU
    peak_pss_mib: float
    host_stage_s: dict[str, float] = field(default_factory=dict)  # rollout stage: median per-host stage time
    tail: str = ""


def run_stage(stage: str, inventory: Path, args: list[str], forks: int, hosts: int) -> StageRun:
    """ansible-playbook with ``args`` on ``inventory``; samples the tree's PSS while it runs."""
    # a fresh SSH ControlPath dir per run: no run reuses the connections (ControlPersist) of the one before
    control = tempfile.mkdtemp(prefix="rollout-bench-cp-")
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_SSH_CONTROL_PATH_DIR": control}
    if forks:
        env["ANSIBLE_FORKS"] = str(forks)
    before = os.times()
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], sum(_pss_kib(p) for p in _tree(proc.pid)))
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    done.set()
    sampler.join()
    wall = time.monotonic() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    shutil.rmtree(control, ignore_errors=True)
    return StageRun(stage, hosts, forks, proc.returncode, round(wall, 1), round(cpu, 1), round(peak[0] / 1024, 1),
                    tail="" if proc.returncode == 0 else out[-4000:])  # fmt: skip


def host_stage_times(reports: Path) -> dict[str, float]:
    """Median seconds per rollout stage over the hosts of a real run (each record's stage marks)."""
    spans: dict[str, list[float]] = {}
    if not reports.is_dir():  # the run stopped before any host record (its tail says why)
        return {}
    for run_dir in sorted(p for p in reports.iterdir() if p.is_dir()):
        for record in rolloutreport.read_records(run_dir):
            for stage, seconds in rolloutreport.stage_durations(record).items():
                spans.setdefault(stage, []).append(seconds)
    return {stage: round(statistics.median(v), 1) for stage, v in spans.items()}


def remove(containers: list[str], volume_prefix: str) -> None:
    """Remove a benchmark's server containers and every volume whose name starts with the prefix."""
    subprocess.run(["docker", "rm", "-f", *containers], capture_output=True, check=False)
    vols = subprocess.run(["docker", "volume", "ls", "-q", "--filter", f"name={volume_prefix}"],
                          capture_output=True, text=True, check=False).stdout.split()  # fmt: skip
    if vols:
        subprocess.run(["docker", "volume", "rm", "-f", *vols], capture_output=True, check=False)


def cleanup(hosts: int) -> None:
    remove([f"bench-sglang-{host_name(i)}" for i in range(1, hosts + 1)], "bench-fic-bench-ssh-")


def measure(
    sizes: list[int], forks: int, rollout_hosts: int, check_max: int = 0, report: Any = None, repeat: int = 1
) -> list[StageRun]:
    """preflight for each size (``repeat`` times), check mode for each size up to ``check_max``
    (0: all), then one real rollout of ``rollout_hosts`` hosts; ``report`` gets each StageRun as it ends."""
    runs: list[StageRun] = []
    with tempfile.TemporaryDirectory(prefix="rollout-bench-ssh-") as tmp:
        work = Path(tmp)
        start_sshd(work)
        try:

            def done(run: StageRun) -> None:
                runs.append(run)
                if report:
                    report(run)

            for n in sizes:
                inv = write_inventory(work / f"preflight-{n}", n, [1, "25%"], gpu_checks=True, distinct=False)
                for _ in range(repeat):
                    done(run_stage("preflight", inv, ["playbooks/preflight.yml"], forks, n))
            # the worst case: every host a settings set of its own (the roles' checks run on each)
            inv = write_inventory(work / "preflight-distinct", max(sizes), [1, "25%"], gpu_checks=True)
            done(run_stage("preflight-distinct", inv, ["playbooks/preflight.yml"], forks, max(sizes)))
            for n in sizes:
                if check_max and n > check_max:
                    continue
                inv = write_inventory(work / f"check-{n}", n, [1, "25%"], gpu_checks=False, distinct=False)
                done(run_stage("check", inv, ["deploy.yml", "--check"], forks, n))
            if rollout_hosts:
                cleanup(rollout_hosts)
                inv = write_inventory(work / "rollout", rollout_hosts, [1, "100%"], gpu_checks=False)
                run = run_stage("rollout", inv, ["deploy.yml"], forks, rollout_hosts)
                run.host_stage_s = host_stage_times(inv / "reports")
                done(run)
                cleanup(rollout_hosts)
        finally:
            stop_sshd()
    return runs


def yaml_serial(text: str) -> list[int | str]:
    value: Any = yaml.safe_load(text)
    if not isinstance(value, list) or not value:
        raise SystemExit(f"--serial must be a YAML list like '[1, 5, \"25%\"]', got {text!r}")
    return value
