"""CPU-only tests of benchmarks/rollout.py's fleet arithmetic: Ansible's batch sizes, the
projection from measured stage runs, the loopback addresses and the per-stage marks it reads.
The SSH fleet itself runs only in the benchmark (it starts an sshd and ~hundreds of connections)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
SPEC = importlib.util.spec_from_file_location("rollout_bench", ROOT / "benchmarks" / "rollout.py")
assert SPEC and SPEC.loader
rb = importlib.util.module_from_spec(SPEC)
sys.modules["rollout_bench"] = rb
SPEC.loader.exec_module(rb)
fs = rb._fleet_ssh


@pytest.mark.parametrize(
    ("serial", "hosts", "sizes"),
    [
        ([1, 5, "25%"], 200, [1, 5, 50, 50, 50, 44]),
        ([1, "50%"], 6, [1, 3, 2]),
        ([1, "25%"], 3, [1, 1, 1]),  # a percentage rounds down, but never below one host
        ([2], 5, [2, 2, 1]),
    ],
)
def test_batch_sizes_follow_ansibles_serial(serial, hosts, sizes):
    assert rb.batch_sizes(serial, hosts) == sizes
    assert sum(sizes) == hosts


def _run(stage: str, hosts: int, wall: float, **kw) -> fs.StageRun:
    return fs.StageRun(stage=stage, hosts=hosts, forks=50, rc=0, wall_s=wall, cpu_s=0.0, peak_pss_mib=0.0, **kw)


def test_the_projection_adds_preflight_and_each_batch_from_the_measured_parts():
    runs = [
        _run("preflight", 10, 8.0), _run("check", 10, 30.0),
        _run("preflight", 200, 75.0), _run("preflight", 200, 60.0), _run("preflight", 200, 40.0),  # median 60
        _run("check", 200, 220.0),
        _run("rollout", 3, 200.0, host_stage_s={"image": 10.0, "server": 20.0, "gate": 90.0}),
    ]  # fmt: skip
    p = rb.project(runs, [1, 5, "25%"])
    assert p["batch_sizes"] == [1, 5, 50, 50, 50, 44]
    assert p["one_host_rollout_s"] == 120.0 and p["per_extra_host_s"] == 1.0  # (220 - 30) / 190
    assert p["batch_s"] == [120.0, 124.0, 169.0, 169.0, 169.0, 163.0]
    assert p["projected_s"] == 60.0 + 120 + 124 + 169 * 3 + 163
    # nothing to project from without a real rollout's stage times
    assert rb.project(runs[:6], [1]) == {}


def test_stage_times_are_the_median_over_the_hosts_records(tmp_path: Path):
    for host, (a, b, c) in {"h1": (0, 10, 100), "h2": (0, 30, 90), "h3": (5, 25, 125)}.items():
        d = tmp_path / "run-1" / "hosts"
        d.mkdir(parents=True, exist_ok=True)
        marks = [{"stage": "server", "at": a}, {"stage": "gate", "at": b}, {"stage": "done", "at": c}]
        (d / f"{host}.json").write_text(json.dumps({"host": host, "stages": marks}))
    assert fs.host_stage_times(tmp_path) == {"server": 20.0, "gate": 90.0}


def test_hosts_are_distinct_loopback_addresses_and_a_255th_is_refused():
    assert [fs.address(i) for i in (1, 2, 200)] == ["127.0.1.1", "127.0.1.2", "127.0.1.200"]
    with pytest.raises(ValueError, match=r"outside 1\.\.254"):
        fs.address(255)


def test_the_fleet_inventory_is_production_shaped(tmp_path: Path):
    import yaml

    inv = fs.write_inventory(tmp_path, 3, [1, "25%"], gpu_checks=True)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())["all"]["children"]["sglang_servers"]["hosts"]
    assert sorted(hosts) == ["bench-ssh-h001", "bench-ssh-h002", "bench-ssh-h003"]
    assert hosts["bench-ssh-h002"]["ansible_host"] == "127.0.1.2"
    assert len({h["sglang_server_port"] for h in hosts.values()}) == 3
    group = yaml.safe_load((inv / "group_vars/all/main.yml").read_text())
    assert (group["ansible_connection"], group["ansible_user"], group["ansible_become"]) == ("ssh", "deploy", True)
    assert group["sglang_gpu_host_prepare"] is True and group["ansible_port"] == fs.SSH_PORT
    shared = fs.write_inventory(tmp_path / "shared", 3, [1, "25%"], gpu_checks=True, distinct=False)
    hosts = yaml.safe_load((shared / "hosts.yml").read_text())["all"]["children"]["sglang_servers"]["hosts"]
    # a fleet's hosts of one profile: only the address differs (preflight checks one settings set)
    assert hosts["bench-ssh-h003"] == {"ansible_host": "127.0.1.3"} and len(hosts) == 3
