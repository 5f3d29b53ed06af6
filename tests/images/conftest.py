"""Fixtures for the images/ tests: the real sglang wheels, unpacked, and the docker client."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from images_testlib import NEW, OLD, fetch_wheel, image_build, unpack


@pytest.fixture(scope="session")
def wheel_old() -> Path:
    return fetch_wheel("sglang", OLD[0])


@pytest.fixture(scope="session")
def wheel_new() -> Path:
    return fetch_wheel("sglang", NEW[0])


@pytest.fixture
def tree_old(wheel_old: Path, tmp_path: Path) -> Path:
    """A fresh, fully unpacked sglang 0.5.9 wheel (5 MB: cheap per test)."""
    return unpack(wheel_old, tmp_path / "sglang-old")


@pytest.fixture(scope="module")
def tree_new(wheel_new: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fully unpacked 0.5.23 wheel (39 MB), shared by one module's tests."""
    return unpack(wheel_new, tmp_path_factory.mktemp("sglang-new"))


@pytest.fixture(scope="session")
def docker_client():
    docker = pytest.importorskip("docker")
    if shutil.which("docker") is None:
        pytest.skip("docker CLI not installed")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # the SDK raises several types for "no daemon"
        pytest.skip(f"no Docker engine: {exc}")
    return client


@pytest.fixture(scope="session")
def cpu_base(docker_client) -> str:
    try:
        docker_client.images.get(image_build.CPU_BASE)
    except Exception:
        pytest.skip(f"base image {image_build.CPU_BASE} missing: run scripts/setup.sh")
    return image_build.CPU_BASE
