"""How a fleet rollout's wall time grows with host count, on the test engine.

Rolls `deploy.yml` over 1, 3 and 6 hosts that all live on this machine (local connection;
each host its own container name, port and cache volume on the one Docker engine) and
prints wall time against host count and against the number of serial batches. With the
default batching (`[1, "50%"]`: one canary, then half of the fleet at a time) the claim is
that time follows batches, not hosts: hosts in one batch deploy and gate in parallel.

Figures are the TEST ENGINE's and this machine's (2 cores shared by every host), not a GPU
fleet's. Run after `bash scripts/setup.sh`:

    .venv/bin/python benchmarks/rollout.py [--hosts 1 3 6] [--serial '[1, "50%"]']

``--compare-locations`` rolls one wave of 3 and one of 6 hosts with the gates on the controller
and with the gates on the hosts (sglang_gate_location), and prints, per wave, the CPU seconds the
gates cost the controller (each report's ``gate_process.cpu_s``, counted where the gate ran), the
whole ansible-playbook tree's CPU, and the spread of the gates' throughput across the wave next to
one host's run-to-run spread. Here every "host" is this machine, so host-side work (modules and
the host gates' containers) shares its cores: what it shows is where the gates' CPU goes, not a
GPU fleet's figures.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testengine import local_fleet
from validate.metrics import Spread

ROOT = Path(__file__).resolve().parents[1]
BASE_PORT = 31500


@dataclass
class RolloutRun:
    hosts: int
    batches: int
    wall_s: float
    rc: int


def batch_sizes(serial: list[int | str], hosts: int) -> list[int]:
    """Ansible's serial semantics: each entry a size or a percentage of all hosts (at least
    1), the last entry repeating until every host is placed."""
    sizes: list[int] = []
    left, i = hosts, 0
    while left > 0:
        entry = serial[min(i, len(serial) - 1)]
        if isinstance(entry, str) and entry.endswith("%"):
            size = max(1, math.floor(hosts * float(entry[:-1]) / 100))
        else:
            size = int(entry)
        size = min(size, left)
        sizes.append(size)
        left -= size
        i += 1
    return sizes


def write_inventory(directory: Path, hosts: int, serial: list[int | str], gate_location: str = "controller") -> Path:
    names = [f"bench-h{i:02d}" for i in range(1, hosts + 1)]
    inventory = {
        "all": {
            "children": {
                "sglang_servers": {
                    "hosts": {
                        name: {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "sglang_server_port": BASE_PORT + i,
                            "sglang_server_container_name": f"bench-sglang-{name}",
                            "flashinfer_cache_volume_prefix": f"bench-fic-{name}",
                            "sglang_server_state_dir": str(directory / "state" / name),
                            "sglang_gate_location": gate_location,
                            "sglang_gate_secret_dir": f"/dev/shm/rollout-bench-{name}",
                        }
                        for i, name in enumerate(names)
                    }
                }
            }
        }
    }
    # hosts of one batch share this machine's cores: no regression check between them
    return local_fleet.write_inventory(
        directory,
        inventory["all"]["children"]["sglang_servers"]["hosts"],
        serial,
        sglang_reports_dir=str(directory / "reports"),
        sglang_gate_config=local_fleet.gate_config(baseline={"tolerance": 0.5}),
    )


def cleanup(hosts: int) -> None:
    for i in range(1, hosts + 1):
        name = f"bench-h{i:02d}"
        subprocess.run(["docker", "rm", "-f", f"bench-sglang-{name}"], capture_output=True, check=False)
        vols = subprocess.run(
            ["docker", "volume", "ls", "-q", "--filter", f"name=bench-fic-{name}-"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        if vols:
            subprocess.run(["docker", "volume", "rm", "-f", *vols], capture_output=True, check=False)


@dataclass
class WaveRun:
    """One wave of ``hosts`` hosts gated at ``location``: where the gates' CPU went."""

    location: str
    hosts: int
    rc: int
    wall_s: float
    ansible_tree_cpu_s: float  # ansible-playbook and every child: with local connection, host work too
    gate_cpu_on_controller_s: float
    gate_cpu_on_hosts_s: float
    wave_spread: float | None  # (max - min) / median of the hosts' median total throughput
    host_spread_median: float | None  # median over hosts of each gate's own run-to-run spread


def wave(hosts: int, location: str) -> WaveRun:
    """All ``hosts`` in one batch (serial = hosts): the wave whose gates run at the same time."""
    import resource

    cleanup(hosts)
    with tempfile.TemporaryDirectory(prefix="rollout-bench-") as tmp:
        inventory = write_inventory(Path(tmp), hosts, [hosts], location)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), "deploy.yml"],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n", file=sys.stderr)
        reports = [json.loads(p.read_text()) for p in sorted(Path(tmp, "reports").glob("*/*/report.json"))]
    cleanup(hosts)
    cpu = [r.get("gate_process", {}).get("cpu_s", 0.0) for r in reports]
    throughput = [r["phases"]["throughput"]["total_throughput"] for r in reports if r["phases"].get("throughput")]
    own = [
        r["phases"]["throughput"]["spread"]["total_token_throughput"]["spread"]
        for r in reports
        if (r["phases"].get("throughput") or {}).get("spread")
    ]
    return WaveRun(
        location=location, hosts=hosts, rc=proc.returncode, wall_s=round(wall, 1),
        ansible_tree_cpu_s=round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 1),
        gate_cpu_on_controller_s=round(sum(cpu) if location == "controller" else 0.0, 1),
        gate_cpu_on_hosts_s=round(sum(cpu) if location == "host" else 0.0, 1),
        wave_spread=Spread.of(throughput).spread if throughput else None,
        host_spread_median=statistics.median(own) if own else None,
    )  # fmt: skip


def compare_locations(sizes: list[int]) -> list[WaveRun]:
    runs = [wave(n, loc) for loc in ("controller", "host") for n in sizes]
    print("TEST ENGINE waves on this machine (not a GPU fleet): where the gates' CPU goes")
    head = f"{'gate on':>10} {'hosts':>5} {'wall s':>7} {'gates on ctl s':>14} {'gates on hosts s':>16} "
    print(head + f"{'ansible tree s':>14} {'wave spread':>11} {'host spread':>11}  rc")
    for r in runs:
        print(
            f"{r.location:>10} {r.hosts:>5} {r.wall_s:>7.1f} {r.gate_cpu_on_controller_s:>14.1f} "
            f"{r.gate_cpu_on_hosts_s:>16.1f} {r.ansible_tree_cpu_s:>14.1f} "
            f"{(r.wave_spread or 0) * 100:>10.1f}% {(r.host_spread_median or 0) * 100:>10.1f}%  {r.rc}"
        )
    for loc in ("controller", "host"):
        small, big = (next(r for r in runs if r.location == loc and r.hosts == n) for n in (min(sizes), max(sizes)))
        gate_ratio = (
            big.gate_cpu_on_controller_s / small.gate_cpu_on_controller_s if small.gate_cpu_on_controller_s else None
        )
        print(
            f"{loc}: {max(sizes)}-host / {min(sizes)}-host wave: controller CPU for gates "
            + (f"x{gate_ratio:.2f}" if gate_ratio is not None else f"{big.gate_cpu_on_controller_s:.1f} s vs "
               f"{small.gate_cpu_on_controller_s:.1f} s (none on the controller)")
            + f"; whole ansible tree x{big.ansible_tree_cpu_s / small.ansible_tree_cpu_s:.2f}"
        )  # fmt: skip
    return runs


def rollout(hosts: int, serial: list[int | str]) -> RolloutRun:
    cleanup(hosts)
    with tempfile.TemporaryDirectory(prefix="rollout-bench-") as tmp:
        inventory = write_inventory(Path(tmp), hosts, serial)
        started = time.monotonic()
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), "deploy.yml"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - started
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n", file=sys.stderr)
    cleanup(hosts)
    return RolloutRun(hosts, len(batch_sizes(serial, hosts)), wall, proc.returncode)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 3, 6])
    parser.add_argument("--serial", default='[1, "50%"]', help="serial batches as YAML (default: the rollout's)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--compare-locations", action="store_true", help="gates on the controller vs on the hosts")
    args = parser.parse_args()
    if args.compare_locations:
        sizes = [n for n in args.hosts if n > 1] or [3, 6]
        waves = compare_locations(sizes if len(sizes) > 1 else [3, 6])
        if args.json:
            args.json.write_text(json.dumps([w.__dict__ for w in waves], indent=2))
        return 0 if all(w.rc == 0 for w in waves) else 1
    serial = yaml.safe_load(args.serial)
    runs = [rollout(n, serial) for n in args.hosts]
    first = runs[0]
    print("TEST ENGINE rollout on this machine (not a GPU fleet); serial =", json.dumps(serial))
    print(f"{'hosts':>5} {'batches':>7} {'wall s':>8} {'x hosts':>8} {'x batches':>9} {'x wall':>7} {'s/batch':>8}  rc")
    for run in runs:
        print(
            f"{run.hosts:>5} {run.batches:>7} {run.wall_s:>8.1f} {run.hosts / first.hosts:>8.2f} "
            f"{run.batches / first.batches:>9.2f} {run.wall_s / first.wall_s:>7.2f} "
            f"{run.wall_s / run.batches:>8.1f}  {run.rc}"
        )
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in runs], indent=2))
    return 0 if all(r.rc == 0 for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
