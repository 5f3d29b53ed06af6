"""One rollout per fleet, whoever starts it: the lock is on the hosts (`<state dir>/rollout.lock`),
taken on every host of the run in preflight, before any host changes, and released at the run's end.

Real `ansible-playbook deploy.yml` from two "controllers" that share nothing but the hosts: two
inventories (their own paths, reports folders, SSH control sockets and host names) whose hosts are
the same three hosts. Every test runs on SSH test hosts, with `become` through sudo: the race on
three sshd containers (tests/roles/ssh_hosts.py; the lock under /var/lib/sglang-deploy as on a GPU
host); the lock's other behaviours (held, stale, broken, lost mid-run, heartbeat) on three loopback
addresses of one sshd (testengine.ssh_fleet) whose `sglang_server_state_dir` folders are the test's
own, shared at the same path, where the test can plant and watch a lock file. Narrowed with
`--tags gpu_host` and `sglang_gpu_host_prepare: false`, so that only the run's own bookkeeping and
the lock run: what is asserted is the lock, not the deploy (test_roles_local_rollout.py has that).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from roles_testlib import BIN, REPO, ansible_env, docker_ok
from ssh_hosts import connection, loopback_sshd, ssh_hosts

from testengine import ssh_fleet
from testengine.local_fleet import write_inventory

pytestmark = [pytest.mark.docker, pytest.mark.skipif(not docker_ok(), reason="needs a running Docker engine")]

HOSTS = 3


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of this module's loopback SSH test hosts' sshd."""
    yield from loopback_sshd(tmp_path_factory, "lock-sshd")


def _controller(tmp: Path, name: str, ssh_port: int, reverse: bool = False) -> Path:
    """One controller's inventory: hosts <name>1..3 (loopback SSH hosts 1..3) on the test's state
    folders, its own reports. ``reverse``: <name>1 is the third host (a run with one fork takes its
    locks in the opposite order of the other controller's, so two runs started at once meet in the
    middle)."""
    hosts = {}
    for i in range(1, HOSTS + 1):
        n = HOSTS + 1 - i if reverse else i
        hosts[f"{name}{i}"] = {**ssh_fleet.host_vars(n, ssh_port), "sglang_server_state_dir": str(tmp / f"host{n}")}
    return _inventory(tmp, name, hosts)


def _inventory(tmp: Path, name: str, hosts: dict[str, dict[str, object]]) -> Path:
    """One controller's inventory folder and reports; one batch of all its hosts after the canary."""
    return write_inventory(
        tmp / name / "inventory",
        hosts,
        [1],
        sglang_gpu_host_prepare=False,
        sglang_reports_dir=str(tmp / name / "reports"),
    )


def _ssh_controller(tmp: Path, name: str, addresses: list[str], reverse: bool = False) -> Path:
    """As ``_controller``, on the SSH test hosts: <name>i is the host at addresses[i - 1] (reversed
    with ``reverse``); the lock is in the hosts' default state folder, written with sudo."""
    hosts = {f"{name}{i}": connection(addresses[HOSTS - i if reverse else i - 1]) for i in range(1, HOSTS + 1)}
    return _inventory(tmp, name, hosts)


def _start(inv: Path, run_id: str, *extra: str) -> tuple[subprocess.Popen[str], Path]:
    """Start a deploy; its output goes to a file (a pipe nobody reads would stall it once full, and
    a stalled run would no longer race). Each controller has its own SSH control sockets, as two
    operators' machines do."""
    log = inv.parent / f"{run_id}.log"
    env = {**ansible_env(), "ANSIBLE_SSH_CONTROL_PATH_DIR": str(inv.parent / "cp")}
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [str(BIN / "ansible-playbook"), "-i", str(inv), "deploy.yml", "--tags", "gpu_host",
             "-e", f"sglang_run_id={run_id}", *extra],
            cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    return proc, log


def _finish(started: tuple[subprocess.Popen[str], Path]) -> tuple[int, str]:
    proc, log = started
    proc.wait(timeout=600)
    return proc.returncode, " ".join(log.read_text().split())


def _deploy(inv: Path, run_id: str, *extra: str) -> tuple[int, str]:
    return _finish(_start(inv, run_id, *extra))


def _locks(tmp: Path) -> dict[int, dict[str, object]]:
    """host number -> the rollout lock on it (only the hosts that have one)."""
    out = {}
    for i in range(1, HOSTS + 1):
        path = tmp / f"host{i}" / "rollout.lock"
        if path.exists():
            out[i] = json.loads(path.read_text())
    return out


def _lock_text(heartbeat_age_s: float, run_id: str = "20261205T0100Z") -> str:
    """Another controller's lock, as its run writes it, its heartbeat ``heartbeat_age_s`` old."""
    beat = time.time() - heartbeat_age_s
    return json.dumps({"run_id": run_id, "token": "0therrun", "user": "alice", "controller": "ops-2",
                       "started": "2026-12-05T01:00:00Z", "started_epoch": beat - 60, "heartbeat": beat,
                       "heartbeat_at": "2026-12-05T01:01:00Z", "taken": "2026-12-05T01:00:00Z"})  # fmt: skip


def _hold(tmp: Path, host: int, heartbeat_age_s: float, run_id: str = "20261205T0100Z") -> str:
    """Another controller's lock on local host ``host``, its heartbeat ``heartbeat_age_s`` old."""
    folder = tmp / f"host{host}"
    folder.mkdir(parents=True, exist_ok=True)
    text = _lock_text(heartbeat_age_s, run_id)
    (folder / "rollout.lock").write_text(text)
    return text


def _records(inv: Path, run_id: str) -> list[str]:
    folder = inv.parent / "reports" / run_id / "hosts"
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


SSH_LOCK = "/var/lib/sglang-deploy/rollout.lock"  # sglang_server_state_dir's default, as on a GPU host


def _ssh_locks(containers: list[str]) -> dict[int, str]:
    """host number -> the rollout lock's text on that SSH test host (only the hosts that have one); a
    host that cannot be asked fails the test (an error is not "no lock")."""
    out = {}
    for i, container in enumerate(containers, start=1):
        run = subprocess.run(
            ["docker", "exec", container, "cat", SSH_LOCK], capture_output=True, text=True, check=False
        )
        if run.returncode == 0:
            out[i] = run.stdout
        else:
            assert "No such file or directory" in run.stderr, (container, run.returncode, run.stderr)
    return out


def _stop_all(procs: list[tuple[subprocess.Popen[str], Path]], tmp: Path) -> None:
    """A failed race leaves nothing running: the playbooks, and their SSH ControlMasters (named by
    their control path under ``tmp``)."""
    for proc, _ in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    subprocess.run(["pkill", "-f", str(tmp)], capture_output=True, check=False)


def _race(a: Path, b: Path, race: int, forks: str, containers: list[str], started: list) -> None:
    """Two controllers start deploy.yml at once: exactly one rolls, the other stops in preflight,
    naming the holder, having changed nothing; no lock is left once the winner has finished."""
    ids = {"a": f"race{race}-a", "b": f"race{race}-b"}
    procs = {"a": _start(a, ids["a"], "--forks", forks), "b": _start(b, ids["b"], "--forks", forks)}
    started.extend(procs.values())
    done = {name: _finish(proc) for name, proc in procs.items()}
    winners = [name for name, (rc, _) in done.items() if rc == 0]
    assert len(winners) == 1, {name: out[-2500:] for name, (_, out) in done.items()}
    win, lose = winners[0], "b" if winners[0] == "a" else "a"
    inv = {"a": a, "b": b}
    out = done[lose][1]
    assert f"another rollout holds hosts of this run: run {ids[win]} (" in out, out[-3000:]
    assert f"Run {ids[lose]} changed nothing and" in out
    assert _records(inv[lose], ids[lose]) == []
    assert _records(inv[win], ids[win]) == [f"{win}{i}" for i in range(1, HOSTS + 1)]
    print(f"race {race} (forks {forks}): {ids[win]} won;", out[out.index(f"Run {ids[lose]} changed") :][:90])
    assert _ssh_locks(containers) == {}


def test_two_controllers_started_at_once_on_ssh_hosts_exactly_one_rolls(tmp_path):
    """Two races: one with all forks (each run asks its three hosts at once), one with one fork and
    the hosts in opposite orders, where the runs are likeliest to split the hosts (then the younger
    releases what it took and the older waits for it). Then the lock is shown to live where a GPU
    host keeps it: one planted there (another operator's, fresh) is what a --check run reports."""
    names = [f"h{i}" for i in range(1, HOSTS + 1)]
    with ssh_hosts("lock-", names, "lock-rollout-net", docker_socket=True) as addresses:
        ips = [addresses[n] for n in names]
        containers = [f"lock-{n}" for n in names]
        a, b = _ssh_controller(tmp_path, "a", ips), _ssh_controller(tmp_path, "b", ips, reverse=True)
        started: list[tuple[subprocess.Popen[str], Path]] = []
        try:
            for race, forks in enumerate(("50", "1")):
                _race(a, b, race, forks, containers, started)
            planted = _lock_text(heartbeat_age_s=30, run_id="ops-9-run")
            subprocess.run(["docker", "exec", "-i", containers[1], "sh", "-c", f"cat > {SSH_LOCK}"],
                           input=planted, text=True, check=True)  # fmt: skip
            rc, out = _finish(_start(a, "dry", "--check"))
            assert rc != 0, out[-3000:]
            assert (
                "check mode: a real run would stop here, another rollout holds hosts of this run: run ops-9-run ("
                in out
            )
            assert _ssh_locks(containers) == {2: planted}  # --check took none, left the holder's as it was
        finally:
            _stop_all(started, tmp_path)


def test_held_stale_check_and_break(tmp_path, sshd):
    a = _controller(tmp_path, "a", sshd)
    held = _hold(tmp_path, 2, heartbeat_age_s=30)
    # a fresh lock of another run: refused, named, left as it was; nothing changed, nothing held
    rc, out = _deploy(a, "second")
    assert rc != 0
    assert (
        "another rollout holds hosts of this run: run 20261205T0100Z (alice@ops-2, started 2026-12-05T01:00:00Z, "
        "heartbeat " in out
    ), out[-3000:]
    assert "s ago) holds a2. Run second changed nothing and releases the 2 host locks it took (a1, a3)." in out
    assert (tmp_path / "host2" / "rollout.lock").read_text() == held
    assert list(_locks(tmp_path)) == [2] and _records(a, "second") == []
    # --check says the same and takes none
    rc, out = _deploy(a, "check", "--check")
    assert (
        rc != 0
        and "check mode: a real run would stop here, another rollout holds hosts of this run: run 20261205T0100Z" in out
    )
    assert list(_locks(tmp_path)) == [2] and (tmp_path / "host2" / "rollout.lock").read_text() == held
    # preflight.yml alone (no rollout after it) reads the locks like --check and leaves none behind
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(a), "playbooks/preflight.yml", "-e", "sglang_run_id=alone"],
        cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "check mode: a real run would stop here" in proc.stdout, proc.stdout[-3000:]
    assert list(_locks(tmp_path)) == [2] and (tmp_path / "host2" / "rollout.lock").read_text() == held
    # break it: logged as who broke whose lock, in the output and the run's folder; released at the end
    rc, out = _deploy(a, "breaker", "-e", "sglang_rollout_break_lock=20261205T0100Z")
    assert rc == 0, out[-3000:]
    assert "run breaker breaks the lock of run 20261205T0100Z (alice@ops-2, started 2026-12-05T01:00:00Z" in out
    log = json.loads((a.parent / "reports" / "breaker" / "fleet-lock.json").read_text())
    assert [(e["host"], e["what"], e["previous"]["run_id"], e["run_id"]) for e in log["events"]] == [
        ("a2", "broke", "20261205T0100Z", "breaker")
    ]
    summary = (a.parent / "reports" / "breaker" / "rollout-summary.md").read_text()
    assert "(run breaker) broke the lock of run 20261205T0100Z (alice@ops-2, started 2026-12-05T01:00:00Z" in summary
    assert _locks(tmp_path) == {}
    # a heartbeat older than sglang_rollout_host_lock_stale_s: --check says it would take it over and
    # takes none; the real run takes it over, says so, and releases it at the end
    stale = _hold(tmp_path, 3, heartbeat_age_s=7200)
    rc, out = _deploy(a, "dry", "--check", "-e", "sglang_rollout_host_lock_stale_s=3600")
    assert rc == 0, out[-3000:]
    assert (
        "run dry would take over the stale lock of run 20261205T0100Z" in out
        and "on a3 (heartbeat older than 3600 s)" in out
    )
    assert (tmp_path / "host3" / "rollout.lock").read_text() == stale and list(_locks(tmp_path)) == [3]
    rc, out = _deploy(a, "third", "-e", "sglang_rollout_host_lock_stale_s=3600")
    assert rc == 0, out[-3000:]
    assert "run third takes over the stale lock of run 20261205T0100Z" in out
    assert _locks(tmp_path) == {}


def test_a_run_stopped_by_a_failed_host_lets_go_of_every_host_it_holds(tmp_path, sshd):
    """Host 3's lock is broken by another run while this run works on host 1 (the canary): host 3
    fails at its turn with nothing changed, that batch stops the run, and the run releases its lock
    on hosts 1 and 2 before it stops; the other run's lock on host 3 is not this run's to remove."""
    a = _controller(tmp_path, "a", sshd)
    lock3 = tmp_path / "host3" / "rollout.lock"
    broken: list[str] = []

    def break_host3() -> None:  # as another operator's -e sglang_rollout_break_lock=stopped would
        for _ in range(6000):
            try:
                lock = json.loads(lock3.read_text())
            except FileNotFoundError:
                lock = {}
            if lock.get("run_id") == "stopped" and lock.get("phase") == "holding":  # preflight is done
                broken.append(_hold(tmp_path, 3, heartbeat_age_s=0, run_id="other-run"))
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=break_host3)
    watcher.start()
    rc, out = _deploy(a, "stopped")
    watcher.join()
    assert broken, out[-3000:]
    assert rc != 0
    assert "this host's rollout lock (" in out and "is no longer run stopped's: run other-run (alice@ops-2" in out
    assert _locks(tmp_path) == {3: json.loads(broken[0])}  # hosts 1 and 2 released, host 3 left to its holder
    record = json.loads((a.parent / "reports" / "stopped" / "hosts" / "a3.json").read_text())
    assert record["outcome"] == "failed" and "is no longer run stopped's" in record["failure"]


def test_the_run_keeps_every_hosts_heartbeat_fresh(tmp_path, sshd):
    """Host 1 (the canary) is worked on first; its lock is refreshed later too, at the batches' start
    (every host, once a quarter of sglang_rollout_host_lock_stale_s has passed: 1 s here). Without
    that refresh its lock would show three heartbeats: the take, the 'holding' mark, its own turn."""
    a = _controller(tmp_path, "a", sshd)
    lock1 = tmp_path / "host1" / "rollout.lock"
    beats: set[float] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
                beats.add(float(json.loads(lock1.read_text())["heartbeat"]))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        rc, out = _deploy(a, "beats", "-e", "sglang_rollout_host_lock_stale_s=4")
    finally:
        done.set()
        watcher.join()
    assert rc == 0, out[-3000:]
    assert "TASK [Fleet lock on every host of the run: heartbeat]" in out
    assert len(beats) >= 4, sorted(beats)
    assert _locks(tmp_path) == {}
