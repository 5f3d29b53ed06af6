"""A host that goes silent mid-rollout (its processes frozen, its kernel still answering TCP) is
UNREACHABLE within 2 minutes, recorded pending with its stage, and finished first next time.

Real SSH test hosts: three containers of the molecule instance image (sshd as PID 1, user
`deploy` with sudo; molecule/resources/build-instance.sh) on a docker network of this test, reached
with the project's ansible.cfg by `ansible-playbook deploy.yml`. The run is narrowed to the image
stage (`--tags sglang_image`; test-engine hosts, the image on the machine's daemon already) so it
stays short; the fault and the timings are real. s-h2 and s-h3 make up a batch after the canary
s-h1; the test freezes s-h3 with `docker pause` the moment the machine's daemon creates s-h3's
image probe container: the module that asked for it (sglang_image's "Read the patch record", a
docker_container run) is then running on s-h3, past sudo, on the SSH ControlMaster. Frozen, its
sshd stops answering while its TCP stack still accepts: only SSH's keepalives (ansible.cfg's
ssh_args) can end that task. Without them it waits for good (Ansible's own timeouts cover only the
connect and the sudo prompt): a task there was still waiting after 400 s.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import threading
import time
from pathlib import Path

import pytest
from roles_testlib import BIN, REPO, ansible_env, docker_ok
from ssh_hosts import connection, docker, ssh_hosts

from testengine.local_fleet import write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not docker_ok(), reason="needs a running Docker engine")]  # fmt: skip

HOSTS = ("s-h1", "s-h2", "s-h3")
PROBE = "sglang-deploy-probe-s-h3"  # sglang_image_probe_container_name of s-h3
NET = "silent-rollout-net"
SILENT_DEADLINE_S = 120  # the bound: a silent host is UNREACHABLE within 2 minutes


def _inventory(tmp: Path, addresses: dict[str, str]) -> Path:
    hosts = {
        h: {
            **connection(ip),
            "sglang_server_container_name": f"silent-sglang-{h}",
            "flashinfer_cache_volume_prefix": f"silent-fic-{h}",
            "sglang_server_port": 31800 + i,
        }
        for i, (h, ip) in enumerate(addresses.items())
    }
    return write_inventory(tmp / "inventory", hosts, [1, 2], sglang_reports_dir=str(tmp / "reports"))


class _Run:
    """ansible-playbook deploy.yml with its output lines time-stamped as they come (monotonic)."""

    def __init__(self, tmp: Path, inventory: Path, run_id: str, *more: str) -> None:
        env = {**ansible_env(), "PYTHONUNBUFFERED": "1",
               # a control socket folder of this test: no master left by another run is reused
               "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp / "cp")}  # fmt: skip
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [str(BIN / "ansible-playbook"), "-i", str(inventory), "deploy.yml", "-e", f"sglang_run_id={run_id}",
             "--tags", "sglang_image", *more],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line))

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, 9)
            self.proc.wait()
            rc = -9
        self._reader.join(10)
        return rc

    @property
    def log(self) -> str:
        return "".join(line for _, line in self.lines)

    def first(self, needle: str) -> float | None:
        return next((t for t, line in self.lines if needle in line), None)


def _stage(run_dir: Path, host: str) -> str:
    try:
        return json.loads((run_dir / "hosts" / f"{host}.json").read_text()).get("stage", "")
    except (OSError, ValueError):
        return ""


def test_a_host_frozen_mid_rollout_is_unreachable_within_two_minutes_and_repaired_first(tmp_path):
    with ssh_hosts("silent-", HOSTS, NET, docker_socket=True, leftovers=[PROBE]) as addresses:
        inventory = _inventory(tmp_path, addresses)
        run_dir = tmp_path / "reports" / "20261207T100000Z"
        events = subprocess.Popen(
            ["docker", "events", "--filter", "type=container", "--filter", "event=create",
             "--filter", f"container={PROBE}", "--format", "{{.Actor.Attributes.name}}"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            first = _Run(tmp_path, inventory, "20261207T100000Z")
            assert events.stdout is not None
            while not select.select([events.stdout], [], [], 0.5)[0]:
                assert first.proc.poll() is None and time.monotonic() - first.started < 240, first.log[-4000:]
            assert events.stdout.readline().strip() == PROBE, first.log[-4000:]  # s-h3's module is mid-run
            docker("pause", "silent-s-h3")
            paused = time.monotonic()
        finally:
            events.kill()
            events.wait()
        assert _stage(run_dir, "s-h3") == "image"
        rc = first.wait(timeout=SILENT_DEADLINE_S + 120)
        log = first.log
        assert rc != -9, f"the rollout still ran {time.monotonic() - paused:.0f} s after s-h3 froze:\n{log[-4000:]}"
        unreachable = first.first("fatal: [s-h3]: UNREACHABLE!")
        assert unreachable is not None, log[-5000:]
        said = next(line for _, line in first.lines if "fatal: [s-h3]: UNREACHABLE!" in line)
        print(f"s-h3 UNREACHABLE {unreachable - paused:.1f} s after docker pause: {said.strip()[:300]}")
        assert unreachable - paused < SILENT_DEADLINE_S, f"UNREACHABLE {unreachable - paused:.0f} s after the pause"
        assert rc == 4, log[-4000:]  # stopped on a lost host (not failed, not finished)
        summary = json.loads((run_dir / "rollout-summary.json").read_text())
        assert summary["unreachable"] == ["s-h3"], summary  # the last batch: the summary play still ran
        # the rest of its batch finished
        assert sorted(summary["unchanged"] + summary["moved"]) == ["s-h1", "s-h2"], summary
        h3 = json.loads((run_dir / "hosts" / "s-h3.json").read_text())
        assert (h3["outcome"], h3["stage"]) == ("unreachable", "image"), h3
        state = json.loads((tmp_path / "reports" / "fleet-state.json").read_text())
        assert [h for h, e in state["hosts"].items() if e["pending_repair"]] == ["s-h3"], state
        assert state["hosts"]["s-h3"]["stage"] == "image", state["hosts"]["s-h3"]

        docker("unpause", "silent-s-h3")
        # A --limit run that leaves the pending host out stops before any host changes, naming it ...
        limited = _Run(tmp_path, inventory, "20261207T101000Z", "--limit", "s-h2")
        assert limited.wait(timeout=180) not in (0, -9), limited.log[-3000:]
        said = " ".join(limited.log.split())
        assert "s-h3 is pending repair from an earlier run and outside this run's --limit" in said, said[-3000:]
        assert "PLAY [Canaries" not in said and not (tmp_path / "reports" / "20261207T101000Z" / "hosts").exists()

        # ... and the next full run finishes s-h3 first, before any other host is touched
        second = _Run(tmp_path, inventory, "20261207T102000Z")
        assert second.wait(timeout=240) == 0, second.log[-4000:]
        log = second.log
        repair = log.index("PLAY [Finish the hosts the last rollout left unreachable]")
        canaries = log.index("PLAY [Canaries")
        assert repair < log.index("ok: [s-h3]", repair) < canaries, log[repair - 1000 : canaries + 200]
        assert "s-h1" not in log[repair:canaries] and "s-h2" not in log[repair:canaries]
        state = json.loads((tmp_path / "reports" / "fleet-state.json").read_text())
        assert not any(e["pending_repair"] for e in state["hosts"].values()), state
        run2 = json.loads((tmp_path / "reports" / "20261207T102000Z" / "rollout-summary.json").read_text())
        assert run2["unreachable"] == [] and run2["failed"] == [] and run2["not_reached"] == [], run2
