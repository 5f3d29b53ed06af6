"""A cache volume is warm for the builds that passed on it, not for its key: a new SGLang release under
the same FlashInfer starts cold, with the cold deadline.

Real `ansible-playbook deploy.yml`, one test-engine host on this machine (local connection, its own
container, port and cache volume). release-b (poses as SGLang 0.5.23, FlashInfer 0.7.2) passes on a
new volume, whose manifest then records its build. release-c (SGLang 0.5.24 with the same FlashInfer,
so the same cache key) needs kernels that volume lacks: the test engine, as FlashInfer would, compiles
them for TEST_ENGINE_COLD_START_S seconds. The warm deadline is shorter than that compile, so a start
judged warm by its key alone fails its wait and is rolled back; judged by its build, it gets the cold
deadline, passes, and its build joins the manifest beside release-b's (a later release-b start is warm:
tests/roles/test_cache_build_decision.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from roles_testlib import deploy, docker_json, docker_ok, remove_test_fleet

from testengine.local_fleet import short_gate_config, write_inventory

RELEASE_B = "local/sglang-test-engine:release-b"
RELEASE_C = "local/sglang-test-engine:release-c"
HOST, PREFIX, PORT = "cb-h1", "cachebuild", 31795

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(
        not docker_ok() or any(docker_json("image", "inspect", r) is None for r in (RELEASE_B, RELEASE_C)),
        reason="needs docker and the test-engine images (scripts/setup.sh builds them)",
    ),
]


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("cache-builds")
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "sglang_server_port": PORT,
        "sglang_server_container_name": f"{PREFIX}-sglang-{HOST}",
        "flashinfer_cache_volume_prefix": f"{PREFIX}-fic-{HOST}",
        "sglang_server_state_dir": str(tmp / "state"),
        # a kernel compile of 12 s against a warm deadline of 5 s: only the cold deadline (240 s) fits
        "sglang_test_engine_env": {"TEST_ENGINE_COLD_START_S": "12"},
        "sglang_server_ready_timeout_s": 5,
        "sglang_server_ready_timeout_cold_s": 240,
    }
    inv = write_inventory(tmp / "inventory", {HOST: host}, [1], sglang_reports_dir=str(tmp / "reports"),
                          sglang_image_source="local",
                          sglang_gate_config=short_gate_config(baseline={"tolerance": 0.5}))  # fmt: skip
    remove_test_fleet([HOST], PREFIX)
    yield inv, tmp
    remove_test_fleet([HOST], PREFIX)


def _rollout(inventory, run_id: str, image: str) -> dict:
    inv, tmp = inventory
    run = deploy(inv, run_id, "-e", f"sglang_image={image}")
    record = json.loads((tmp / "reports" / run_id / "hosts" / f"{HOST}.json").read_text())
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    return {"record": record, "out": " ".join(run.stdout.split())}  # the YAML callback wraps long lines


def _manifest_builds() -> dict[str, str]:
    volume = f"{PREFIX}-fic-{HOST}-fi0.7.2-cu13.0-sm120-al12.0a"
    cat = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{volume}:/c:ro", "--entrypoint", "cat", RELEASE_B,
         "/c/sglang-deploy-cache-manifest.json"], capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(cat.stdout)["builds"]


def test_a_new_release_under_the_same_flashinfer_starts_cold_with_the_cold_deadline(inventory) -> None:
    first = _rollout(inventory, "cb-1-release-b", RELEASE_B)["record"]
    assert first["outcome"] == "ok" and first["gate"] == "pass"
    assert first["cache"]["start"] == "cold" and first["cache"]["key"] == "fi0.7.2-cu13.0-sm120-al12.0a"
    builds = _manifest_builds()
    assert len(builds) == 1 and next(iter(builds)).startswith("sglang0.5.23-")
    assert next(iter(builds.values())).startswith("sglang 0.5.23, ")

    second = _rollout(inventory, "cb-2-release-c", RELEASE_C)
    record = second["record"]
    assert record["outcome"] == "ok" and record["gate"] == "pass", record
    assert record["cache"]["key"] == first["cache"]["key"]  # the same volume
    assert record["cache"]["start"] == "cold", record["cache"]
    assert "is cold for this start, with the cold deadline (240 s): built for sglang 0.5.23, " in second["out"]
    assert "not for this start (sglang 0.5.24, " in second["out"]
    assert sorted(b.split("-")[0] for b in _manifest_builds()) == ["sglang0.5.23", "sglang0.5.24"]
