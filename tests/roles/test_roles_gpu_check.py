"""gpu_host's visible-GPU check, against a fake nvidia-smi (no GPU here): the wrong count or
arch fails naming what was seen and what the inventory expects; the right GPUs pass on to the
docker runtime check, which fails plainly when the nvidia runtime is missing."""

from __future__ import annotations

from pathlib import Path

import pytest
from roles_testlib import BIN, docker_ok, run_role_tasks


def run_check(tmp_path: Path, gpus: list[str], count: int = 8, arch: str = "120"):
    smi = tmp_path / "nvidia-smi"
    lines = "\\n".join(gpus)
    smi.write_text(f'#!/bin/sh\nprintf "{lines}\\n"\n')
    smi.chmod(0o755)
    return run_role_tasks(
        tmp_path,
        "gpu_host",
        "gpus",
        {
            "ansible_python_interpreter": str(BIN / "python"),
            "gpu_host_nvidia_smi": str(smi),
            "sglang_gpu_count": count,
            "sglang_gpu_arch": arch,
        },
    )


def test_missing_gpu_fails_with_count_and_expectation(tmp_path: Path) -> None:
    run = run_check(tmp_path, ["NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0"] * 7)
    assert run.rc != 0
    assert "shows 7 GPU(s) with compute capability sm_120" in run.out
    assert "expected sglang_gpu_count=8 of sm_120" in run.out


def test_wrong_arch_fails(tmp_path: Path) -> None:
    run = run_check(tmp_path, ["NVIDIA H200, 9.0"] * 8)
    assert run.rc != 0
    assert "compute capability sm_90" in run.out


def test_broken_nvidia_smi_says_what_to_do(tmp_path: Path) -> None:
    run = run_check(tmp_path, [], count=8)
    assert run.rc != 0
    assert "shows 0 GPU(s)" in run.out


@pytest.mark.docker
@pytest.mark.skipif(not docker_ok(), reason="no docker engine")
def test_right_gpus_reach_the_runtime_check(tmp_path: Path) -> None:
    run = run_check(tmp_path, ["NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0"] * 8)
    assert "8 x sm_120 visible" in run.out
    # This machine's docker has no nvidia runtime: the check must say so plainly.
    assert run.rc != 0
    assert "has no nvidia runtime" in run.out
    assert 'could not select device driver "" with capabilities: [[gpu]]' in run.out


def _install_check(tmp_path: Path, engines: list[str], packages: list[str] | None = None):
    extra = {
        "ansible_python_interpreter": "/usr/bin/python3",
        "gpu_host_install_toolkit": False,
        "gpu_host_docker_engine_packages": engines,
    }
    if packages is not None:
        extra["gpu_host_docker_packages"] = packages
    return run_role_tasks(tmp_path, "gpu_host", "install", extra, "--check")


def test_an_existing_docker_engine_is_kept_and_nothing_installed(tmp_path: Path) -> None:
    """docker.io Conflicts with docker-ce and moby: installing it over them removes the engine
    and stops every container. This machine's engine (Debian's docker.io) must be found and kept."""
    run = _install_check(tmp_path, ["docker-ce", "docker-ee", "moby-engine", "docker-engine", "docker.io"])
    assert run.rc == 0, run.out[-3000:]
    assert "Keeping the existing Docker engine on localhost: docker.io 20." in run.out
    install = run.out.split("TASK [gpu_host : Install the Docker engine (none present)]")[1].split("TASK [")[0]
    assert "skipping: [localhost]" in install
    # counting only docker-ce as an engine, this machine has none: the install step would run
    # (for a package it lacks: one already installed is not installed again)
    run = _install_check(tmp_path, ["docker-ce"], ["docker.io", "docker-doc"])
    install = run.out.split("TASK [gpu_host : Install the Docker engine (none present)]")[1].split("TASK [")[0]
    assert "skipping" not in install and "Keeping the existing Docker engine" not in run.out
