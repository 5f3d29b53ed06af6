"""What a fleet rollout costs the controller, and how its wall time grows with hosts and batches.

Default: the fleet over SSH (benchmarks/_fleet_ssh.py). Hosts are loopback addresses of one sshd
on this machine (127.0.1.x); preflight (nvidia-smi answering with a recorded H200) and check mode
are real on every host, and one real rollout of a few hosts (TEST ENGINE servers) gives the
per-host stage times (each host record's stage marks). It prints, per stage and host count, the
controller's wall time, CPU seconds and peak memory (PSS of the ansible-playbook tree), and the
projected wall time of a rollout of the largest count:

    projected = preflight(N) + sum over batches b of (one host's rollout + (size_b - 1) * per-host cost)

where one host's rollout is the measured median of the stage times, and the per-host cost is the
check-mode wall time's slope between the smallest and largest counts (what each more host in a
batch adds on the controller). Targets (issue 22): preflight of 200 hosts under 2 min, controller
memory under 2 GB, wall time in proportion to batches. Figures are this machine's (2 cores shared
with the one sshd and the hosts' side) and the TEST ENGINE's, never a GPU fleet's:

    .venv/bin/python benchmarks/rollout.py [--hosts 10 50 200] [--serial '[1, 5, "25%"]'] [--forks N]

``--cost`` (issue 39) runs real rollouts (``deploy.yml``: preflight, canary, waves, summary) of
``--hosts`` fresh SSH hosts (default 50) with the gates on the hosts (a light gate config on TEST
ENGINE servers: the gate's own cost is the host's, not the controller's), in a cgroup of their own
so every controller process counts, and prints per stage (the hosts' stage marks): wall time,
controller CPU seconds per host, peak memory, task executions per host and CPU per task; then
checks the 200-host projection's model against the measured run and states its error. With
``--variants today,mitogen,poll,ara`` and ``--repeat N`` the configurations run interleaved and
each one's CPU is printed as a ratio to ``today`` of the same round, with its spread. Every run
is checked for what the rollout must do and record (all moved with a passing gate, records,
reports, state, both Prometheus textfiles).

``--local`` rolls ``deploy.yml`` over 1, 3 and 6 local-connection hosts and prints wall time against
host count and against serial batches (hosts in one batch deploy and gate in parallel).

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
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _fleet_ssh

from testengine import local_fleet
from validate.metrics import Spread

ROOT = Path(__file__).resolve().parents[1]
BASE_PORT = 31500
batch_sizes = _fleet_ssh.batch_sizes  # Ansible's serial arithmetic


@dataclass
class RolloutRun:
    hosts: int
    batches: int
    wall_s: float
    rc: int


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
                            "sglang_metrics_textfile_dir": str(directory / "textfile" / name),
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
    _fleet_ssh.remove([f"bench-sglang-bench-h{i:02d}" for i in range(1, hosts + 1)], "bench-fic-bench-h")


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
    cleanup(hosts)
    with tempfile.TemporaryDirectory(prefix="rollout-bench-") as tmp:
        inventory = write_inventory(Path(tmp), hosts, [hosts], location)
        run = _fleet_ssh.run_stage("wave", inventory, ["deploy.yml"], 0, hosts)
        if run.rc != 0:
            print(run.tail, file=sys.stderr)
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
        location=location, hosts=hosts, rc=run.rc, wall_s=run.wall_s, ansible_tree_cpu_s=run.cpu_s,
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
        run = _fleet_ssh.run_stage("rollout", inventory, ["deploy.yml"], 0, hosts)
        if run.rc != 0:
            print(run.tail, file=sys.stderr)
    cleanup(hosts)
    return RolloutRun(hosts, len(batch_sizes(serial, hosts)), run.wall_s, run.rc)


def project(runs: list[_fleet_ssh.StageRun], serial: list[int | str]) -> dict[str, Any]:
    """The wall time of a rollout of the largest measured count, from the measured parts (module doc)."""
    pre_runs: dict[int, list[float]] = {}
    for r in runs:
        if r.stage == "preflight":
            pre_runs.setdefault(r.hosts, []).append(r.wall_s)
    pre = {n: statistics.median(v) for n, v in pre_runs.items()}  # repeated runs: their median
    check = {r.hosts: r for r in runs if r.stage == "check"}
    rollout = next((r for r in runs if r.stage == "rollout"), None)
    if not pre or not rollout or not rollout.host_stage_s:
        return {}
    if not check:
        return {}
    n, small, big = max(pre), min(check), max(check)
    per_host = (check[big].wall_s - check[small].wall_s) / (big - small) if big > small else 0.0
    one_host = sum(rollout.host_stage_s.values())
    sizes = batch_sizes(serial, n)
    batches = [round(one_host + (size - 1) * per_host, 1) for size in sizes]
    return {
        "hosts": n, "serial": serial, "batch_sizes": sizes, "preflight_s": pre[n], "check_hosts": [small, big],
        "one_host_rollout_s": round(one_host, 1), "per_extra_host_s": round(per_host, 3),
        "batch_s": batches, "projected_s": round(pre[n] + sum(batches), 1),
    }  # fmt: skip


def fleet(args: argparse.Namespace) -> int:
    serial = _fleet_ssh.yaml_serial(args.serial)
    print("Fleet over SSH on this machine (loopback hosts of one sshd; TEST ENGINE servers; not a GPU fleet)")
    print(f"{'stage':>18} {'hosts':>5} {'forks':>5} {'wall s':>7} {'s/host':>7} {'CPU s':>7} {'peak MiB':>8}  rc")

    def row(r: _fleet_ssh.StageRun) -> None:
        print(
            f"{r.stage:>18} {r.hosts:>5} {r.forks or '-':>5} {r.wall_s:>7.1f} {r.wall_s / r.hosts:>7.2f} "
            f"{r.cpu_s:>7.1f} {r.peak_pss_mib:>8.0f}  {r.rc}",
            flush=True,
        )
        if r.rc:
            print(r.tail[-3000:], file=sys.stderr, flush=True)

    runs = _fleet_ssh.measure(
        args.hosts, args.forks, args.rollout_hosts, args.check_max, report=row, repeat=args.repeat
    )
    for n in sorted({r.hosts for r in runs if r.stage == "preflight"}):
        walls = [r.wall_s for r in runs if r.stage == "preflight" and r.hosts == n]
        if len(walls) > 1:
            spread = Spread.of(walls)
            print(f"preflight {n} hosts over {len(walls)} runs: median {statistics.median(walls):.1f} s, "
                  f"min {min(walls):.1f}, max {max(walls):.1f}, spread {(spread.spread or 0) * 100:.0f} %")  # fmt: skip
    rollout = next((r for r in runs if r.stage == "rollout"), None)
    if rollout:
        print("one host's rollout stages (median s over its hosts):", json.dumps(rollout.host_stage_s))
    projection = project(runs, serial)
    if projection:
        print(
            f"projected rollout of {projection['hosts']} hosts, serial {json.dumps(serial)} "
            f"({len(projection['batch_sizes'])} batches: {projection['batch_sizes']}): "
            f"{projection['projected_s'] / 60:.1f} min = preflight {projection['preflight_s']:.0f} s + batches "
            f"{projection['batch_s']} s (one host {projection['one_host_rollout_s']:.0f} s, "
            f"+{projection['per_extra_host_s']:.2f} s per more host in a batch)"
        )
    if args.json:
        args.json.write_text(json.dumps({"runs": [asdict(r) for r in runs], "projection": projection}, indent=2))
    return 0 if all(r.rc == 0 for r in runs) else 1


@dataclass
class Variant:
    """A controller configuration under test: Ansible settings (environment, and ansible.cfg settings
    that have no environment variable), and hosts it needs in the inventory."""

    env: dict[str, str]
    inventory_hosts: dict[str, dict[str, Any]] | None = None
    cfg: dict[str, dict[str, str]] | None = None  # section -> key -> value, over the repository's ansible.cfg

    def environment(self, work: Path, name: str) -> dict[str, str]:
        if not self.cfg:
            return self.env
        return {**self.env, "ANSIBLE_CONFIG": str(ansible_cfg(work / f"{name}.cfg", self.cfg))}


def ansible_cfg(path: Path, over: dict[str, dict[str, str]]) -> Path:
    """The repository's ansible.cfg with ``over`` applied, its relative paths made absolute (they are
    relative to the file, which moves)."""
    import configparser

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "ansible.cfg")
    for key in ("inventory", "roles_path", "action_plugins", "library", "callback_plugins", "filter_plugins"):
        if cfg.has_option("defaults", key):
            cfg.set("defaults", key, ":".join(str(ROOT / p) for p in cfg.get("defaults", key).split(":")))
    for section, values in over.items():
        if not cfg.has_section(section):
            cfg.add_section(section)
        for key, value in values.items():
            cfg.set(section, key, value)
    with path.open("w") as f:
        cfg.write(f)
    return path


def today() -> Variant:
    return Variant({})


def poll() -> Variant:
    """Ansible's main loop polls its workers every ``internal_poll_interval`` (default 0.001 s)."""
    return Variant({}, cfg={"defaults": {"internal_poll_interval": "0.05"}})


def mitogen() -> Variant:
    """mitogen 0.3.54's linear strategy (the plays' strategy is linear). With ansible-core 2.21.5 it
    escalates a task delegated to the implicit localhost with ``become: false`` through sudo when
    the inventory sets ``ansible_become: true`` (plain Ansible does not): so localhost is declared
    in the inventory with ``ansible_become: false``, which plain Ansible needs nowhere."""
    import ansible_mitogen

    plugins = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    local = {"ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable}
    env = {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}
    return Variant(env, {"localhost": local})


def ara() -> Variant:
    """Today's settings with ARA recording on (docs/monitoring.md), into a local sqlite database:
    what recording every run costs the controller."""
    base = tempfile.mkdtemp(prefix="rollout-bench-ara-")
    return Variant({"ANSIBLE_CALLBACKS_ENABLED": "sglang_ara", "ARA_BASE_DIR": base})


VARIANTS: dict[str, Any] = {"today": today, "mitogen": mitogen, "poll": poll, "ara": ara}


RECORDED = ROOT / "benchmarks/results/rollout-fleet-2026-12-06-preflight.json"  # the 200-host projection's inputs


@dataclass
class ProjectionCheck:
    """The 200-host projection's model against a measured rollout of fewer hosts (check_projection)."""

    hosts: int
    batch_sizes: list[int]
    measured_s: float
    projected_as_recorded_s: float  # the model with its recorded inputs
    projected_with_canary_s: float  # the same, with this run's canary as one host's rollout
    canary_s: float
    recorded_per_extra_host_s: float
    measured_per_extra_host_s: float  # this run: median over its batches of (batch - canary) / (size - 1)
    refit_s: float  # the model refitted with this run's canary and slope, at this run's host count
    refit_200_hosts_s: float
    recorded_200_hosts_s: float

    def error(self, projected: float) -> float:
        return projected / self.measured_s - 1


def check_projection(run: _fleet_ssh.StageRun, serial: list[int | str], recorded: dict[str, Any]) -> ProjectionCheck:
    """The 200-host projection's model (``project``: preflight + per batch one host's rollout + each
    more host's check-mode slope) applied to this run's host count, against this run's measured wall
    time; then refitted with this run's own slope and projected to 200 hosts again."""
    p = recorded["projection"]
    sizes = batch_sizes(serial, run.hosts)
    pre = statistics.median(r["wall_s"] for r in recorded["runs"] if r["stage"] == "preflight" and r["hosts"] == 50)
    canary = run.batches[0]["wall_s"] if run.batches else 0.0
    slopes = [(b["wall_s"] - canary) / (b["hosts"] - 1) for b in run.batches[1:] if b["hosts"] > 1]
    slope = statistics.median(slopes) if slopes else 0.0

    def model(preflight: float, one: float, per: float, sizes: list[int]) -> float:
        return round(preflight + sum(one + (n - 1) * per for n in sizes), 1)

    return ProjectionCheck(
        hosts=run.hosts, batch_sizes=sizes, measured_s=run.wall_s,
        projected_as_recorded_s=model(pre, p["one_host_rollout_s"], p["per_extra_host_s"], sizes),
        projected_with_canary_s=model(pre, canary, p["per_extra_host_s"], sizes),
        canary_s=canary, recorded_per_extra_host_s=p["per_extra_host_s"], measured_per_extra_host_s=round(slope, 2),
        refit_s=model(pre, canary, slope, sizes),
        refit_200_hosts_s=model(p["preflight_s"], canary, slope, batch_sizes(serial, 200)),
        recorded_200_hosts_s=p["projected_s"],
    )  # fmt: skip


def print_projection(c: ProjectionCheck) -> None:
    print(f"projection check, {c.hosts} hosts in batches {c.batch_sizes}: measured {c.measured_s:.0f} s")
    print(
        f"  the 200-host model as recorded (one host's rollout 52.9 s, +{c.recorded_per_extra_host_s:.2f} s per more "
        f"host in a batch): {c.projected_as_recorded_s:.0f} s, error {c.error(c.projected_as_recorded_s):+.0%}"
    )
    print(
        f"  the same model with this run's canary ({c.canary_s:.0f} s) as one host's rollout: "
        f"{c.projected_with_canary_s:.0f} s, error {c.error(c.projected_with_canary_s):+.0%}"
    )
    print(
        f"  measured per more host in a batch: {c.measured_per_extra_host_s:.2f} s; refitted: {c.refit_s:.0f} s "
        f"here, 200 hosts {c.refit_200_hosts_s / 60:.1f} min (recorded: {c.recorded_200_hosts_s / 60:.1f} min)"
    )


def print_cost(run: _fleet_ssh.StageRun) -> None:
    """One rollout's table: per stage wall time, controller CPU seconds per host, peak memory (a run
    stopped at its deadline: per host that reached each stage, the figures so far)."""
    print(f"{run.stage}: {run.hosts} hosts, wall {run.wall_s:.0f} s, controller CPU {run.cpu_s:.0f} s "
          f"= {run.cpu_s / run.hosts:.2f} s per host, peak {run.peak_pss_mib:.0f} MiB, rc {run.rc}"
          + ("" if run.cgroup else " (no cgroup: CPU of detached ssh masters not counted)"))  # fmt: skip
    print(f"  {'stage':<26} {'wall s':>7} {'CPU s/host':>10} {'peak MiB':>8} {'tasks/host':>10} {'CPU ms/task':>11}")
    for cost in run.stages.values():
        per_host, tasks = cost["cpu_s"] / cost.get("hosts", run.hosts), cost.get("tasks_per_host", 0)
        print(f"  {cost['stage']:<26} {cost['wall_s']:>7.1f} {per_host:>10.2f} {cost['peak_pss_kib'] / 1024:>8.0f} "
              f"{tasks:>10.1f} {(per_host / tasks * 1000 if tasks else 0):>11.0f}")  # fmt: skip
    for problem in run.problems:
        print(f"  PROBLEM: {problem}")
    if run.rc:
        print(run.tail[-3000:], file=sys.stderr, flush=True)


def compare(runs: list[_fleet_ssh.StageRun], variants: list[str]) -> dict[str, dict[str, Any]]:
    """Controller CPU per host of each variant over the ``today`` run of the same round (runs are
    interleaved, so each pair shared the machine's state), as ratios with their median and spread."""
    out: dict[str, dict[str, Any]] = {}
    by_name = {name: [r for r in runs if r.stage.rsplit("-", 1)[0] == name] for name in variants}
    base = by_name.get("today", [])
    for name in variants:
        per_host = [r.cpu_s / r.hosts for r in by_name[name]]
        pairs = zip(by_name[name], base, strict=False) if name != "today" else []
        ratios = [r.cpu_s / b.cpu_s for r, b in pairs if b.cpu_s]
        out[name] = {"cpu_s_per_host": [round(x, 2) for x in per_host], "ratios": [round(x, 3) for x in ratios]}
        runs_text = ", ".join(f"{x:.2f}" for x in per_host)
        line = f"{name:>10}: controller CPU per host {statistics.median(per_host):.2f} s (runs {runs_text})"
        if ratios:
            spread = Spread.of(ratios)
            out[name]["ratio_median"], out[name]["ratio_spread"] = statistics.median(ratios), spread.spread
            line += (f"; ratio to today {statistics.median(ratios):.2f} (runs {', '.join(f'{x:.2f}' for x in ratios)},"
                     f" spread {(spread.spread or 0) * 100:.0f} %)")  # fmt: skip
        print(line)
    return out


def cost(args: argparse.Namespace) -> int:
    serial = _fleet_ssh.yaml_serial(args.serial)
    variants = args.variants.split(",")
    runs: list[_fleet_ssh.StageRun] = []
    print(f"Real rollouts over SSH on this machine ({args.hosts[0]} loopback hosts of one sshd; TEST ENGINE servers, "
          f"light gate on the hosts; not a GPU fleet); serial {json.dumps(serial)}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="rollout-bench-cost-") as tmp:
        work = Path(tmp)
        _fleet_ssh.start_sshd(work)
        try:
            for i in range(args.repeat):
                for name in variants:  # interleaved: drift on the shared machine hits each alike
                    variant, label = VARIANTS[name](), f"{name}-{i + 1}"
                    run = _fleet_ssh.rollout_cost(
                        work,
                        label,
                        args.hosts[0],
                        serial,
                        variant.environment(work, label),
                        variant.inventory_hosts,
                        args.deadline_s,
                    )
                    print_cost(run)
                    runs.append(run)
        finally:
            _fleet_ssh.stop_sshd()
    ratios = compare(runs, variants)
    first = next((r for r in runs if r.stage.startswith("today") and r.rc == 0 and r.batches), None)
    check = check_projection(first, serial, json.loads(RECORDED.read_text())) if first else None
    if check:
        print_projection(check)
    if args.json:
        rows = [{k: v for k, v in asdict(r).items() if k not in ("samples", "tail")} for r in runs]
        result = {"runs": rows, "compare": ratios, "projection_check": asdict(check) if check else None}
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if all(r.rc == 0 and not r.problems for r in runs) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, nargs="+", help="host counts (default 10 50 200; --local: 1 3 6)")
    parser.add_argument("--serial", default='[1, 5, "25%"]', help="serial batches as YAML (the projection's)")
    parser.add_argument("--forks", type=int, default=0, help="ANSIBLE_FORKS (default: ansible.cfg's)")
    parser.add_argument("--rollout-hosts", type=int, default=3, help="hosts of the real rollout stage (0: none)")
    parser.add_argument("--check-max", type=int, default=0, help="check mode only up to this many hosts (0: all)")
    parser.add_argument("--repeat", type=int, default=1, help="preflight runs per host count (their spread)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--local", action="store_true", help="local-connection rollouts: wall time vs batches")
    parser.add_argument("--compare-locations", action="store_true", help="gates on the controller vs on the hosts")
    parser.add_argument("--cost", action="store_true", help="real SSH rollouts: controller cost per stage and host")
    parser.add_argument("--variants", default="today,mitogen", help=f"--cost: configurations, of {sorted(VARIANTS)}")
    parser.add_argument("--deadline-s", type=float, default=0, help="--cost: stop a rollout after this long (0: never)")
    args = parser.parse_args()
    if args.cost:
        args.hosts = args.hosts or [50]
        return cost(args)
    if not args.local and not args.compare_locations:
        args.hosts = args.hosts or [10, 50, 200]
        return fleet(args)
    args.hosts = args.hosts or [1, 3, 6]
    if args.compare_locations:
        sizes = [n for n in args.hosts if n > 1] or [3, 6]
        waves = compare_locations(sizes if len(sizes) > 1 else [3, 6])
        if args.json:
            args.json.write_text(json.dumps([w.__dict__ for w in waves], indent=2))
        return 0 if all(w.rc == 0 for w in waves) else 1
    serial = yaml.safe_load(args.serial if args.serial != parser.get_default("serial") else '[1, "50%"]')
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
