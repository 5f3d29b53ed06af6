"""Two test-engine "hosts" on this machine, canary first: the canary's first deploy fails its
gate, so it is stopped (nothing earlier to roll back to, cache kept), the rollout stops before
the second host, and the summary - written even though the play broke off - says so.
Runs under --limit, which must not lose the run id or the summary."""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path

import pytest
import yaml
from roles_testlib import REPO, ansible_playbook, docker_json, docker_ok
from test_roles_local_rollout import RELEASE_A

from testengine.harness import free_port

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(
        not docker_ok() or docker_json("image", "inspect", RELEASE_A) is None or not (REPO / "validate").is_dir(),
        reason="needs docker, the test-engine images (images/build.py test-engine) and validate/",
    ),
]


def test_failed_canary_stops_the_rollout_and_the_summary_says_so(tmp_path: Path) -> None:
    uid = secrets.token_hex(3)
    # Host vars, because inventory-file group vars rank below the local inventory's group_vars/all.
    common = {
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "sglang_image_source": "local",
        "sglang_reports_dir": str(tmp_path / "reports"),
        "sglang_gate_config": yaml.safe_load((REPO / "validate" / "configs" / "test-engine.yml").read_text()),
    }
    hosts = {}
    for n, fault in ((1, {"TEST_ENGINE_FAULT": "crash_above:8"}), (2, {})):
        hosts[f"fleet{n}-{uid}"] = {
            **common,
            "sglang_server_container_name": f"sglang-fleettest-{n}-{uid}",
            "sglang_image_probe_container_name": f"sglang-fleettest-{n}-{uid}-probe",
            "sglang_server_port": free_port(),
            "sglang_server_state_dir": str(tmp_path / f"state{n}"),
            "flashinfer_cache_volume_prefix": f"fi-fleettest-{n}-{uid}",
            "sglang_test_engine_env": {**fault, "TEST_ENGINE_COLD_START_S": "1"},
        }
    fleet = {"all": {"children": {"sglang_servers": {"hosts": hosts}}}}
    (tmp_path / "fleet.yml").write_text(yaml.safe_dump(fleet))
    names = list(hosts)
    try:
        run = ansible_playbook(
            "-i",
            "inventory/local/hosts.yml",
            "-i",
            str(tmp_path / "fleet.yml"),
            "--limit",
            ",".join(names),
            "deploy.yml",
            "-e",
            "sglang_run_id=fleet",
        )
        assert run.rc != 0
        assert "not reached: the rollout stopped" in run.out
        summary = json.loads((tmp_path / "reports" / "fleet" / "rollout-summary.json").read_text())
        assert summary["failed"] == [names[0]] and summary["not_reached"] == [names[1]]
        first = summary["hosts"][0]
        assert first["gate"] == "fail" and first["rolled_back"] is False
        assert first["image_after"] == "(stopped: first deploy failed)"
        assert "No earlier config passed a gate" in run.out
        c1 = docker_json("container", "inspect", hosts[names[0]]["sglang_server_container_name"])
        assert c1 is not None and not c1["State"]["Running"]
        assert docker_json("container", "inspect", hosts[names[1]]["sglang_server_container_name"]) is None
        assert docker_json("volume", "inspect", first["cache"]["name"]) is not None
    finally:
        for h in hosts.values():
            name = h["sglang_server_container_name"]
            subprocess.run(["docker", "rm", "-f", name, f"{name}-probe"], capture_output=True, check=False)
            vols = subprocess.run(
                [
                    "docker",
                    "volume",
                    "ls",
                    "-q",
                    "--filter",
                    f"label=io.sglang-deploy.cache-prefix={h['flashinfer_cache_volume_prefix']}",
                ],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.split()
            for vol in vols:
                subprocess.run(["docker", "volume", "rm", vol], capture_output=True, check=False)
