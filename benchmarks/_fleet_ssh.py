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

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import rolloutreport  # noqa: E402
from preflight import waves  # noqa: E402
from preflight.rules import parse_serial  # noqa: E402
from testengine import local_fleet, ssh_fleet  # noqa: E402

SSHD = "rollout-bench-sshd"
SSH_PORT = 2222
RECORDED_SMI = ROOT / "tests/fixtures/nvidia-smi-h200-2026-12-02/nvidia-smi-q.txt"
RECORDED_QUERY = ROOT / "tests/fixtures/nvidia-smi-h200-2026-12-03/nvidia-smi-query-health.csv"
BASE_PORT = 32000  # the rollout stage's servers: BASE_PORT + host number
# bind-mounted at the same path into the sshd container: the gate containers (siblings on the
# machine's daemon) mount the gate's folder and key folder from there (sglang_gate_location: host)
BENCH_DIR = Path("/tmp/rollout-bench")
SHM_DIR = Path("/dev/shm/rollout-bench")
# The TEST ENGINE image with its container health check every 30 s, as the production image has it
# (images/sglang/Dockerfile), not every 5 s (images/test-engine/Dockerfile, for fast tests): 50
# servers probed every 5 s start 10 health-check processes a second on the hosts' (this machine's) cores.
BENCH_IMAGE = "local/sglang-test-engine:bench-health30s"
# A light gate for many TEST ENGINE servers on 2 cores (every phase runs, with fewer requests; the
# floors are lowered because 50 servers and their gates share the cores): the gate's own cost is on
# the hosts, not the controller, so only the length of its wait (Ansible's polls) depends on it.
LIGHT_GATE = {
    "throughput": {"num_prompts": 16, "repeats": 1, "warmup_requests": 1, "min_total_tok_s": 1, "min_output_tok_s": 1,
                   "max_p99_ttft_ms": 60000, "max_p99_e2e_ms": 120000, "timeout_s": 120},
    "single_stream": {"max_tokens": 16, "min_decode_tok_s": 1, "max_ttft_ms": 60000, "timeout_s": 60},
    "stability": {"concurrency": [8], "step_timeout_s": 120, "health_timeout_s": 30},
    "baseline": {"tolerance": 0.2, "confirm": False},  # 50 gates on 2 cores: 80 % below the canary passes
    "readiness": {"timeout_s": 300},
    "deadline_s": 900,
}  # fmt: skip


def host_name(i: int) -> str:
    return f"bench-ssh-h{i:03d}"


def start_sshd(workdir: Path) -> None:
    """The one sshd every host address reaches (testengine.ssh_fleet), with the recorded nvidia-smi."""
    smi = workdir / "nvidia-smi"
    shutil.copy(RECORDED_SMI, workdir / "nvidia-smi-q.txt")
    shutil.copy(RECORDED_QUERY, workdir / "nvidia-smi-query.csv")
    # a kernel log file: the container may not read dmesg
    (workdir / "kern.log").write_text("[    0.000000] Linux version 6.1.0 (Debian)\n")
    smi.write_text('#!/bin/sh\n[ "$1" = -q ] && exec cat /opt/bench/nvidia-smi-q.txt\n'
                   'case "$1" in --query-gpu=*) exec cat /opt/bench/nvidia-smi-query.csv ;; esac\nexit 9\n')
    smi.chmod(0o755)
    ssh_fleet.start_sshd(SSHD, SSH_PORT, shared=[BENCH_DIR, SHM_DIR],
                         mounts={workdir: "/opt/bench", smi: "/usr/local/bin/nvidia-smi"})  # fmt: skip


def stop_sshd() -> None:
    ssh_fleet.stop_sshd(SSHD)


def write_inventory(
    directory: Path,
    hosts: int,
    serial: list[int | str],
    gpu_checks: bool,
    distinct: bool = True,
    gate_on_host: bool = False,
) -> Path:
    """N SSH hosts, production-shaped (become, key, sudo); ``gpu_checks``: preflight asks nvidia-smi
    (the recorded one-GPU H200, so the profile asks for 1 GPU of at least 100 GiB).

    ``distinct``: each host gets its own port, container, volume and state paths, as hosts that
    share one machine's docker must when servers really start (the rollout stage), and every host
    is then a settings set of its own (preflight's worst case). Without it the hosts differ only in
    their address, as a fleet's hosts of one GPU profile do (their settings in group_vars).

    ``gate_on_host``: the production default, each gate in a container next to its server (the
    folders it mounts are bind mounts of the machine's), with LIGHT_GATE; otherwise on the controller."""
    per_host = {
        host_name(i): {"ansible_host": ssh_fleet.address(i)} | ({
            "sglang_server_port": BASE_PORT + i,
            "sglang_server_container_name": f"bench-sglang-{host_name(i)}",
            "flashinfer_cache_volume_prefix": f"bench-fic-{host_name(i)}",
            "sglang_server_state_dir": f"{BENCH_DIR}/{host_name(i)}/state",
            "sglang_gate_secret_dir": f"{SHM_DIR}/{host_name(i)}" if gate_on_host
                                      else f"/dev/shm/rollout-bench-{host_name(i)}",
            "sglang_gate_host_dir": f"{BENCH_DIR}/{host_name(i)}/gate",
            "sglang_metrics_textfile_dir": f"{BENCH_DIR}/{host_name(i)}/textfile",
        } if distinct else {})
        for i in range(1, hosts + 1)
    }  # fmt: skip
    # the connection of every host (the sshd's port, the user, become, the key) is the group's
    connection = {k: v for k, v in ssh_fleet.host_vars(1, SSH_PORT).items() if k != "ansible_host"}
    return local_fleet.write_inventory(
        directory, per_host, serial, **connection,
        sglang_gpu_host_prepare=gpu_checks, sglang_gpu_count=1, sglang_gpu_min_memory_gib=100, sglang_server_tp_size=1,
        sglang_gpu_arch="90", gpu_host_kernel_log_command=["cat", "/opt/bench/kern.log"],
        sglang_server_ready_timeout_s=600,  # many servers start at once on 2 cores
        sglang_reports_dir=str(directory / "reports"),
        sglang_gate_config=_gate_config(gate_on_host),
        sglang_gate_location="host" if gate_on_host else "controller", sglang_gate_host="127.0.0.1",
        sglang_gate_baseline_group="sglang_servers",
        # the role's default poll (inventory/local polls every 3 s for its short gates)
        **({"sglang_gate_poll_s": 10} if gate_on_host else {}),
    )  # fmt: skip


def _gate_config(light: bool) -> dict[str, Any]:
    if not light:
        return local_fleet.gate_config(baseline={"tolerance": 0.5})
    return local_fleet.overlay_sections(local_fleet.gate_config(), LIGHT_GATE)


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
    samples: list[tuple[float, float, int]] = field(default_factory=list, repr=False)  # (time, CPU s, PSS KiB)
    cgroup: bool = False  # measured in a cgroup of its own (every controller process counted)
    stages: dict[str, Any] = field(default_factory=dict)  # rollout cost: stage -> StageCost
    batches: list[dict[str, float]] = field(default_factory=list)  # rollout cost: each batch's hosts and wall
    problems: list[str] = field(default_factory=list)  # what the rollout failed to do or record
    interrupted: bool = False  # stopped at the benchmark's deadline: the figures cover the hosts done by then
    hosts_done: int = 0  # hosts whose record reached "done"


class ControllerMeter:
    """The controller's CPU seconds and memory while one ansible-playbook runs, sampled over time.

    Where the machine lets us (root, a writable cgroup v1 ``cpuacct`` hierarchy), ansible-playbook
    starts in a cgroup of its own: every process it forks (workers, ssh clients, the ControlPersist
    masters that detach from the tree, async wrappers of controller-side tasks) stays in it, so
    ``cpuacct.usage`` is the whole controller's CPU and the memory is the PSS of the cgroup's
    processes. Elsewhere the CPU is ``os.times()``'s reaped children (detached ssh masters escape
    it) and the memory the PSS of ansible-playbook's process tree."""

    ROOT_CG = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self, name: str) -> None:
        self.cgroup: Path | None = self.ROOT_CG / f"rollout-bench-{name}-{os.getpid()}"
        try:
            self.cgroup.mkdir()
        except OSError:
            self.cgroup = None
        self.samples: list[tuple[float, float, int]] = []  # (time.time(), CPU s since start, PSS KiB)
        self._before = os.times()
        self._start_ns = self._usage_ns()

    def join(self) -> None:
        """preexec_fn of the measured process: move it into the cgroup before it execs."""
        if self.cgroup is not None:
            (self.cgroup / "cgroup.procs").write_text(str(os.getpid()))

    def _usage_ns(self) -> int:
        return int((self.cgroup / "cpuacct.usage").read_text()) if self.cgroup is not None else 0

    def pids(self, root: int) -> list[int]:
        if self.cgroup is not None:
            return [int(p) for p in (self.cgroup / "cgroup.procs").read_text().split()]
        return _tree(root)

    def cpu_s(self) -> float:
        """CPU seconds since the meter started (cgroup: live; fallback: only reaped children)."""
        if self.cgroup is not None:
            return (self._usage_ns() - self._start_ns) / 1e9
        now = os.times()
        return (now.children_user - self._before.children_user) + (now.children_system - self._before.children_system)

    def sample(self, root: int) -> None:
        self.samples.append((time.time(), self.cpu_s(), sum(_pss_kib(p) for p in self.pids(root))))

    def close(self) -> None:
        """Stop what is left in the cgroup (ControlPersist masters) and remove it."""
        if self.cgroup is None:
            return
        for pid in self.pids(0):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            try:
                self.cgroup.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def run_stage(
    stage: str,
    inventory: Path,
    args: list[str],
    forks: int,
    hosts: int,
    env: dict[str, str] | None = None,
    deadline_s: float = 0.0,
) -> StageRun:
    """ansible-playbook with ``args`` on ``inventory``, measured by a ControllerMeter (sampled every
    0.2 s: the samples stay on the StageRun for a per-stage split). ``env`` adds to the environment
    (a configuration under test, e.g. another strategy). ``deadline_s`` (0: none): stop ansible-playbook
    then (SIGTERM; rc 124, ``interrupted``), keeping what was measured until then."""
    # a fresh SSH ControlPath dir per run: no run reuses the connections (ControlPersist) of the one before
    control = tempfile.mkdtemp(prefix="rollout-bench-cp-")
    # host keys: the inventory's ssh args skip them for the ssh plugin; mitogen reads only this setting
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_SSH_CONTROL_PATH_DIR": control,
           "ANSIBLE_HOST_KEY_CHECKING": "False", **(env or {})}  # fmt: skip
    if forks:
        env["ANSIBLE_FORKS"] = str(forks)
    meter = ControllerMeter(stage)
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=meter.join,
    )  # fmt: skip
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            meter.sample(proc.pid)
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    interrupted = False
    try:
        out, _ = proc.communicate(timeout=deadline_s or None)
    except subprocess.TimeoutExpired:
        interrupted = True
        proc.terminate()
        out, _ = proc.communicate()
    done.set()
    sampler.join()
    wall = time.monotonic() - started
    meter.sample(proc.pid)
    cpu = meter.cpu_s()
    meter.close()
    shutil.rmtree(control, ignore_errors=True)
    peak = max(s[2] for s in meter.samples)
    return StageRun(stage, hosts, forks, 124 if interrupted else proc.returncode, round(wall, 1), round(cpu, 1),
                    round(peak / 1024, 1), tail="" if proc.returncode == 0 else out[-4000:], samples=meter.samples,
                    cgroup=meter.cgroup is not None, interrupted=interrupted)  # fmt: skip


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


STAGES = ("gpu_host", "image", "cache", "server", "gate")
BEFORE, BETWEEN = "preflight", "records, summary, locks"


@dataclass
class StageCost:
    """One stage of a rollout on the controller: how long it ran, what CPU and memory it took."""

    stage: str
    wall_s: float = 0.0  # seconds the stage had hosts in it (shared with stages running beside it)
    cpu_s: float = 0.0  # controller CPU seconds in that time (split like the wall time)
    peak_pss_kib: int = 0


def stage_windows(reports: Path, end: float = 0.0) -> list[tuple[str, float, float]]:
    """(stage, start, end) of every host's stage in a run, from its record's marks ("done" ends the
    last); ``end`` (a run stopped at a deadline): a stage still open then ends there."""
    out: list[tuple[str, float, float]] = []
    if not reports.is_dir():
        return out
    for run_dir in sorted(p for p in reports.iterdir() if p.is_dir()):
        for record in rolloutreport.read_records(run_dir):
            marks = record.get("stages") or []
            out.extend((a["stage"], float(a["at"]), float(b["at"])) for a, b in itertools.pairwise(marks))
            if end and marks and marks[-1]["stage"] != "done":
                out.append((marks[-1]["stage"], float(marks[-1]["at"]), end))
    return out


def stage_hosts(reports: Path) -> dict[str, int]:
    """How many hosts entered each stage (their records' marks; "done": finished)."""
    counts: dict[str, int] = {}
    for run_dir in (p for p in reports.iterdir() if p.is_dir()) if reports.is_dir() else []:
        for record in rolloutreport.read_records(run_dir):
            for stage in {m["stage"] for m in record.get("stages") or []}:
                counts[stage] = counts.get(stage, 0) + 1
    return counts


def split_by_stage(
    samples: list[tuple[float, float, int]], windows: list[tuple[str, float, float]]
) -> dict[str, StageCost]:
    """The controller's samples (time, CPU s so far, PSS KiB) split over the hosts' stages: each
    interval goes to the stages the hosts are in at its midpoint, in proportion to how many hosts are
    in each; an interval with no host in a stage is preflight (before the first mark) or the
    rollout's own bookkeeping between stages (host records, the summary after each batch, locks)."""
    first = min((w[1] for w in windows), default=float("inf"))
    costs: dict[str, StageCost] = {}
    for (t0, c0, _), (t1, c1, m1) in itertools.pairwise(samples):
        mid = (t0 + t1) / 2
        active = [stage for stage, start, end in windows if start <= mid < end]
        shares = {s: active.count(s) / len(active) for s in dict.fromkeys(active)} or {
            (BEFORE if mid < first else BETWEEN): 1.0
        }
        for stage, share in shares.items():
            cost = costs.setdefault(stage, StageCost(stage))
            cost.wall_s += (t1 - t0) * share
            cost.cpu_s += (c1 - c0) * share
            cost.peak_pss_kib = max(cost.peak_pss_kib, m1)
    order = [BEFORE, *STAGES, BETWEEN]
    return {k: costs[k] for k in sorted(costs, key=lambda k: order.index(k) if k in order else len(order))}


def remove(containers: list[str], volume_prefix: str) -> None:
    """Remove a benchmark's server containers and every volume whose name starts with the prefix."""
    subprocess.run(["docker", "rm", "-f", *containers], capture_output=True, check=False)
    vols = subprocess.run(["docker", "volume", "ls", "-q", "--filter", f"name={volume_prefix}"],
                          capture_output=True, text=True, check=False).stdout.split()  # fmt: skip
    if vols:
        subprocess.run(["docker", "volume", "rm", "-f", *vols], capture_output=True, check=False)


def cleanup(hosts: int) -> None:
    remove(
        [f"bench-sglang-{host_name(i)}" for i in range(1, hosts + 1)]
        + [f"sglang-gate-bench-sglang-{host_name(i)}" for i in range(1, hosts + 1)],
        "bench-fic-bench-ssh-",
    )
    for shared in (BENCH_DIR, SHM_DIR):  # state, gate and key folders the hosts' root wrote (the
        for path in shared.glob("*"):  # folders themselves stay: the sshd container mounts them)
            shutil.rmtree(path, ignore_errors=True)


def rollout_problems(reports: Path, hosts: int) -> list[str]:
    """What a real rollout of ``hosts`` fresh hosts must have done and recorded, checked after it:
    every host moved with a passing gate, its record finished at "done" with each stage marked, its
    gate report on the controller, and the summary and fleet state saying so."""
    problems: list[str] = []
    runs = [p for p in reports.iterdir() if p.is_dir() and (p / "hosts").is_dir()] if reports.is_dir() else []
    if len(runs) != 1:
        return [f"expected one run folder under {reports}, found {len(runs)}"]
    run = runs[0]
    summary_file = run / "rollout-summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    if len(summary.get("moved", [])) != hosts or not summary.get("finished"):
        moved = len(summary.get("moved", []))
        problems.append(f"summary: {moved} of {hosts} moved, finished={summary.get('finished')}")
    for record in rolloutreport.read_records(run):
        host, marks = record["host"], [m["stage"] for m in record.get("stages") or []]
        if record.get("outcome") != "ok" or record.get("gate") != "pass":
            problems.append(f"{host}: outcome {record.get('outcome')}, gate {record.get('gate')}")
        if marks[-1:] != ["done"] or not set(STAGES) - {"gpu_host"} <= set(marks):
            problems.append(f"{host}: stage marks {marks}")
        if not (reports / host / run.name / "report.json").is_file():
            problems.append(f"{host}: no gate report on the controller")
    for i in range(1, hosts + 1):  # each host's gate wrote its Prometheus textfile
        prom = BENCH_DIR / host_name(i) / "textfile" / f"sglang_gate_bench-sglang-{host_name(i)}.prom"
        if not prom.is_file() or not re.search(r"^sglang_gate_passed\{.*\} 1\.0$", prom.read_text(), re.M):
            problems.append(f"{host_name(i)}: no passing gate in {prom}")
    fleet = reports / "metrics" / "sglang_rollout.prom"
    if not fleet.is_file() or f'sglang_rollout_last_run_hosts{{result="moved"}} {hosts:.1f}' not in fleet.read_text():
        problems.append(f"{fleet}: does not say {hosts} hosts moved")
    state = rolloutreport.read_state(rolloutreport.state_path(run))
    if sorted(state["hosts"]) != sorted(host_name(i) for i in range(1, hosts + 1)):
        problems.append(f"fleet state names {len(state['hosts'])} hosts, not {hosts}")
    return problems


def batch_sizes(serial: list[int | str], hosts: int) -> list[int]:
    """The rollout's batches over a fleet of one GPU profile with no per-profile cap (local_fleet's):
    its canary alone, then the waves preflight plans of the other hosts (preflight/waves.py: the
    serial sizes, percentages of all hosts rounded down as Ansible's, at least 1, the last repeating)."""
    if hosts <= 0:
        return []
    rest = [(str(i), "") for i in range(1, hosts)]
    return [1] + [len(w) for w in waves.plan_waves(rest, parse_serial(serial), {"": hosts}, hosts)]


def batch_walls(reports: Path, serial: list[int | str], hosts: int) -> list[dict[str, float]]:
    """Each serial batch's hosts (inventory order, Ansible's batches; the first is the canary) and its
    wall time: from its first host's first stage mark to its last host's "done"."""
    marks: dict[str, list[float]] = {}
    for run_dir in (p for p in reports.iterdir() if p.is_dir()) if reports.is_dir() else []:
        for record in rolloutreport.read_records(run_dir):
            marks[record["host"]] = [float(m["at"]) for m in record.get("stages") or []]
    out, first = [], 1
    for size in batch_sizes(serial, hosts):
        names = [host_name(i) for i in range(first, first + size)]
        first += size
        if all(marks.get(n) for n in names):
            start, end = min(marks[n][0] for n in names), max(marks[n][-1] for n in names)
            out.append({"hosts": size, "wall_s": round(end - start, 1)})
    return out


def task_counts(path: Path) -> dict[str, int]:
    """Task executions (every result: ok, changed, skipped, failed, a retry of an until loop) per stage."""
    counts: dict[str, int] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            stage = json.loads(line)["stage"]
            counts[stage] = counts.get(stage, 0) + 1
    return counts


def build_bench_image() -> str:
    """BENCH_IMAGE: local_fleet.IMAGE with the production image's health-check interval (one layer of
    metadata, built in a second); its labels (versions, validate) are the test engine's."""
    dockerfile = (
        f"FROM {local_fleet.IMAGE}\n"
        'HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 CMD ["python3", '
        '"/opt/sglang-deploy/healthcheck.py"]\n'
    )
    subprocess.run(["docker", "build", "-q", "-t", BENCH_IMAGE, "-"], input=dockerfile, text=True, check=True,
                   capture_output=True)  # fmt: skip
    return BENCH_IMAGE


def rollout_cost(
    work: Path,
    name: str,
    hosts: int,
    serial: list[int | str],
    env: dict[str, str],
    inventory_hosts: dict[str, dict[str, Any]] | None = None,
    deadline_s: float = 0.0,
) -> StageRun:
    """One real rollout (deploy.yml: preflight, canary, waves, summary) of ``hosts`` fresh SSH hosts,
    gates on the hosts (LIGHT_GATE), measured on the controller and split by stage, with the task
    executions per host of each stage (benchmarks/callback/bench_tasks.py).
    ``inventory_hosts``: hosts added outside the rollout's groups (a variant's own needs);
    ``deadline_s``: stop it then and report what was measured (run_stage)."""
    cleanup(hosts)
    inv = write_inventory(work / name, hosts, serial, gpu_checks=False, gate_on_host=True)
    group = inv / "group_vars/all/main.yml"
    group.write_text(yaml.safe_dump({**yaml.safe_load(group.read_text()), "sglang_image": build_bench_image()}))
    if inventory_hosts:
        data = yaml.safe_load((inv / "hosts.yml").read_text())
        data["all"]["hosts"] = inventory_hosts
        (inv / "hosts.yml").write_text(yaml.safe_dump(data))
    tasks = work / f"{name}-tasks.jsonl"
    enabled = ",".join(filter(None, ["bench_tasks", env.get("ANSIBLE_CALLBACKS_ENABLED", "")]))
    counting = {
        "ANSIBLE_CALLBACK_PLUGINS": f"{ROOT / 'plugins/callback'}:{ROOT / 'benchmarks/callback'}",
        "ANSIBLE_CALLBACKS_ENABLED": enabled, "ROLLOUT_BENCH_TASKS": str(tasks),
    }  # fmt: skip
    run = run_stage(name, inv, ["deploy.yml"], 0, hosts, env={**env, **counting}, deadline_s=deadline_s)
    reports = inv / "reports"
    run.host_stage_s = host_stage_times(reports)
    end = run.samples[-1][0] if run.interrupted and run.samples else 0.0
    run.stages = {k: asdict(v) for k, v in split_by_stage(run.samples, stage_windows(reports, end)).items()}
    entered = stage_hosts(reports)
    for stage, cost in run.stages.items():  # per host of the stage: a stopped run's later stages had fewer
        cost["hosts"] = entered.get(stage, hosts)
    run.hosts_done = entered.get("done", 0)
    run.batches = batch_walls(reports, serial, hosts)
    per_stage = task_counts(tasks)
    for stage, cost in run.stages.items():
        cost["tasks_per_host"] = round(per_stage.get(stage, 0) / cost["hosts"], 1)
    run.problems = (
        rollout_problems(reports, hosts) if run.rc == 0
        else [f"stopped at the benchmark's deadline ({deadline_s:.0f} s): {run.hosts_done} of {hosts} hosts done"]
        if run.interrupted else [f"ansible-playbook exited {run.rc}"]
    )  # fmt: skip
    cleanup(hosts)
    shutil.rmtree(work / name, ignore_errors=True)
    return run


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
