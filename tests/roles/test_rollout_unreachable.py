"""A host that becomes unreachable stops the rollout, is named, and is finished first next time.

Real `ansible-playbook deploy.yml` runs over four SSH test hosts (testengine.ssh_fleet: loopback
addresses of one sshd container, `become` through sudo, the project's ansible.cfg; each host with
its own TEST ENGINE container, port and cache volume on this machine's Docker daemon): the canary
u-h1, then waves of serial [2]: u-h2, u-h3 | u-h4. u-h2 answers preflight, then becomes a host
nobody answers for (its SSH port 1) once its rollout starts: Ansible runs neither
rescue nor always for it and max_fail_percentage does not count it. The rollout must stop
before u-h4's batch, the summary must name u-h2 as unreachable with the stage it was in, and the
next run (u-h2 reachable again) must finish u-h2 before it touches u-h4.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from roles_testlib import deploy, docker_ok, remove_test_fleet
from ssh_hosts import loopback_sshd

from testengine import ssh_fleet
from testengine.local_fleet import short_gate_config, write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.skipif(not docker_ok(), reason="needs a running Docker engine")]  # fmt: skip

HOSTS = ["u-h1", "u-h2", "u-h3", "u-h4"]
BASE_PORT = 31700


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of this module's loopback SSH test hosts' sshd."""
    yield from loopback_sshd(tmp_path_factory, "unreach-sshd")


def _inventory(
    tmp: Path,
    ssh_port: int,
    h2_reachable: bool,
    serial: list[int] | None = None,
    h2_gone: bool = False,
    lost: tuple[str, ...] = ("u-h2",),
    profiles: dict[str, str] | None = None,
) -> Path:
    inv = tmp / "inventory"
    (inv / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    hosts = {}
    for i, name in enumerate(HOSTS):
        hosts[name] = {
            **ssh_fleet.host_vars(i + 1, ssh_port),
            "sglang_server_port": BASE_PORT + i,
            "sglang_server_container_name": f"unreach-sglang-{name}",
            "flashinfer_cache_volume_prefix": f"unreach-fic-{name}",
            "sglang_server_state_dir": str(tmp / "state" / name),
        }
        if profiles:  # GPU profiles: one canary each (preflight picks the first host of each)
            hosts[name]["sglang_gate_baseline_group"] = profiles[name]
    for name in () if h2_reachable else lost:
        # Reachable for preflight, gone once its rollout starts (an SSH port nobody answers on): the
        # port is chosen per task from the stage marker the rollout sets.
        hosts[name].update(ssh_fleet.lost_from("sglang_rollout_stage is defined", ssh_port))
    if h2_gone:  # never reachable, not even by preflight
        hosts["u-h2"].update(ssh_fleet.lost_from("true", ssh_port))
    write_inventory(
        inv,
        hosts,
        serial or [2],
        sglang_reports_dir=str(tmp / "reports"),
        sglang_gate_config=short_gate_config(baseline={"tolerance": 0.5}),
    )
    return inv


def _cleanup() -> None:
    remove_test_fleet(HOSTS, "unreach")


def _running(name: str) -> bool:
    out = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", f"unreach-sglang-{name}"],
                         capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    return out == "true"


def test_unreachable_host_stops_the_rollout_and_is_finished_first_next_time(tmp_path, sshd):
    _cleanup()
    try:
        first = deploy(_inventory(tmp_path, sshd, h2_reachable=False), "20261203T100000Z")
        log = first.stdout + first.stderr
        assert first.returncode != 0, log[-4000:]
        run1 = tmp_path / "reports" / "20261203T100000Z"
        assert (run1 / "rollout-summary.json").is_file(), log[-5000:]
        summary = json.loads((run1 / "rollout-summary.json").read_text())
        assert summary["unreachable"] == ["u-h2"], summary
        assert summary["not_reached"] == ["u-h4"], summary  # stopped before the next batch
        h2 = json.loads((run1 / "hosts" / "u-h2.json").read_text())
        # the host lock (taken at the gpu_host stage) is the first thing its rollout asks of the host
        assert h2["outcome"] == "unreachable" and h2["stage"] == "gpu_host", h2
        assert "The next run finishes this host first" in h2["messages"][0]
        assert _running("u-h1") and _running("u-h3") and not _running("u-h4")
        assert "u-h2 became unreachable" in (run1 / "rollout-summary.md").read_text()
        state = json.loads((tmp_path / "reports" / "fleet-state.json").read_text())
        assert [h for h, e in state["hosts"].items() if e["pending_repair"]] == ["u-h2"], state
        assert state["hosts"]["u-h2"]["run_id"] == "20261203T100000Z" and state["image_in_flight"]["image_id"]
        in_flight = state["image_in_flight"]

        # A --check run and a --limit run come in between (an operator looking, a one-host fix):
        # neither may make the next run forget u-h2 (they wrote newer run folders without it).
        reachable = _inventory(tmp_path, sshd, h2_reachable=True)
        look = deploy(reachable, "20261203T103000Z", "--check")
        assert look.returncode == 0, (look.stdout + look.stderr)[-4000:]
        assert "Left half-done by an earlier run, finishing first: u-h2." in " ".join(look.stdout.split())
        # a --limit run that leaves u-h2 out stops before any host changes, naming it ...
        refused = deploy(reachable, "20261203T103500Z", "--limit", "u-h1")
        said = " ".join((refused.stdout + refused.stderr).split())
        assert refused.returncode != 0, said[-3000:]
        assert "u-h2 is pending repair from an earlier run and outside this run's --limit: nothing was changed" in said
        assert "PLAY [Canaries" not in said and not (tmp_path / "reports" / "20261203T103500Z" / "hosts").exists()
        # it took u-h1's fleet lock before it read the fleet state, and let go of it when it stopped
        assert "(this run let go of its rollout locks)" in said
        assert not (tmp_path / "state" / "u-h1" / "rollout.lock").exists()
        # ... unless the operator says so on purpose
        fix = deploy(reachable, "20261203T104000Z", "--limit", "u-h1",
                     "-e", "sglang_rollout_ignore_pending_outside_limit=true")  # fmt: skip
        assert fix.returncode == 0, fix.stdout[-3000:]
        said = " ".join(fix.stdout.split())  # the output wraps long messages
        at = said.find("Left half-done")
        assert "finishing first: none; outside this run (--limit), staying pending: u-h2." in said, said[at : at + 400]
        state = json.loads((tmp_path / "reports" / "fleet-state.json").read_text())
        # the --limit run passed, but u-h2 still has run 1's job to finish: run 1's image stays in flight
        assert state["hosts"]["u-h2"]["pending_repair"] and state["image_in_flight"] == in_flight, state

        second = deploy(reachable, "20261203T110000Z")
        log = second.stdout + second.stderr
        assert second.returncode == 0, log[-4000:]
        repair = log.index("PLAY [Finish the hosts the last rollout left unreachable]")
        main = log.index("PLAY [Roll out host by host (canary first)]")
        assert repair < log.index("ok: [u-h2]", repair) < main, log[repair - 1500 : main + 200]  # repaired first
        assert "u-h4" not in log[repair:main]  # ... before u-h4 is touched
        run2 = json.loads((tmp_path / "reports" / "20261203T110000Z" / "rollout-summary.json").read_text())
        assert run2["unreachable"] == [] and run2["failed"] == [] and run2["not_reached"] == []
        assert sorted(run2["moved"]) == ["u-h2", "u-h4"], run2
        # u-h2 finished run 1's job with run 1's image, not whatever the tag names now
        h2 = json.loads((tmp_path / "reports" / "20261203T110000Z" / "hosts" / "u-h2.json").read_text())
        assert (h2["image_pinned_by"], h2["image_id"]) == ("run 20261203T100000Z (unfinished)", in_flight["image_id"])
        assert all(_running(h) for h in HOSTS)
        state = json.loads((tmp_path / "reports" / "fleet-state.json").read_text())
        assert not any(e["pending_repair"] for e in state["hosts"].values()) and state["image_in_flight"] == {}
        assert {e["run_id"] for h, e in state["hosts"].items() if h in ("u-h2", "u-h4")} == {"20261203T110000Z"}
    finally:
        _cleanup()


def test_a_batch_lost_whole_is_named_and_both_hosts_are_finished_together_next_time(tmp_path, sshd):
    """u-h2 and u-h3 make up a wave (serial [2, 1], after the canary u-h1) and both are lost:
    Ansible ends the whole run, so no task of the rollout can record them; the rollout_lost callback does
    (plugins/callback). The next run finishes both in its repair play at the same time (one play,
    no serial: their stage spans overlap), before u-h4 is touched."""
    _cleanup()
    try:
        run = deploy(_inventory(tmp_path, sshd, h2_reachable=False, serial=[2, 1], lost=("u-h2", "u-h3")),
                      "20261203T120000Z")  # fmt: skip
        log = run.stdout + run.stderr
        assert run.returncode == 4, log[-4000:]  # unreachable: Ansible ended the run itself
        run_dir = tmp_path / "reports" / "20261203T120000Z"
        summary = json.loads((run_dir / "rollout-summary.json").read_text())
        assert summary["unreachable"] == ["u-h2", "u-h3"] and summary["finished"] is False, summary
        assert summary["not_reached"] == ["u-h4"] and summary["unchanged"] + summary["moved"] == ["u-h1"]
        for name in ("u-h2", "u-h3"):
            rec = json.loads((run_dir / "hosts" / f"{name}.json").read_text())
            assert rec["outcome"] == "unreachable" and rec["stage"] == "gpu_host", rec
            assert rec["failure"] == "unreachable during gpu_host"
            assert rec["failed_task"] and "The next run finishes this host first" in rec["messages"][0]
        md = (run_dir / "rollout-summary.md").read_text()
        assert "**Stopped**: u-h2, u-h3 became unreachable; the next run finishes them first." in md, md
        assert "UNREACHABLE during gpu_host" in md, md
        for name in ("u-h2", "u-h3"):
            assert f"ROLLOUT STOPPED: {name} became unreachable during gpu_host" in log, log[-3000:]
        assert _running("u-h1") and not _running("u-h2") and not _running("u-h4")

        second = deploy(_inventory(tmp_path, sshd, h2_reachable=True), "20261203T123000Z")
        log = second.stdout + second.stderr
        assert second.returncode == 0, log[-4000:]
        repair = log.index("PLAY [Finish the hosts the last rollout left unreachable]")
        main = log.index("PLAY [Roll out host by host (canary first)]")
        assert "u-h4" not in log[repair:main]
        run2 = tmp_path / "reports" / "20261203T123000Z"
        spans = {}
        for name in ("u-h2", "u-h3"):
            marks = json.loads((run2 / "hosts" / f"{name}.json").read_text())["stages"]
            assert marks[-1]["stage"] == "done" and marks[0]["stage"] == "gpu_host", marks
            spans[name] = (marks[0]["at"], marks[-1]["at"])
        (a0, a1), (b0, b1) = spans["u-h2"], spans["u-h3"]
        assert a0 < b1 and b0 < a1, spans  # one at a time would put one host's start after the other's end
        assert json.loads((run2 / "rollout-summary.json").read_text())["unreachable"] == []
        assert all(_running(h) for h in HOSTS)
    finally:
        _cleanup()


def test_a_lost_canary_is_a_failed_canary_and_no_wave_starts(tmp_path, sshd):
    """u-h1, the canary of profile g1, is lost while u-h3, the canary of g2, passes in the same
    canary play: Ansible counts no unreachable host against max_fail_percentage, so the waves would
    start; the run must stop as for a failed canary and say so. Then with one profile, u-h1 is the
    whole canary batch: Ansible ends the run itself and the rollout_lost callback must say the same."""
    _cleanup()
    try:
        profiles = {"u-h1": "g1", "u-h2": "g1", "u-h3": "g2", "u-h4": "g2"}
        inv = _inventory(tmp_path, sshd, h2_reachable=False, lost=("u-h1",), profiles=profiles)
        run = deploy(inv, "20261203T140000Z")
        said = " ".join((run.stdout + run.stderr).split())
        assert run.returncode != 0, said[-4000:]
        assert ("CANARY FAILED: u-h1, the canary of GPU profile g1, became unreachable during gpu_host; no wave starts"
                in said), said[-4000:]  # fmt: skip
        assert "PLAY [Roll out host by host (canary first)]" not in said
        run_dir = tmp_path / "reports" / "20261203T140000Z"
        summary = json.loads((run_dir / "rollout-summary.json").read_text())
        assert summary["failed_canaries"] == {"g1": "u-h1"} and summary["unreachable"] == ["u-h1"], summary
        assert summary["moved"] == ["u-h3"] and summary["not_reached"] == ["u-h2", "u-h4"], summary
        md = (run_dir / "rollout-summary.md").read_text()
        assert ("**Stopped**: canary u-h1 failed (GPU profile g1); no wave started. u-h1 became unreachable; "
                "the next run finishes it first.") in md, md  # fmt: skip
        assert not _running("u-h2") and not _running("u-h4")
        state = json.loads((tmp_path / "reports" / "fleet-state.json").read_text())
        assert [h for h, e in state["hosts"].items() if e["pending_repair"]] == ["u-h1"], state

        # one profile: the lost canary is its play's whole batch (the callback's case)
        alone = deploy(_inventory(tmp_path / "alone", sshd, h2_reachable=False, lost=("u-h1",)), "20261203T141000Z")
        log = alone.stdout + alone.stderr
        assert alone.returncode == 4, log[-4000:]
        assert ("CANARY FAILED: the canary of GPU profile local failed, no wave started; ROLLOUT STOPPED: u-h1 became "
                "unreachable during gpu_host") in log, log[-3000:]  # fmt: skip
        run_dir = tmp_path / "alone" / "reports" / "20261203T141000Z"
        summary = json.loads((run_dir / "rollout-summary.json").read_text())
        assert summary["failed_canaries"] == {"local": "u-h1"} and summary["not_reached"] == ["u-h2", "u-h3", "u-h4"]
        assert "**Stopped**: canary u-h1 failed (GPU profile local); no wave started." in (
            run_dir / "rollout-summary.md").read_text()  # fmt: skip
    finally:
        _cleanup()


def test_preflight_reaches_every_host_and_stops_before_any_change(tmp_path, sshd):
    """Preflight's own checks run on the controller; it must also reach each host. u-h2 answers no
    connection at all: the run stops in preflight, names it, and no host got a server."""
    _cleanup()
    try:
        run = deploy(_inventory(tmp_path, sshd, h2_reachable=True, h2_gone=True), "20261203T130000Z")
        log = " ".join((run.stdout + run.stderr).split())
        assert run.returncode != 0, log[-4000:]
        assert "Preflight could not reach u-h2 (SSH, or the connection failed): nothing was changed on any host" in log
        assert "--limit '!u-h2'" in log
        assert "PLAY [Roll out host by host (canary first)]" not in log
        assert not any(_running(h) for h in HOSTS)
    finally:
        _cleanup()
