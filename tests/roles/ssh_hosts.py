"""SSH test hosts for the rollout tests that need the real connection path: containers of the
molecule instance image (sshd as PID 1, user `deploy` with passwordless sudo;
molecule/resources/build-instance.sh) on a docker network of the test, reached as an inventory
reaches a GPU host: `ansible_connection: ssh`, `become`, the project's ansible.cfg (its keepalives
and connect timeout) under the inventory's own ssh options.

Why a module: the silent-host and the fleet-lock tests start the same hosts the same way; one
place says how (one job, one helper). ``loopback_sshd``: the other rollout tests' hosts, loopback
addresses of one sshd (testengine.ssh_fleet).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from testengine import ssh_fleet
from testengine.harness import free_port
from testengine.ssh_fleet import HOST_IMAGE as IMAGE
from testengine.ssh_fleet import KEY, build_host_image, host_vars


def docker(*args: str, check: bool = True) -> str:
    """`docker <args>`'s output; with ``check``, a failure raises naming the command and docker's stderr."""
    run = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if check and run.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: exit {run.returncode}: {run.stderr.strip()}")
    return run.stdout.strip()


def remove(containers: Sequence[str], network: str) -> None:
    """Remove the containers and the network, whether or not they are there."""
    for name in containers:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    subprocess.run(["docker", "network", "rm", network], capture_output=True, check=False)


@contextlib.contextmanager
def ssh_hosts(
    prefix: str, names: Sequence[str], network: str, *, docker_socket: bool = False, leftovers: Sequence[str] = ()
) -> Iterator[dict[str, str]]:
    """Start one container ``<prefix><name>`` per name on ``network``; yield name -> address once
    every sshd answers; remove them (and the network) at the end, whatever happened.
    ``docker_socket``: the host's docker CLI reaches this machine's daemon (where the test-engine
    image already is): preflight asks every host's docker, and the stages run containers.
    ``leftovers``: containers the hosts' stages make on this machine's daemon that a failed or frozen
    run may leave, removed before and after."""
    build_host_image()
    containers = [f"{prefix}{n}" for n in names]
    remove([*containers, *leftovers], network)  # a run killed earlier may have left them
    try:
        docker("network", "create", network)
        addresses = {}
        for name, container in zip(names, containers, strict=True):
            socket = ["-v", "/var/run/docker.sock:/var/run/docker.sock"] if docker_socket else []
            docker("run", "-d", "--name", container, "--network", network, *socket,
                   "-v", f"{KEY}.pub:/home/deploy/.ssh/authorized_keys:ro", IMAGE)  # fmt: skip
            addresses[name] = docker(
                "inspect", "-f", f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}', container
            )
        deadline = time.monotonic() + 60
        for name, ip in addresses.items():  # sshd answers (the host keys are made at start)
            while not ssh_fleet.answers(ip, 22):
                assert time.monotonic() < deadline, f"sshd of {name} ({ip}) never answered"
                time.sleep(1)
        yield addresses
    finally:
        for container in containers:  # a test may have frozen one
            subprocess.run(["docker", "unpause", container], capture_output=True, check=False)
        remove([*containers, *leftovers], network)


def connection(ip: str) -> dict[str, Any]:
    """The inventory variables of the SSH test host at ``ip`` (port 22): testengine.ssh_fleet's."""
    return host_vars(1, 22) | {"ansible_host": ip}


def loopback_sshd(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[int]:
    """A module's loopback SSH test hosts (testengine.ssh_fleet): its sshd container ``name`` on a free
    port, yielded; every folder of this test session (the module's, each test's tmp_path) at the same
    path on the hosts. For a module-scoped fixture: ``yield from loopback_sshd(tmp_path_factory, ...)``."""
    port = free_port()
    with ssh_fleet.loopback_sshd(name, port, shared=[tmp_path_factory.getbasetemp()]):
        yield port
