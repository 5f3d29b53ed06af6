"""No capacity stranded after a drain: every failure once a run drained a host ends with its last good
config serving and the host back in rotation, or the host left drained ON PURPOSE with the reason in
the summary and the fleet state file; and a host an earlier run left drained goes back right after
the next run's preflight, before the canary play changes anything.

Real `ansible-playbook deploy.yml` over ONE SSH test host (testengine.ssh_fleet: a loopback address
of an sshd container of the molecule host image, reached with `become` through sudo and the
project's ansible.cfg) whose server is the TEST ENGINE, an SGLang-API-compatible stand-in: no GPU
here. Its containers run on this machine's Docker daemon; the test's folders (state, hooks log,
reports) are shared at the same path, so the test reads what the host wrote. It is deployed once
(release-a, gates off: its config becomes the last good one without a gate, to keep the file
short), then each failure point is injected in turn as a deploy of release-b:

- left drained on purpose: no last good record on the host, the dockerd restart fails;
- render: a setting release-b (posing as SGLang 0.5.23) has no flag for (--stream-output); this
  run first puts back the host the run before left drained, right after preflight;
- cache: the cache key's CUDA version unknown (flashinfer_cache_cuda_version "");
- dockerd restart: the restart command (gpu_host_docker_restart_command, the stand-in for the
  service restart) fails;
- all-reduce: the measurement's stand-in (gpu_host_allreduce_command: the real one needs GPUs and
  sglang_engine sglang) reports a failed measurement; the server was stopped for it;
- server start: release-b's container exits at start (the engine refuses a setting);
- gate: a host lost at its gate, whose gate fails when the next run's repair play finishes it.

tests/roles/test_roles_local_rollout.py checks the start and gate failures on the local connection
too (a server never ready, one dying under the gate's load, the caches kept).

The render and cache failures come after the drain only when host maintenance drained the host
first (a pending dockerd restart, here a harmless stand-in command): that is when they stranded it.
The hooks append "<drain|undrain> <host>" to a log, the drain also leaves the role's marker on the
host (<state dir>/<container>.drained.json): both must say "in rotation" after each failure.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from roles_testlib import deploy, docker_json, docker_ok, recorded_nvidia_smi, remove_test_fleet

from testengine import ssh_fleet
from testengine.harness import free_port
from testengine.local_fleet import short_gate_config, write_inventory

RELEASE_A = "local/sglang-test-engine:release-a"
RELEASE_B = "local/sglang-test-engine:release-b"
HOST = "drain-h1"
PREFIX = "drain"  # containers drain-sglang-<host>, volumes drain-fic-<host>-* (remove_test_fleet)
SSHD = "drain-sshd"  # the sshd container of the SSH test host


def _missing() -> str:
    if not docker_ok():
        return "no docker engine"
    for ref in (RELEASE_A, RELEASE_B):
        if docker_json("image", "inspect", ref) is None:
            return f"{ref} missing: build it with `python3 images/build.py test-engine --release all`"
    return ""


pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.skipif(bool(_missing()), reason=_missing() or "ok")]


@dataclass
class Host:
    """The one host of this module and its deploys (run ids step1, step2, ...)."""

    tmp: Path
    inventory: Path
    port: int
    ssh_port: int
    step: int = 0
    saved_last_good: str = ""

    @property
    def name(self) -> str:
        return f"{PREFIX}-sglang-{HOST}"

    @property
    def state_dir(self) -> Path:
        return self.tmp / "state"

    def deploy(self, **extra: Any) -> tuple[str, subprocess.CompletedProcess[str]]:
        self.step += 1
        run_id = f"step{self.step}"
        var_file = self.tmp / f"vars-{self.step}.json"
        var_file.write_text(json.dumps(extra))
        t0 = time.monotonic()
        run = deploy(self.inventory, run_id, "-e", f"@{var_file}")
        print(f"{run_id} ({sorted(extra)}): {time.monotonic() - t0:.1f} s, rc {run.returncode}")
        return run_id, run

    def hooks(self) -> list[str]:
        path = self.tmp / "hooks.log"
        return path.read_text().splitlines() if path.exists() else []

    def container(self) -> dict[str, Any]:
        return docker_json("container", "inspect", self.name)

    def last_good(self) -> dict[str, Any]:
        return json.loads((self.state_dir / f"{self.name}.last-good.json").read_text())

    def marker(self) -> Path:
        return self.state_dir / f"{self.name}.drained.json"

    def summary(self, run_id: str) -> dict[str, Any]:
        return json.loads((self.tmp / "reports" / run_id / "rollout-summary.json").read_text())

    def fleet(self) -> dict[str, Any]:
        return json.loads((self.tmp / "reports" / "fleet-state.json").read_text())["hosts"][HOST]

    def health(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as resp:
            return resp.status

    def restart_pending(self) -> None:
        """What gpu_host leaves on a host whose dockerd must restart (daemon.yml): host maintenance."""
        record = self.state_dir / "docker-restart-pending.json"
        record.write_text(json.dumps({"settings": ["log-opts"], "daemon_json": "/etc/docker/daemon.json"}))


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    tmp = tmp_path_factory.mktemp("drain")
    hook = ["sh", "-c", 'echo "$SGLANG_DEPLOY_HOOK $SGLANG_DEPLOY_HOST" >> "$0"', str(tmp / "hooks.log")]
    port, ssh_port = free_port(), free_port()
    hosts = {
        HOST: {
            **ssh_fleet.host_vars(1, ssh_port),
            "sglang_server_port": port,
            "sglang_server_container_name": f"{PREFIX}-sglang-{HOST}",
            "flashinfer_cache_volume_prefix": f"{PREFIX}-fic-{HOST}",
            "sglang_image_probe_container_name": f"{PREFIX}-probe-{HOST}",
            "sglang_server_state_dir": str(tmp / "state"),
        }
    }
    inv = write_inventory(
        tmp / "inventory", hosts, [1],
        sglang_reports_dir=str(tmp / "reports"), sglang_gate_config=short_gate_config(baseline={"tolerance": 0.5}),
        sglang_server_drain_command=hook, sglang_server_undrain_command=hook, sglang_server_drain_wait_s=0,
        sglang_metrics_textfile_dir=str(tmp / "textfile"),
    )  # fmt: skip
    remove_test_fleet([HOST], PREFIX)
    h = Host(tmp=tmp, inventory=inv, port=port, ssh_port=ssh_port)
    # every folder of this session's tests (the module's, each test's tmp_path) at the same path on the host
    try:
        with ssh_fleet.loopback_sshd(SSHD, ssh_port, shared=[tmp_path_factory.getbasetemp()]):
            run_id, run = h.deploy(sglang_gate_enabled=False)  # the first deploy: release-a, the last good config
            assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
            assert h.summary(run_id)["hosts"][0]["outcome"] == "ok" and h.last_good()["image_ref"] == RELEASE_A
            yield h
    finally:
        remove_test_fleet([HOST], PREFIX)
        subprocess.run(["docker", "rm", "-f", f"{PREFIX}-probe-{HOST}"], capture_output=True, check=False)


def _back_on_last_good(
    h: Host, run_id: str, run: subprocess.CompletedProcess[str], seen: int, hooks: list[str]
) -> dict[str, Any]:
    """The failed host serves its last good config (release-a), the traffic hooks ran as ``hooks``
    (ending in the undrain), and its record, the summary and the fleet state say it is in rotation.
    Returns its record."""
    log = run.stdout + run.stderr
    assert run.returncode != 0, log[-5000:]
    c, good = h.container(), h.last_good()
    assert c["State"]["Running"], c["State"]
    assert (c["Image"], c["Config"]["Cmd"]) == (good["image_id"], good["command"])
    assert good["image_ref"] == RELEASE_A and c["Image"] == docker_json("image", "inspect", RELEASE_A)["Id"]
    assert h.health() == 200
    assert h.hooks()[seen:] == hooks
    assert not h.marker().exists()
    summary = h.summary(run_id)
    record = summary["hosts"][0]
    assert (record["outcome"], record["rolled_back"], record["image_after"]) == ("failed", True, RELEASE_A), record
    assert record["in_rotation"] == "yes" and summary["out_of_rotation"] == {}, summary
    assert summary["rolled_back"] == [HOST] and summary["failed"] == [HOST]
    assert "Rolled back to local/sglang-test-engine:release-a (healthy again)." in " ".join(log.split())
    fleet = h.fleet()
    assert (fleet["run_id"], fleet["drained"], fleet["pending_repair"]) == (run_id, False, False), fleet
    return record


RESTART_OK = ["sh", "-c", 'echo docker-restart >> "$0"']  # + the hooks log: the stand-in of a dockerd restart


def test_without_a_last_good_config_the_host_stays_drained_on_purpose(host: Host) -> None:
    """No last good record: nothing to go back to, so the dockerd failure leaves the host drained, ON
    PURPOSE, and the failure, the summary and the fleet state say why and who drained it. The run
    stopped there. The record comes back after (the server it ran all along is that config): the
    next test's run puts the host back first."""
    seen = len(host.hooks())
    good = host.state_dir / f"{host.name}.last-good.json"
    host.saved_last_good = good.read_text()
    good.unlink()
    host.restart_pending()
    run_id, run = host.deploy(
        sglang_image=RELEASE_B, gpu_host_docker_restart_command=["sh", "-c", "echo 'no dockerd' >&2; exit 7"]
    )
    log = run.stdout + run.stderr
    assert run.returncode != 0, log[-5000:]
    assert host.hooks()[seen:] == [f"drain {HOST}"] and host.marker().exists()
    assert host.container()["State"]["Running"]  # the server it ran is not this run's to stop
    summary = host.summary(run_id)
    record = summary["hosts"][0]
    why = summary["out_of_rotation"][HOST]["why"]
    assert summary["out_of_rotation"][HOST]["by"] == "this run" and summary["left_drained"] == [HOST]
    assert why == (
        "left out of rotation on purpose: no last good config on this host to go back to "
        "(drained for: host maintenance: dockerd restart (log-opts changed))"
    ), why
    assert (record["in_rotation"], record["rolled_back"], record["drained_why"]) == ("no", False, why)
    fleet = host.fleet()
    assert (fleet["drained"], fleet["drained_why"], fleet["drained_by"]) == (True, why, run_id), fleet
    said = " ".join(log.split())
    assert "exited 7: no dockerd" in said and "nothing to go back to" in said, log[-5000:]
    assert "The host stays OUT OF ROTATION: no last good config on this host to go back to." in said
    md = (host.tmp / "reports" / run_id / "rollout-summary.md").read_text()
    assert f"**out of rotation at the end** (whoever drained it): {HOST} (drained by this run: {why})" in md, md
    good.write_text(host.saved_last_good)


def test_the_next_run_puts_the_drained_host_back_first_then_a_render_error_rolls_back(host: Host) -> None:
    """The host the stopped run left drained serves its last good config, healthy: the next run puts it
    back right after preflight, before the canary play (which drains it again for its maintenance).
    Then a setting release-b has no flag for fails the render, after that drain: rolled back (the
    last good config keeps serving) and undrained."""
    seen = len(host.hooks())
    before = host.container()
    host.restart_pending()
    run_id, run = host.deploy(
        sglang_image=RELEASE_B, gpu_host_docker_restart_command=[*RESTART_OK, str(host.tmp / "hooks.log")],
        sglang_server_extra_args=["--stream-output"],
    )  # fmt: skip
    log = run.stdout + run.stderr
    back = [f"undrain {HOST}", f"drain {HOST}", "docker-restart", f"undrain {HOST}"]
    record = _back_on_last_good(host, run_id, run, seen, back)
    # the put-back ran in its own play, after preflight and before the canary play
    put_back = log.index("PLAY [Put back the hosts an earlier run left out of rotation]")
    undrain = log.index("TASK [sglang_server : Run the traffic hook command (undrain)]")
    canaries = log.index("PLAY [Canaries - one host of each GPU profile, before any wave]")
    assert log.index("PLAY [Preflight - check every host before any host changes]") < put_back < undrain < canaries
    assert host.container()["Id"] == before["Id"]  # recreated from the same config: the same container
    assert record["put_back"].startswith(f"drained since run step{host.step - 1}, serving its last good config")
    assert host.summary(run_id)["put_back"] == [HOST] and host.fleet()["put_back_run"] == run_id
    assert record["failed_task"] == "Stop on settings that do not fit this image", record
    assert "SGLang 0.5.23 has no flag --stream-output" in " ".join(record["messages"]), record
    assert record["gate"] == "not run"


def test_a_cache_error_after_the_maintenance_drain_rolls_back_and_undrains(host: Host) -> None:
    seen = len(host.hooks())
    host.restart_pending()
    run_id, run = host.deploy(
        sglang_image=RELEASE_B, gpu_host_docker_restart_command=[*RESTART_OK, str(host.tmp / "hooks.log")],
        flashinfer_cache_cuda_version="",
    )  # fmt: skip
    record = _back_on_last_good(host, run_id, run, seen, [f"drain {HOST}", "docker-restart", f"undrain {HOST}"])
    assert record["failed_task"] == "Check the key parts are known", record
    assert "The FlashInfer cache key of drain-h1 is incomplete" in " ".join(record["messages"]), record
    assert host.summary(run_id)["put_back"] == []


def test_a_failed_dockerd_restart_rolls_back_and_undrains(host: Host) -> None:
    seen = len(host.hooks())
    host.restart_pending()
    broken = ["sh", "-c", "echo 'dockerd: failed to start daemon' >&2; exit 7"]
    run_id, run = host.deploy(sglang_image=RELEASE_B, gpu_host_docker_restart_command=broken)
    record = _back_on_last_good(host, run_id, run, seen, [f"drain {HOST}", f"undrain {HOST}"])
    assert record["failed_task"] == "Stop when the dockerd restart command failed", record
    assert "exited 7: dockerd: failed to start daemon" in " ".join(record["messages"]), record
    (host.state_dir / "docker-restart-pending.json").unlink()  # left pending: the next test has no restart


def test_a_failed_allreduce_check_restarts_the_stopped_server_and_undrains(host: Host, tmp_path: Path) -> None:
    """The all-reduce needs the GPUs: its server is stopped after the drain. The measurement itself
    needs GPUs and sglang_engine sglang, so a documented stand-in command (gpu_host_allreduce_command)
    reports the failed measurement; nvidia-smi (asked whether it is due) answers from a recording."""
    seen, before = len(host.hooks()), host.container()["State"]["StartedAt"]
    failed = '{"result": "failed", "reason": "stand-in: NCCL timeout after 300 s"}'
    run_id, run = host.deploy(
        sglang_image=RELEASE_B, gpu_host_allreduce_command=["echo", failed], gpu_host_allreduce_force=True,
        gpu_host_nvidia_smi=str(recorded_nvidia_smi(tmp_path)),
    )  # fmt: skip
    record = _back_on_last_good(host, run_id, run, seen, [f"drain {HOST}", f"undrain {HOST}"])
    assert host.container()["State"]["StartedAt"] != before  # stopped for the check, started again
    assert record["failed_task"] == "Stop when the interconnect is slower than the GPU profile's floor", record
    assert "stand-in: NCCL timeout after 300 s" in " ".join(record["messages"]), record


def test_a_server_that_fails_to_start_after_the_drain_is_rolled_back_and_undrained(host: Host) -> None:
    """release-b's server exits at start (the engine refuses a setting), after the host was drained and
    release-a's server stopped: the readiness wait fails at once with the container's last words, and
    release-a serves again, back in rotation."""
    seen = len(host.hooks())
    run_id, run = host.deploy(
        sglang_image=RELEASE_B, sglang_test_engine_env={"TEST_ENGINE_PREFILL_TOK_S": "-1"},
    )  # fmt: skip
    record = _back_on_last_good(host, run_id, run, seen, [f"drain {HOST}", f"undrain {HOST}"])
    assert record["gate"] == "not-ready", record
    assert "--engine-prefill-tok-s: must be > 0" in run.stdout + run.stderr  # the container's own last words


def test_a_host_lost_after_its_drain_is_rolled_back_in_the_next_runs_repair_play_and_put_back(host: Host) -> None:
    """The host goes silent at its gate (drained, release-b started: from that stage on, its SSH port is
    one nobody answers on), so the run records it unreachable, pending repair, drained. The next run's put-back
    leaves it drained (pending repair is the repair play's), the repair play finishes it with the
    unfinished run's image: release-b fails its gate (the engine crashes under load), so it is rolled
    back to its last good config AND put back in rotation; the run ends there (its only host failed)."""
    seen = len(host.hooks())
    fault = {"sglang_test_engine_env": {"TEST_ENGINE_FAULT": "crash_above:8", "TEST_ENGINE_COLD_START_S": "1"}}
    host_vars = host.inventory / "host_vars" / f"{HOST}.yml"
    host_vars.parent.mkdir(exist_ok=True)
    at_gate = "(sglang_rollout_stage | default('')) == 'gate'"
    host_vars.write_text(yaml.safe_dump(ssh_fleet.lost_from(at_gate, host.ssh_port)))
    try:
        lost_id, lost = host.deploy(sglang_image=RELEASE_B, **fault)
    finally:
        host_vars.unlink()
    log = lost.stdout + lost.stderr
    assert lost.returncode != 0, log[-5000:]
    assert host.summary(lost_id)["unreachable"] == [HOST], host.summary(lost_id)
    assert host.hooks()[seen:] == [f"drain {HOST}"] and host.marker().exists()
    fleet = host.fleet()
    assert (fleet["pending_repair"], fleet["stage"], fleet["drained"]) == (True, "gate", True), fleet
    assert host.container()["Image"] == docker_json("image", "inspect", RELEASE_B)["Id"]  # release-b serves, drained

    run_id, run = host.deploy(sglang_image=RELEASE_B, **fault)
    log = run.stdout + run.stderr
    record = _back_on_last_good(host, run_id, run, seen, [f"drain {HOST}", f"undrain {HOST}"])
    assert record["gate"] == "fail" and record["put_back"] == "", record
    said = " ".join(log.split())
    assert f"{HOST} stays out of rotation (drained since run {lost_id}): it is pending repair" in said, log[-5000:]
    repair = log.index("PLAY [Finish the hosts the last rollout left unreachable]")
    undrain = log.index("TASK [Put the rolled-back host back in the load balancer (undrain)]", repair)
    assert repair < log.index("Gate FAILED", repair) < undrain
    assert "PLAY [Canaries" not in log  # the failed repair ends the run (its only host failed)
