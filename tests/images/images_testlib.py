"""Shared helpers of the images/ tests (a unique module name: other test folders have conftests)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "images"
PATCHES = IMAGES / "patches"
for p in (IMAGES, PATCHES):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def _load_build_module():
    """images/build.py under a name that cannot clash with PyPI's ``build`` package."""
    spec = importlib.util.spec_from_file_location("images_build", IMAGES / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["images_build"] = module
    spec.loader.exec_module(module)
    return module


image_build = _load_build_module()

# (a) a release that needs both patches, (b) the newest release scanned
OLD = ("0.5.9", "0.6.3")
NEW = ("0.5.23", "0.7.2")


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/simple/sglang/", timeout=10):
            return True
    except OSError:
        return False


def fetch_wheel(dist: str, version: str) -> Path:
    """The cached wheel (.cache/wheels); downloaded once. Skips only when PyPI is unreachable."""
    try:
        return image_build.ensure_wheel(dist, version)
    except image_build.BuildError as exc:
        if not _pypi_reachable():
            pytest.skip(f"PyPI is unreachable, cannot download {dist}=={version}: {exc}")
        raise


def unpack(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dest)
    return dest


def run_tool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The patch tool as the Dockerfile runs it: a separate process, exit status and stderr."""
    return subprocess.run(
        [sys.executable, str(PATCHES / "apply.py"), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )
