"""CPU-only tests of benchmarks/rollout.py's fleet arithmetic: Ansible's batch sizes, the
projection from measured stage runs, the loopback addresses and the per-stage marks it reads.
The SSH fleet itself runs only in the benchmark (it starts an sshd and ~hundreds of connections)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from testengine import ssh_fleet

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
        # the canary, then the waves of the 199 others (percentages of all 200 hosts)
        ([1, 5, "25%"], 200, [1, 1, 5, 50, 50, 50, 43]),
        ([1, "50%"], 6, [1, 1, 3, 1]),
        ([1, "25%"], 3, [1, 1, 1]),  # a percentage rounds down, but never below one host
        ([2], 5, [1, 2, 2]),
    ],
)
def test_batch_sizes_are_the_canary_then_the_planned_waves(serial, hosts, sizes):
    assert rb.batch_sizes(serial, hosts) == sizes
    assert sum(sizes) == hosts


def _run(stage: str, hosts: int, wall: float, **kw: object) -> fs.StageRun:
    return fs.StageRun(stage=stage, hosts=hosts, forks=50, rc=0, wall_s=wall, cpu_s=0.0, peak_pss_mib=0.0, **kw)


def test_the_projection_adds_preflight_and_each_batch_from_the_measured_parts():
    runs = [
        _run("preflight", 10, 8.0), _run("check", 10, 30.0),
        _run("preflight", 200, 75.0), _run("preflight", 200, 60.0), _run("preflight", 200, 40.0),  # median 60
        _run("check", 200, 220.0),
        _run("rollout", 3, 200.0, host_stage_s={"image": 10.0, "server": 20.0, "gate": 90.0}),
    ]  # fmt: skip
    p = rb.project(runs, [1, 5, "25%"])
    assert p["batch_sizes"] == [1, 1, 5, 50, 50, 50, 43]  # the canary, then the waves
    assert p["one_host_rollout_s"] == 120.0 and p["per_extra_host_s"] == 1.0  # (220 - 30) / 190
    assert p["batch_s"] == [120.0, 120.0, 124.0, 169.0, 169.0, 169.0, 162.0]
    assert p["projected_s"] == 60.0 + 120 + 120 + 124 + 169 * 3 + 162
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
    assert [ssh_fleet.address(i) for i in (1, 2, 200)] == ["127.0.1.1", "127.0.1.2", "127.0.1.200"]
    with pytest.raises(ValueError, match=r"outside 1\.\.254"):
        ssh_fleet.address(255)


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


def test_controller_samples_are_split_by_the_stages_hosts_are_in():
    # two hosts: h1 in image 10-20 then gate 20-40, h2 in image 12-30; samples every 10 s, 1 CPU-s per s
    windows = [("image", 10.0, 20.0), ("gate", 20.0, 40.0), ("image", 12.0, 30.0)]
    samples = [(t, float(t), 1000 * t) for t in (0, 10, 20, 30, 40, 50)]
    costs = fs.split_by_stage(samples, windows)
    assert list(costs) == ["preflight", "image", "gate", "records, summary, locks"]
    assert costs["preflight"].cpu_s == 10.0  # 0-10: before any mark
    # 10-20 (mid 15): both hosts in image; 20-30 (mid 25): h1 gate, h2 image; 30-40: h1 gate
    assert costs["image"].cpu_s == 10.0 + 5.0 and costs["gate"].cpu_s == 5.0 + 10.0
    assert costs["records, summary, locks"].cpu_s == 10.0  # 40-50: after every stage
    assert sum(c.wall_s for c in costs.values()) == 50.0  # the wall time is split, never counted twice
    assert costs["gate"].peak_pss_kib == 40_000 and costs["preflight"].peak_pss_kib == 10_000


def test_stage_windows_come_from_each_records_marks(tmp_path: Path):
    d = tmp_path / "run-1" / "hosts"
    d.mkdir(parents=True)
    marks = [{"stage": "image", "at": 1}, {"stage": "gate", "at": 3}, {"stage": "done", "at": 7}]
    (d / "h1.json").write_text(json.dumps({"host": "h1", "stages": marks}))
    assert fs.stage_windows(tmp_path) == [("image", 1.0, 3.0), ("gate", 3.0, 7.0)]


def test_task_counts_per_stage(tmp_path: Path):
    lines = [{"host": "h1", "stage": "image", "task": "t", "status": "ok"}] * 3 + [
        {"host": "h2", "stage": "gate", "task": "t", "status": "retry"}]  # fmt: skip
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert fs.task_counts(path) == {"image": 3, "gate": 1}


def test_the_projection_check_applies_the_recorded_model_and_refits_it():
    recorded = {
        "projection": {"one_host_rollout_s": 50.0, "per_extra_host_s": 5.0, "preflight_s": 40.0, "projected_s": 1500.0},
        "runs": [{"stage": "preflight", "hosts": 50, "wall_s": w} for w in (10.0, 12.0, 11.0)],
    }  # fmt: skip
    run = _run("today-1", 8, 200.0, batches=[{"hosts": 1, "wall_s": 40.0}, {"hosts": 5, "wall_s": 52.0},
                                             {"hosts": 2, "wall_s": 44.0}])  # fmt: skip
    c = rb.check_projection(run, [5, "25%"], recorded)
    assert c.batch_sizes == [1, 5, 2]  # the canary, 5, then 25 % of 8 hosts
    assert c.projected_as_recorded_s == 11.0 + 50 + (50 + 4 * 5) + (50 + 5)  # preflight median of 50 hosts
    assert c.projected_with_canary_s == 11.0 + 40 + (40 + 20) + (40 + 5)
    assert c.measured_per_extra_host_s == 3.5  # median of (52 - 40) / 4 = 3 and (44 - 40) / 1 = 4
    assert c.refit_200_hosts_s == 40.0 + sum(40 + (n - 1) * 3.5 for n in (1, 5, 50, 50, 50, 44))
    assert round(c.error(c.projected_as_recorded_s), 3) == round(186 / 200 - 1, 3)
