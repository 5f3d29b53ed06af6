"""Waves that spare each GPU profile, and rollout settings read by Ansible's own precedence.

Real `ansible-playbook deploy.yml` over SSH test hosts (testengine.ssh_fleet: loopback addresses of
one sshd container of the molecule host image, `become` through sudo, the project's ansible.cfg;
their servers, where a run starts one, are the TEST ENGINE on this machine's Docker daemon):
five of profile rtx (w-r1..w-r5, group rtx) and two of profile b200 (w-b1, w-b2, group b200);
the canaries are w-r1 and w-b1. The first runs are narrowed with a tag that matches no task, so
only what runs whatever the tags runs (preflight, the plan, the plays and their batches, records,
summary): no server is deployed, and the batches Ansible ran are printed by the wave play
(`Wave N of M: <ansible_play_batch>`). Percentages follow Ansible's serial (preflight/waves.py).

There is no group_vars/all/rollout.yml in these inventories: before, the rollout read
sglang_rollout_serial only from that file and the playbook's defaults overrode the inventory's
sglang_rollout_rollback.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from roles_testlib import deploy, docker_ok, remove_test_fleet
from ssh_hosts import loopback_sshd

from testengine import ssh_fleet
from testengine.local_fleet import short_gate_config, write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not docker_ok(), reason="needs a running Docker engine")]  # fmt: skip

PROFILES = {"rtx": ["w-r1", "w-r2", "w-r3", "w-r4", "w-r5"], "b200": ["w-b1", "w-b2"]}
BASE_PORT = 31960
NO_TASK = "waves_no_task"  # a tag no task has: only the tasks tagged always run
WAVE = re.compile(r"Wave (\d+) of (\d+): ([^'\"\n]+)")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of this module's loopback SSH test hosts' sshd."""
    yield from loopback_sshd(tmp_path_factory, "waves-sshd")


def _inventory(tmp: Path, ssh_port: int, main: dict, groups: dict[str, dict] | None = None) -> Path:
    """Hosts in groups rtx and b200 under sglang_servers; ``main`` added to group_vars/all/main.yml,
    ``groups``: group name -> its group_vars file."""
    inv = tmp / "inventory"
    hosts: dict[str, dict] = {}
    for profile, names in PROFILES.items():
        for name in names:
            hosts[name] = {
                **ssh_fleet.host_vars(len(hosts) + 1, ssh_port),
                "sglang_server_port": BASE_PORT + len(hosts),
                "sglang_server_container_name": f"waves-sglang-{name}",
                "flashinfer_cache_volume_prefix": f"waves-fic-{name}",
                "sglang_server_state_dir": str(tmp / "state" / name),
                "sglang_gate_baseline_group": profile,
            }
    write_inventory(inv, hosts, [1], sglang_reports_dir=str(tmp / "reports"), **main)
    (inv / "group_vars/all/rollout.yml").unlink()  # the settings live elsewhere here
    children = {p: {"hosts": {n: hosts[n] for n in names}} for p, names in PROFILES.items()}
    tree = {"all": {"children": {"sglang_servers": {"children": children}}}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(tree, sort_keys=False))  # inventory order: rtx first
    for group, values in (groups or {}).items():
        (inv / "group_vars" / f"{group}.yml").write_text(yaml.safe_dump(values))
    return inv


def _waves_run(log: str) -> list[list[str]]:
    """The batches the wave play ran, as it printed them (ansible_play_batch), in order."""
    found = [(int(m[1]), int(m[2]), m[3].strip().split(", ")) for m in WAVE.finditer(log)]
    assert [i for i, _, _ in found] == list(range(1, len(found) + 1)), found
    assert {n for _, n, _ in found} <= {len(found)}, found
    return [batch for _, _, batch in found]


def _summary(tmp: Path, run_id: str) -> dict:
    return json.loads((tmp / "reports" / run_id / "rollout-summary.json").read_text())


def test_serial_in_main_yml_and_a_profiles_cap_in_its_group_vars_make_the_batches(tmp_path, sshd):
    # serial in group_vars/all/main.yml; the rtx profile's cap in group_vars/rtx.yml (2 of 5), the
    # b200 profile's the default 25 % of 2 -> 1. Ansible's serial [1, "100%"] alone would run
    # w-r2 | w-r3, w-r4, w-r5, w-b2 (3 rtx at once, inventory order).
    main, rtx = {"sglang_rollout_serial": [1, "100%"]}, {"sglang_rollout_max_out_per_profile": 2}
    inv = _inventory(tmp_path, sshd, main, {"rtx": rtx})
    run = deploy(inv, "20261207T100000Z", "--tags", NO_TASK)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-5000:]
    planned = [["w-r2"], ["w-r3", "w-r4", "w-b2"], ["w-r5"]]
    # Ansible ran the planned batches, in the planned order (w-b2 before w-r5, which the inventory has first)
    assert _waves_run(log) == planned, log[-5000:]
    said = " ".join(log.split())
    assert (
        "Waves after the canaries: 3 (sglang_rollout_serial 1, 100% of 7 hosts; at most per GPU profile, "
        "sglang_rollout_max_out_per_profile: rtx 2 of 5, b200 1 of 2)" in said
    ), said[-5000:]
    assert "wave 2: w-r3, w-r4, w-b2 (rtx 2, b200 1)" in said
    summary = _summary(tmp_path, "20261207T100000Z")
    assert summary["waves"] == planned and summary["canaries"] == {"rtx": "w-r1", "b200": "w-b1"}, summary
    assert summary["not_reached"] == [] and summary["failed"] == [], summary
    md = (tmp_path / "reports" / "20261207T100000Z" / "rollout-summary.md").read_text()
    assert "then the waves (at most `sglang_rollout_max_out_per_profile` hosts of a GPU profile each): " \
           "1: w-r2; 2: w-r3, w-r4, w-b2; 3: w-r5." in md, md  # fmt: skip


def test_hosts_an_earlier_run_left_out_of_rotation_go_first_in_the_waves(tmp_path, sshd):
    """The fleet state says w-r3 and w-r4 are out of rotation (drained by a run that stopped). They are
    out before this run takes any host: the first wave is w-r3 alone, the second takes w-r4 and only
    one more rtx host (cap 2, w-r4 counted), and the plan says why they go first. The canaries stay
    the first hosts of their profiles (a host left drained is no canary)."""
    main, rtx = {"sglang_rollout_serial": [1, "100%"]}, {"sglang_rollout_max_out_per_profile": 2}
    inv = _inventory(tmp_path, sshd, main, {"rtx": rtx})
    drained = {"drained": True, "drained_by": "20261206T0900Z", "drained_why": "gate failed, no last good config"}
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "fleet-state.json").write_text(json.dumps(
        {"schema": 1, "hosts": {"w-r3": drained, "w-r4": drained}, "image_in_flight": {}}
    ))  # fmt: skip
    run = deploy(inv, "20261207T140000Z", "--tags", NO_TASK)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-5000:]
    planned = [["w-r3"], ["w-r4", "w-r2", "w-b2"], ["w-r5"]]
    assert _waves_run(log) == planned, log[-5000:]
    summary = _summary(tmp_path, "20261207T140000Z")
    assert summary["canaries"] == {"rtx": "w-r1", "b200": "w-b1"} and summary["waves"] == planned, summary
    assert (
        "out of rotation since an earlier run, first in the waves: w-r3 (gate failed, no last good config), "
        "w-r4 (gate failed, no last good config)"
    ) in " ".join(log.split())


def test_serial_and_cap_in_a_groups_vars_and_a_bad_cap_refused_by_preflight(tmp_path, sshd):
    # serial in the vars of group sglang_servers (not all), the cap for every host in all/main.yml:
    # waves of 2 of the 5 wave hosts, in inventory order (no profile holds them back)
    main, servers = {"sglang_rollout_max_out_per_profile": "100%"}, {"sglang_rollout_serial": [2]}
    inv = _inventory(tmp_path, sshd, main, {"sglang_servers": servers})
    run = deploy(inv, "20261207T110000Z", "--tags", NO_TASK)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-5000:]
    assert _waves_run(log) == [["w-r2", "w-r3"], ["w-r4", "w-r5"], ["w-b2"]], log[-5000:]

    # a cap that is no count or percentage, set for one profile: preflight refuses those hosts,
    # naming the variable and what it may hold, and nothing runs past preflight
    (inv / "group_vars" / "b200.yml").write_text(yaml.safe_dump({"sglang_rollout_max_out_per_profile": "half"}))
    run = deploy(inv, "20261207T120000Z", "--tags", NO_TASK)
    log = run.stdout + run.stderr
    said = " ".join(log.split())
    assert run.returncode != 0, log[-5000:]
    assert (
        "w-b1, w-b2: invalid setting(s): sglang_rollout_max_out_per_profile: 'half' is not a count of hosts "
        '(a positive integer: 2) or a percentage ("1%" to "100%")' in said.replace('\\"', '"')
    ), said[-5000:]
    assert "PLAY [Canaries" not in log and not (tmp_path / "reports" / "20261207T120000Z").exists()


def test_the_inventorys_rollback_false_is_not_overridden(tmp_path, sshd):
    """sglang_rollout_rollback: false in group_vars/all/main.yml (no rollout.yml): a canary whose gate
    fails keeps its failed server running, as the inventory asks (the playbook's defaults used to
    win over it and stop the container)."""
    name = "w-solo"
    remove_test_fleet([name], "waves")
    try:
        inv = tmp_path / "inventory"
        host = {
            **ssh_fleet.host_vars(20, sshd),
            "sglang_server_port": BASE_PORT + 20,
            "sglang_server_container_name": f"waves-sglang-{name}",
            "flashinfer_cache_volume_prefix": f"waves-fic-{name}",
            "sglang_server_state_dir": str(tmp_path / "state" / name),
            "sglang_gate_baseline_group": "solo",
            # the server answers, but every answer is NaN-garbage: its gate fails
            "sglang_test_engine_env": {"TEST_ENGINE_FAULT": "nan", "TEST_ENGINE_COLD_START_S": "1"},
        }
        gate = short_gate_config(baseline={"tolerance": 0.5})
        reports = str(tmp_path / "reports")
        write_inventory(
            inv, {name: host}, [1], sglang_reports_dir=reports, sglang_gate_config=gate, sglang_rollout_rollback=False
        )
        (inv / "group_vars/all/rollout.yml").unlink()
        run = deploy(inv, "20261207T130000Z")
        log = run.stdout + run.stderr
        assert run.returncode != 0, log[-5000:]
        said = " ".join(log.split())
        assert "Rollback disabled (sglang_rollout_rollback: false): the failed server keeps running." in said, said[
            -5000:
        ]
        state = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", f"waves-sglang-{name}"],
                               capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
        assert state == "true"
        summary = _summary(tmp_path, "20261207T130000Z")
        assert summary["failed"] == [name] and summary["rolled_back"] == [], summary
    finally:
        remove_test_fleet([name], "waves")
