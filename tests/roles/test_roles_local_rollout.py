"""The whole flow on the real docker engine with the local inventory and the project's
TEST ENGINE images (an SGLang-API-compatible fake: its numbers are never SGLang's):

archive with a bad checksum -> stopped before `docker load`; first deploy from the archive ->
gate pass; second run -> changed=0, nothing restarted; bad inventory values -> stopped in
preflight naming the variable, container untouched; a gate failure (release-b with an engine
fault) -> rolled back to the last good image, cache volumes kept; the run after -> changed=0.

Names, port, cache prefix, state and report folders are this test's own, so it cannot touch
another deployment on the same daemon.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from roles_testlib import REPO, Run, ansible_playbook, docker_json, docker_ok

from testengine.harness import free_port

RELEASE_A = "local/sglang-test-engine:release-a"
RELEASE_B = "local/sglang-test-engine:release-b"
RELEASE_C = "local/sglang-test-engine:release-c"  # poses as a release without the DSA guard


def _missing() -> str:
    if not docker_ok():
        return "no docker engine"
    for ref in (RELEASE_A, RELEASE_B, RELEASE_C):
        if docker_json("image", "inspect", ref) is None:
            return f"{ref} missing: build it with `python3 images/build.py test-engine --release all`"
    if not (REPO / "validate" / "gate.py").is_file():
        return "validate/ (the gate) is not there yet"
    return ""


pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(bool(_missing()), reason=_missing() or "ready"),
]


@dataclass
class Env:
    """This test's deployment: its own names and folders, plus helpers to run and inspect it."""

    tmp: Path
    name: str
    port: int
    prefix: str
    tag: str
    archive: Path
    key: str
    base_vars: dict[str, Any] = field(default_factory=dict)
    step: int = 0

    def deploy(self, *args: str, ara: bool = False, **over: Any) -> Run:
        """deploy.yml with this test's variables; ``ara``: with ARA recording on (into tmp/ara)."""
        self.step += 1
        var_file = self.tmp / f"vars-{self.step}.json"
        var_file.write_text(json.dumps({**self.base_vars, "sglang_run_id": f"step{self.step}", **over}))
        env = {"ANSIBLE_CALLBACKS_ENABLED": "sglang_ara", "ARA_BASE_DIR": str(self.tmp / "ara")} if ara else None
        return ansible_playbook("deploy.yml", "-e", f"@{var_file}", *args, env=env)

    def gate_metrics(self) -> str:
        """The gate's node_exporter textfile on the host (this machine)."""
        return (self.tmp / "textfile" / f"sglang_gate_{self.name}.prom").read_text()

    def fleet_metrics(self) -> str:
        """The rollout's node_exporter textfile on the controller."""
        return (self.tmp / "reports" / "metrics" / "sglang_rollout.prom").read_text()

    def ara(self, *args: str) -> Any:
        """``ara ... -f json`` on this test's ARA database (what an operator reads back)."""
        out = subprocess.run(
            [str(Path(sys.executable).parent / "ara"), *args, "-f", "json"],
            env={**os.environ, "ARA_BASE_DIR": str(self.tmp / "ara")}, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return json.loads(out.stdout)

    def container(self) -> dict[str, Any] | None:
        return docker_json("container", "inspect", self.name)

    def volumes(self) -> list[str]:
        out = subprocess.run(
            ["docker", "volume", "ls", "-q", "--filter", f"label=io.sglang-deploy.cache-prefix={self.prefix}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return sorted(out.split())

    def summary(self) -> dict[str, Any]:
        path = self.tmp / "reports" / f"step{self.step}" / "rollout-summary.json"
        return json.loads(path.read_text())

    def health(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as resp:
            return resp.status


def _image_id(ref: str) -> str:
    return docker_json("image", "inspect", ref)["Id"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("rollout")
    uid = f"{os.getpid()}-{secrets.token_hex(2)}"
    e = Env(
        tmp=tmp,
        name=f"sglang-rolestest-{uid}",
        port=free_port(),
        prefix=f"fi-rolestest-{uid}",
        tag=f"local/sglang-test-engine:rolestest-{uid}",
        archive=tmp / "archive",
        key="test-key-" + secrets.token_hex(8),
    )
    # An archive of release-a under a tag that is then removed, so the deploy really loads it.
    subprocess.run(["docker", "tag", RELEASE_A, e.tag], check=True)
    saved = subprocess.run(
        [sys.executable, str(REPO / "images" / "build.py"), "save", e.tag, "--out", str(e.archive)],
        capture_output=True,
        text=True,
        check=True,
    )
    tarball = Path(saved.stdout.strip().splitlines()[-1])
    subprocess.run(["docker", "rmi", e.tag], check=True, capture_output=True)
    e.base_vars = {
        "sglang_image": e.tag,
        "sglang_image_source": "archive",
        "sglang_image_archive_on_host": True,
        "sglang_image_archive_path": str(tarball),
        "sglang_image_probe_container_name": f"{e.name}-probe",
        "sglang_server_container_name": e.name,
        "sglang_server_port": e.port,
        "sglang_server_state_dir": str(tmp / "state"),
        "sglang_server_api_key": e.key,
        "sglang_server_secret_dir": str(tmp / "secrets"),
        # traffic hooks: each call appends "<drain|undrain> <host>" to hooks.log
        "sglang_server_drain_command": [
            "sh",
            "-c",
            'echo "$SGLANG_DEPLOY_HOOK $SGLANG_DEPLOY_HOST" >> "$0"',
            str(tmp / "hooks.log"),
        ],
        "sglang_server_undrain_command": [
            "sh",
            "-c",
            'echo "$SGLANG_DEPLOY_HOOK $SGLANG_DEPLOY_HOST" >> "$0"',
            str(tmp / "hooks.log"),
        ],
        "flashinfer_cache_volume_prefix": e.prefix,
        "sglang_reports_dir": str(tmp / "reports"),
        "sglang_metrics_textfile_dir": str(tmp / "textfile"),
    }
    try:
        yield e
    finally:
        subprocess.run(["docker", "rm", "-f", e.name, f"{e.name}-probe"], capture_output=True, check=False)
        for vol in e.volumes():
            subprocess.run(["docker", "volume", "rm", vol], capture_output=True, check=False)
        subprocess.run(["docker", "rmi", e.tag], capture_output=True, check=False)


def test_bad_checksum_stops_before_load(env: Env) -> None:
    bad = env.tmp / "bad.sha256"
    bad.write_text("0" * 64 + "  whatever.tar\n")
    run = env.deploy(sglang_image_archive_checksum_path=str(bad))
    assert run.rc != 0
    assert "Checksum mismatch" in run.out and "Nothing was loaded" in run.out
    assert docker_json("image", "inspect", env.tag) is None
    assert env.container() is None


def test_stage_tags_narrow_the_run(env: Env) -> None:
    """--tags runs its stage only (preflight and the host record always run): no host
    preparation starts a server, and the image stage delivers the image and nothing after it."""
    run = env.deploy("--tags", "gpu_host")
    assert run.rc == 0, run.out[-4000:]
    assert env.container() is None and env.volumes() == []
    assert "TASK [Deliver the image]" not in run.out and "TASK [Start the server]" not in run.out
    run = env.deploy("--tags", "sglang_image")
    assert run.rc == 0, run.out[-4000:]
    assert _image_id(env.tag) == _image_id(RELEASE_A)  # the archive was loaded
    assert env.container() is None and env.volumes() == []  # no cache, no server, no gate
    assert "TASK [Deliver the image]" in run.out
    assert "TASK [Start the server]" not in run.out and "TASK [Gate the server]" not in run.out
    subprocess.run(["docker", "rmi", env.tag], check=True, capture_output=True)  # the next test loads it again


def test_first_deploy_loads_the_archive_and_passes_the_gate(env: Env, promtool, prom_samples) -> None:
    # The gate next to the server (sglang_gate_location: host, the role's default; the local inventory
    # gates on the controller): a container from the served image, on loopback. It is the group's first
    # gate: it records the reference (answers and accuracy included), which finalize writes on the
    # controller; the later tests of this module gate on the controller against that reference.
    run = env.deploy("-vvv", sglang_gate_location="host")  # verbose on purpose: the key must not show even there
    assert run.rc == 0, run.out[-6000:]
    assert _image_id(env.tag) == _image_id(RELEASE_A)
    c = env.container()
    assert c and c["State"]["Running"] and c["Image"] == _image_id(RELEASE_A)
    assert env.health() == 200
    summary = env.summary()
    host = summary["hosts"][0]
    assert host["gate"] == "pass" and host["outcome"] == "ok" and host["gate_location"] == "host"
    assert host["cache"]["start"] == "cold"
    report = json.loads((Path(host["report_dir"]) / "report.json").read_text())
    assert report["verdict"] == "pass" and report["labels"]["gate_location"] == "host"
    # the first gate of the group recorded the reference, exactly as on the controller
    assert summary["baselines_written"] == ["local"] and host["baseline_written"] == "local"
    assert "Gate references written by this run: local" in run.out
    stored = json.loads((env.tmp / "reports" / "baseline-local.json").read_text())["reference"]
    assert stored["how"] == "first passing gate of the group" and stored["engine"] == "test-engine"
    assert len(stored["answers"]["answers"]) == 8 and stored["answers"] == report["reference_answers"]
    assert stored["accuracy"] == report["accuracy"] and stored["accuracy"]["correct"] == 20
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["baseline.reference"]["measured"] == "recorded" and checks["accuracy.score"]["measured"] == 1.0
    acc = report["phases"]["accuracy"]
    print(f"accuracy phase on the test engine in the local rollout (gate on the host): {acc['seconds']} s")
    assert len(env.volumes()) == 1
    # every JIT cache of the stack lands in the keyed volume; FlashInfer builds for this host's arch only
    cenv = dict(v.split("=", 1) for v in c["Config"]["Env"])
    assert cenv["FLASHINFER_CUDA_ARCH_LIST"] == "12.0a"
    assert cenv["SGLANG_JIT_CACHE_DIR"] == "/root/.cache/flashinfer/sglang/jit"
    assert env.volumes()[0].endswith("-sm120-al12.0a")
    # the gate window's server log was read after the gate and judged with the report
    assert (Path(host["report_dir"]) / "server-gate-window.log").is_file()
    assert [c["name"] for c in report["checks"]].count("logs.crash_signatures") == 1
    # The API key is used (the gate passed through it) but never shown, even at -vvv, or stored.
    assert "/opt/sglang-deploy/launch.py" in run.out  # the -vvv output is really there
    assert env.key not in run.out
    for path in (env.tmp / "reports").rglob("*"):
        assert not path.is_file() or env.key not in path.read_text(errors="replace"), path
    for path in (env.tmp / "state").rglob("*"):
        assert not path.is_file() or env.key not in path.read_text(errors="replace"), path
    # what Prometheus reads: the gate's textfile on the host, the fleet's on the controller
    text = env.gate_metrics()
    assert promtool(text).returncode == 0, promtool(text).stdout
    got = prom_samples(text)
    labels = frozenset({"image": env.tag, "model": "glm-5", "profile": "local", "engine": "test-engine"}.items())
    assert got[("sglang_gate_passed", labels)] == 1 and got[("sglang_gate_failed_checks", labels)] == 0
    want = report["key_metrics"]["total_token_throughput"]
    assert got[("sglang_gate_total_token_throughput_tokens_per_second", labels)] == pytest.approx(want)
    assert got[("sglang_gate_p99_ttft_seconds", labels)] == pytest.approx(report["key_metrics"]["p99_ttft_ms"] / 1000)
    assert got[("sglang_gate_duration_seconds", labels)] == report["duration_s"]
    fleet = prom_samples(env.fleet_metrics())
    assert fleet[("sglang_rollout_last_run_hosts", frozenset({("result", "moved")}))] == 1
    assert fleet[("sglang_rollout_last_run_outcome", frozenset({("outcome", "succeeded")}))] == 1
    assert fleet[("sglang_rollout_last_run_info", frozenset({("run_id", f"step{env.step}"), ("image", env.tag)}))] == 1


def test_the_api_key_reaches_the_server_from_a_root_only_file_and_nowhere_else(env: Env) -> None:
    """Not in docker inspect (env, cmd, entrypoint), not in any process's command line, not in the log."""
    c = env.container()
    assert env.key not in json.dumps(c["Config"]) and env.key not in json.dumps(c["Args"])
    assert c["Config"]["Entrypoint"][:4] == ["python3", "/opt/sglang-deploy/launch.py", "--api-key-file",
                                             "/run/secrets/sglang-api-key"]  # fmt: skip
    key_file = env.tmp / "secrets" / "api-key"
    assert key_file.read_text().strip() == env.key and (key_file.stat().st_mode & 0o777) == 0o400
    cmdlines = subprocess.run(
        ["docker", "exec", env.name, "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "launch.py" in cmdlines and env.key not in cmdlines
    logs = subprocess.run(["docker", "logs", env.name], capture_output=True, text=True, check=True)
    assert env.key not in logs.stdout + logs.stderr
    # and the server really holds it: a request without the key is refused, with it answered
    url = f"http://127.0.0.1:{env.port}/v1/models"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=5)
    assert refused.value.code == 401
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {env.key}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def test_second_run_changes_and_restarts_nothing(env: Env) -> None:
    before = env.container()
    run = env.deploy()
    assert run.rc == 0, run.out[-6000:]
    assert run.changed() == 0, run.out[-6000:]
    after = env.container()
    assert after["Id"] == before["Id"]
    assert after["State"]["StartedAt"] == before["State"]["StartedAt"]
    host = env.summary()["hosts"][0]
    assert host["gate"] == "skipped" and host["cache"]["start"] == "warm"


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"sglang_server_kv_cache_dtype": "fp9"}, "sglang_server_kv_cache_dtype must be one of: auto, fp8_e4m3"),
        ({"sglang_server_tp_size": 3}, "sglang_server_tp_size=3 must divide sglang_gpu_count=8"),
        ({"sglang_server_port": 70000}, "sglang_server_port must be in 1..65535"),
        ({"sglang_gate_baseline_group": ""}, "sglang_gate_baseline_group must name the hosts one speed reference"),
        ({"sglang_server_bind_address": "0.0.0.0", "sglang_server_api_key": ""},
         "the server would answer on every address"),
        # the gate's own loader, in preflight: before the canary's server is replaced
        ({"sglang_gate_config": {"deadline_s": 600, "throughput": {"num_prompts": -3}}},
         "sglang_gate_config is refused by the gate's loader (validate/README.md lists every setting): "
         "gate-config-1.json: gate config: throughput.num_prompts: must be a whole number > 0"),
    ],
)  # fmt: skip
def test_bad_value_stops_in_preflight_with_nothing_changed(env: Env, over: dict, needle: str) -> None:
    before = env.container()
    run = env.deploy(**over)
    assert run.rc != 0
    assert needle in run.out
    assert "PLAY [Roll out host by host" not in run.out
    assert run.changed() == 0
    after = env.container()
    assert after["Id"] == before["Id"] and after["State"]["StartedAt"] == before["State"]["StartedAt"]


def test_gate_failure_rolls_back_and_keeps_the_caches(env: Env, prom_samples) -> None:
    good_volume = env.volumes()
    run = env.deploy(
        ara=True,
        sglang_image=RELEASE_B,
        sglang_image_source="local",
        sglang_test_engine_env={"TEST_ENGINE_FAULT": "crash_above:8", "TEST_ENGINE_COLD_START_S": "1"},
    )
    assert run.rc != 0
    assert "Gate FAILED" in run.out and f"Rolled back to {env.tag}" in run.out
    c = env.container()
    assert c["State"]["Running"] and c["Image"] == _image_id(RELEASE_A)
    assert not any(v.startswith("TEST_ENGINE_FAULT=") for v in c["Config"]["Env"])
    assert env.health() == 200
    volumes = env.volumes()
    assert set(good_volume) < set(volumes) and len(volumes) == 2  # old key kept, new key kept
    summary = env.summary()
    host = summary["hosts"][0]
    assert host["rolled_back"] is True and host["outcome"] == "failed"
    assert host["image_after"] == env.tag and host["image_target"] == RELEASE_B
    assert host["messages"], host
    assert summary["rolled_back"] == ["localhost"]
    assert env.key not in run.out
    # drained before the replacement; back in rotation once the last good config answered /health,
    # and the summary and the fleet state file say so (no host out of rotation)
    assert _hooks(env)[-2:] == ["drain localhost", "undrain localhost"]
    assert not (env.tmp / "state" / f"{env.name}.drained.json").exists()
    assert host["in_rotation"] == "yes" and summary["out_of_rotation"] == {}, summary
    assert _fleet(env)["drained"] is False and _fleet(env)["run_id"] == f"step{env.step}"
    # Prometheus sees the failed gate (its checks) on the host, and the rollback on the controller
    got = prom_samples(env.gate_metrics())
    labels = {"image": RELEASE_B, "model": "glm-5", "profile": "local", "engine": "test-engine"}
    assert got[("sglang_gate_passed", frozenset(labels.items()))] == 0
    failed = {dict(k[1])["check"] for k, v in got.items() if k[0] == "sglang_gate_check_passed" and v == 0}
    assert failed == set(host["failed_checks"]) and failed, (failed, host["failed_checks"])
    fleet = prom_samples(env.fleet_metrics())
    assert fleet[("sglang_rollout_last_run_hosts", frozenset({("result", "rolled_back")}))] == 1
    assert fleet[("sglang_rollout_last_run_outcome", frozenset({("outcome", "failed")}))] == 1
    # ARA (on for this run only: recording costs seconds per task result) has the run, every result
    # posted (none refused), and the host's verdict as a record
    assert "ERROR ara" not in run.out and "Failed to post" not in run.out, run.out[-3000:]
    playbooks = env.ara("playbook", "list")
    assert [(p["status"], p["path"].endswith("deploy.yml")) for p in playbooks] == [("failed", True)]
    records = env.ara("record", "list", "--playbook", str(playbooks[0]["id"]))
    record = env.ara("record", "show", str(records[0]["id"]))
    assert len(records) == 1 and record["key"] == "gate localhost", records
    assert record["value"]["verdict"] == "fail" and record["value"]["rolled_back"] is True, record
    assert record["value"]["failed_checks"] == host["failed_checks"] and record["value"]["image"] == RELEASE_B


def test_server_that_never_gets_ready_is_rolled_back(env: Env) -> None:
    run = env.deploy(
        sglang_image=RELEASE_B,
        sglang_image_source="local",
        sglang_server_ready_timeout_s=6,
        sglang_test_engine_env={"TEST_ENGINE_STARTUP_DELAY_S": "120"},
    )
    assert run.rc != 0
    assert "did not answer" in run.out and "within 6 s" in run.out
    c = env.container()
    assert c["State"]["Running"] and c["Image"] == _image_id(RELEASE_A)
    host = env.summary()["hosts"][0]
    assert host["gate"] == "not-ready" and host["rolled_back"] is True
    assert len(env.volumes()) == 2


def test_crash_looping_server_fails_the_wait_at_once_and_is_rolled_back(env: Env) -> None:
    """A container that exits and restarts fails readiness within seconds, with its log, not after the deadline."""
    t0 = time.monotonic()
    run = env.deploy(
        sglang_image=RELEASE_B,
        sglang_image_source="local",
        sglang_server_ready_timeout_s=600,
        sglang_test_engine_env={"TEST_ENGINE_PREFILL_TOK_S": "-1"},  # the engine refuses it and exits 2
    )
    took = time.monotonic() - t0
    assert run.rc != 0
    assert "while waiting for /health" in run.out and ("restart" in run.out or "exited" in run.out)
    assert "--engine-prefill-tok-s: must be > 0" in run.out  # the container's own last words
    assert took < 300, took  # far inside the 600 s deadline (the rollback and its health check included)
    c = env.container()
    assert c["State"]["Running"] and c["Image"] == _image_id(RELEASE_A)
    summary = env.summary()
    host = summary["hosts"][0]
    assert host["gate"] == "not-ready" and host["rolled_back"] is True
    # a server start that failed after the drain: back in rotation on the last good config
    assert _hooks(env)[-2:] == ["drain localhost", "undrain localhost"]
    assert not (env.tmp / "state" / f"{env.name}.drained.json").exists()
    assert host["in_rotation"] == "yes" and summary["out_of_rotation"] == {}, summary
    assert _fleet(env)["drained"] is False and _fleet(env)["run_id"] == f"step{env.step}"


def test_a_failed_drain_hook_fails_the_host_and_leaves_its_server_alone(env: Env) -> None:
    """The load balancer refused the drain: the host may still take traffic, so its server is neither
    replaced nor "rolled back" (recreated); the failure says what the hook printed."""
    before = env.container()
    run = env.deploy(
        sglang_image=RELEASE_B,
        sglang_image_source="local",
        sglang_server_drain_command=["sh", "-c", "echo 'lb1: no such server sglang/localhost' >&2; exit 3"],
    )
    assert run.rc != 0
    flat = " ".join(run.out.split())
    said = "The drain hook (sh, run on the controller) exited 3 for localhost: lb1: no such server sglang/localhost"
    assert said in flat
    assert "Nothing was stopped or replaced on the host" in flat
    after = env.container()
    assert (after["Id"], after["State"]["StartedAt"]) == (before["Id"], before["State"]["StartedAt"])
    assert env.health() == 200
    host = env.summary()["hosts"][0]
    assert (host["outcome"], host["rolled_back"], host["gate"]) == ("failed", False, "not run")
    assert "exited 3" in host["failure"] and host["image_after"] == host["image_before"]


def _fleet(env: Env) -> dict[str, Any]:
    """This host's entry in the fleet state file (rolloutreport/state.py)."""
    return json.loads((env.tmp / "reports" / "fleet-state.json").read_text())["hosts"]["localhost"]


def _hooks(env: Env) -> list[str]:
    path = env.tmp / "hooks.log"
    return path.read_text().splitlines() if path.exists() else []


def test_run_after_an_interrupted_one_puts_the_drained_host_back_then_changes_nothing(env: Env) -> None:
    """The rollbacks above put the host back once its last good config answered (last hook: undrain).
    A run killed after its drain hook leaves the host drained, and says so on the host: that record is
    written here as the drain (roles/sglang_server/tasks/hook.yml) writes it. The next run finds the host
    serving its last good config, healthy, and puts it back; the server is not touched; the run after
    that has nothing to do."""
    marker = env.tmp / "state" / f"{env.name}.drained.json"
    assert _hooks(env)[-1] == "undrain localhost" and not marker.exists()
    marker.write_text(
        json.dumps(
            {
                "host": "localhost",
                "run_id": "step-killed",
                "drained_at": "2026-12-06T03:00:00Z",
                "reason": "its server is replaced (the container spec changed)",
            }
        )
    )
    before = env.container()
    run = env.deploy()
    assert run.rc == 0, run.out[-6000:]
    assert _hooks(env)[-1] == "undrain localhost" and not marker.exists()
    assert env.container()["Id"] == before["Id"]
    assert env.container()["State"]["StartedAt"] == before["State"]["StartedAt"]
    summary = env.summary()
    assert summary["put_back"] == ["localhost"]
    assert summary["hosts"][0]["put_back"].startswith("drained since run step-killed, serving its last good config")
    assert "put back in rotation: 1" in run.out
    again = env.deploy()
    assert again.rc == 0 and again.changed() == 0, again.out[-6000:]
    assert _hooks(env)[-1] == "undrain localhost" and env.summary()["put_back"] == []


def test_upgrade_without_guard_disables_chunked_prefix_cache_and_prunes_old_caches(env: Env) -> None:
    volumes_before = env.volumes()  # release-a (last good) and release-b (failed attempts)
    run = env.deploy(sglang_image=RELEASE_C, sglang_image_source="local")
    assert run.rc == 0, run.out[-6000:]
    c = env.container()
    assert c["Image"] == _image_id(RELEASE_C)
    # the fallback that avoids the FP8 DSA crash; the radix cache stays on
    assert "--disable-chunked-prefix-cache" in c["Config"]["Cmd"] and "--disable-radix-cache" not in c["Config"]["Cmd"]
    assert "dsa-fp8-page-table-guard is absent" in run.out
    volumes = env.volumes()
    # Kept: the new key (release-c shares release-b's FlashInfer, so the volume its failed attempts made)
    # and the previous release's (the rollback target); nothing else.
    assert sorted(volumes) == sorted(volumes_before) and len(volumes) == 2
    summary = env.summary()
    host = summary["hosts"][0]
    assert host["gate"] == "pass" and host["image_before"] == env.tag and host["image_after"] == RELEASE_C
    # gated on the controller against the reference the first deploy's gate recorded on the host
    report = json.loads((Path(host["report_dir"]) / "report.json").read_text())
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["baseline.reference"]["measured"] == "compared" and checks["answers.reference"]["measured"] == 0.0
    assert checks["accuracy.reference"]["measured"] == 0.0 and summary["baselines_written"] == []


def test_host_maintenance_waits_for_the_drain_and_the_gate_puts_the_host_back(env: Env) -> None:
    """A dockerd restart left pending on the host (gpu_host writes the record: log settings dockerd reads
    only at start), its server unchanged: --check says what a real run would interrupt and does nothing; the real run
    drains first, restarts, gates the same container again and only then undrains."""
    restart = [
        "sh",
        "-c",
        'echo docker-restart >> "$0" && docker restart "$1" >/dev/null',
        str(env.tmp / "hooks.log"),
        env.name,
    ]
    record = env.tmp / "state" / "docker-restart-pending.json"
    record.write_text(json.dumps({"settings": ["log-opts"], "daemon_json": "/etc/docker/daemon.json"}))
    # what runs now (the upgrade above): the server is unchanged, only the host's maintenance is due
    pending = {"gpu_host_docker_restart_command": restart, "sglang_image": RELEASE_C, "sglang_image_source": "local"}
    before, seen = env.container(), len(_hooks(env))
    check = env.deploy("--check", "--diff", **pending)
    assert check.rc == 0, check.out[-6000:]
    flat = " ".join(check.out.split())
    assert "Check mode: a real run drains localhost (hook, then " in flat, flat[-4000:]
    assert "because host maintenance: dockerd restart (log-opts changed)" in flat
    assert _hooks(env)[seen:] == [] and env.container()["State"]["StartedAt"] == before["State"]["StartedAt"]

    run = env.deploy(**pending)
    assert run.rc == 0, run.out[-6000:]
    assert _hooks(env)[seen:] == ["drain localhost", "docker-restart", "undrain localhost"]
    after = env.container()
    assert after["Id"] == before["Id"] and after["State"]["StartedAt"] != before["State"]["StartedAt"]
    assert env.summary()["hosts"][0]["gate"] == "pass"
    assert "the server was interrupted: host maintenance: dockerd restart (log-opts changed)" in " ".join(
        run.out.split()
    )
    assert not (env.tmp / "state" / f"{env.name}.drained.json").exists()
    assert not record.exists()  # done: the next run has no maintenance
    again = env.deploy(**pending)
    assert again.rc == 0 and again.changed() == 0, again.out[-6000:]
    assert _hooks(env)[seen:] == ["drain localhost", "docker-restart", "undrain localhost"]


def _cache_volume(env: Env) -> str:
    mounts = env.container()["Mounts"]
    return next(m["Name"] for m in mounts if m.get("Type") == "volume" and m["Name"].startswith(env.prefix))


def _fresh_host(env: Env) -> None:
    """What a new host of the same GPU profile looks like to the roles: no server, no cache volume."""
    vol = _cache_volume(env)
    subprocess.run(["docker", "rm", "-f", env.name], check=True, capture_output=True)
    subprocess.run(["docker", "volume", "rm", vol], check=True, capture_output=True)


def test_a_cold_volume_is_seeded_from_the_archive_the_first_passing_host_left(env: Env) -> None:
    """One cold start per fleet: each cache key's first gate pass left its archive and checksum on the
    controller (release-a's and, after the upgrade, release-c's; release-b never passed). A host whose
    volume for the key is cold gets it seeded before its server starts: the start is "seeded", the test
    engine finds its cache warm, the gate passes. A damaged archive is refused: nothing is written,
    that start is cold and the record says why."""
    archives = env.tmp / "reports" / "cache-archives"
    tars = sorted(archives.glob("*.tar.gz"))
    assert len(tars) == 2 and all(Path(f"{t}.sha256").is_file() for t in tars), sorted(archives.iterdir())
    _fresh_host(env)
    run = env.deploy()
    assert run.rc == 0, run.out[-6000:]
    host = env.summary()["hosts"][0]
    assert host["cache"]["start"] == "seeded" and host["cache"]["seeded"].endswith(" modules"), host["cache"]
    assert host["gate"] == "pass" and host["cache"]["seed_refused"] == ""
    logs = subprocess.run(["docker", "logs", env.name], capture_output=True, text=True, check=True)
    assert "flashinfer cache: warm" in logs.stdout + logs.stderr

    # a damaged archive (one byte changed): refused inside the helper, the host starts cold
    current = archives / (host["cache"]["seeded"].split()[1].rstrip(","))
    good = env.tmp / "good-seed"
    good.mkdir()
    for f in (current, Path(f"{current}.sha256")):
        shutil.copy2(f, good / f.name)
    data = bytearray(current.read_bytes())
    data[len(data) // 2] ^= 0xFF
    current.write_bytes(bytes(data))
    _fresh_host(env)
    run = env.deploy()
    assert run.rc == 0, run.out[-6000:]
    host = env.summary()["hosts"][0]
    assert host["cache"]["start"] == "cold" and host["cache"]["seeded"] == ""
    assert (
        "does not match --sha256" in host["cache"]["seed_refused"]
        and "damaged, not seeded" in host["cache"]["seed_refused"]
    )
    assert host["gate"] == "pass"

    # The image can carry the seed (images/build.py seed, for fleets whose controller has no archive:
    # the warm-up ran once, on one GPU host). A damaged archive never reaches an image.
    build = [sys.executable, str(REPO / "images" / "build.py"), "seed", host["image_target"]]
    refused = subprocess.run(
        [*build, "--archive", str(current), "--tag", f"{env.tag}-x"], capture_output=True, text=True
    )
    assert refused.returncode == 1 and f"does not match {current}.sha256" in refused.stderr, refused.stderr[-2000:]
    seeded_tag = f"{env.tag}-fiseed"
    baked = subprocess.run(
        [*build, "--archive", str(good / current.name), "--tag", seeded_tag], capture_output=True, text=True
    )
    assert baked.returncode == 0, baked.stderr[-3000:]
    try:
        shutil.rmtree(archives)  # no archive of any key on the controller now
        _fresh_host(env)
        run = env.deploy(sglang_image=seeded_tag, sglang_image_source="local")
        assert run.rc == 0, run.out[-6000:]
        host = env.summary()["hosts"][0]
        assert host["cache"]["start"] == "seeded" and host["gate"] == "pass", host
        assert re.fullmatch(
            rf"from the image \({re.escape(current.name)}\), [1-9][0-9]* modules", host["cache"]["seeded"]
        )
        logs = subprocess.run(["docker", "logs", env.name], capture_output=True, text=True, check=True)
        assert "flashinfer cache: warm" in logs.stdout + logs.stderr
    finally:
        subprocess.run(["docker", "rm", "-f", env.name], capture_output=True, check=False)
        subprocess.run(["docker", "rmi", seeded_tag], capture_output=True, check=False)
