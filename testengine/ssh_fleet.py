"""SSH test hosts on this machine: loopback addresses (127.0.1.1, 127.0.1.2, ...) of ONE sshd.

The sshd is the molecule host image (molecule/resources/build-instance.sh: Debian 12, user
``deploy`` with passwordless sudo, python3, the docker CLI) run with this machine's network and
Docker socket, key-only. Ansible reaches each address as a host of its own, the production way
(``ansible_connection: ssh``, ``become`` through sudo, the project's ansible.cfg with its keepalives
and connect timeout): one connection, one control socket, one fork and one set of facts per host.
What the host's tasks start (servers, probes, gates) runs on this machine's Docker daemon, so the
folders they bind-mount (state, gate, metrics) are shared at the same path in and out of the sshd
container (``shared``).

Why a module: the rollout benchmark (benchmarks/_fleet_ssh.py) and the rollout tests on SSH hosts
(tests/roles/) start the same sshd the same way; one place says how. The figures such a fleet gives
are this machine's and the TEST ENGINE's, never a GPU fleet's.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from testengine.local_fleet import REPO

HOST_IMAGE = "local/sglang-molecule-host:latest"
KEY = Path("/tmp/sglang-molecule-ssh/id_ed25519")
SSH_OPTIONS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"


def address(i: int) -> str:
    """Host i's loopback address (1-based): 127.0.1.1 ... 127.0.1.254."""
    if not 1 <= i <= 254:
        raise ValueError(f"host number {i} is outside 1..254 (one /24 of loopback addresses)")
    return f"127.0.1.{i}"


def build_host_image() -> None:
    """The host image and its SSH key: a no-op when both are there and current."""
    subprocess.run(["bash", str(REPO / "molecule/resources/build-instance.sh")], check=True, capture_output=True)


def host_vars(i: int, port: int) -> dict[str, Any]:
    """The inventory variables of SSH host ``i`` of the sshd on ``port``: as an inventory reaches a GPU
    host (become, a key, the host's own python3). The inventory's ssh options come on top of
    ansible.cfg's ssh_args (its keepalives kept), as the README's "SSH settings" asks."""
    return {
        "ansible_connection": "ssh",
        "ansible_host": address(i),
        "ansible_port": port,
        "ansible_user": "deploy",
        "ansible_become": True,
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_private_key_file": str(KEY),
        "ansible_ssh_common_args": SSH_OPTIONS,
    }


def lost_from(condition: str, port: int) -> dict[str, Any]:
    """Host variables (over host_vars()) of an SSH test host that is lost once ``condition`` holds (a
    Jinja expression on the host's variables, e.g. ``sglang_rollout_stage is defined``): from then on
    its SSH port is 1, where nobody answers (refused at once on loopback; the 3 s connect timeout bounds
    it where packets are dropped); before, the sshd's ``port``."""
    return {
        "ansible_port": f"{{{{ 1 if ({condition}) else {port} }}}}",
        "ansible_ssh_common_args": f"{SSH_OPTIONS} -o ConnectTimeout=3",
    }


def answers(host: str, port: int) -> bool:
    """Whether the host at address ``host`` takes an SSH login with the key on ``port`` now."""
    probe = subprocess.run(
        ["ssh", "-p", str(port), "-i", str(KEY), *SSH_OPTIONS.split(), "-o", "BatchMode=yes",
         "-o", "ConnectTimeout=3", f"deploy@{host}", "true"],
        capture_output=True, check=False,
    )  # fmt: skip
    return probe.returncode == 0


def start_sshd(name: str, port: int, shared: Iterable[Path] = (), mounts: Mapping[Path, str] = ()) -> None:
    """Start the sshd container ``name`` on ``port`` (any earlier one of that name removed first) and
    wait until it takes a login. ``shared``: folders mounted at the same path (made when missing);
    ``mounts``: this machine's path -> the path in the container, read-only."""
    build_host_image()
    stop_sshd(name)
    volumes = ["-v", "/var/run/docker.sock:/var/run/docker.sock",
               "-v", f"{KEY}.pub:/home/deploy/.ssh/authorized_keys:ro"]  # fmt: skip
    for folder in shared:
        folder.mkdir(parents=True, exist_ok=True)
        volumes += ["-v", f"{folder}:{folder}"]
    for source, target in dict(mounts).items():
        volumes += ["-v", f"{source}:{target}:ro"]
    sshd = f"ssh-keygen -A >/dev/null && exec /usr/sbin/sshd -D -e -p {port} -o MaxStartups=1000 -o MaxSessions=100"
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--network", "host", *volumes, HOST_IMAGE, "/bin/sh", "-c", sshd],
        check=True, capture_output=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not answers(address(1), port):
        if time.monotonic() > deadline:
            raise RuntimeError(f"sshd in container {name} did not answer on {address(1)}:{port} within 30 s")
        time.sleep(0.5)


def stop_sshd(name: str) -> None:
    """Remove the sshd container ``name``, whether or not it is there."""
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


@contextlib.contextmanager
def loopback_sshd(name: str, port: int, shared: Iterable[Path] = (), mounts: Mapping[Path, str] = ()) -> Iterator[None]:
    """start_sshd(...) for the ``with`` block, removed at its end whatever happened."""
    try:
        start_sshd(name, port, shared, mounts)
        yield
    finally:
        stop_sshd(name)
