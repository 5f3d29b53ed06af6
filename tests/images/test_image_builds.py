"""Real docker builds: the production Dockerfile's CPU-test variant and the test-engine releases."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from images_testlib import IMAGES, OLD, fetch_wheel, image_build

pytestmark = pytest.mark.docker

CPU_TAG = "local/sglang-glm5:cpu-test"
PREFIX = "io.sglang-deploy."


def build(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(IMAGES / "build.py"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def read_in_image(client, tag: str, script: str, user: str | None = None) -> str:
    # not run(remove=True): that leaves the image's VOLUME behind as an anonymous volume
    container = client.containers.run(tag, entrypoint=["python3", "-c"], command=[script], detach=True, user=user)
    try:
        result = container.wait(timeout=120)
        out = container.logs(stdout=True, stderr=False).decode()
        assert result["StatusCode"] == 0, container.logs().decode()
        return out
    finally:
        container.remove(v=True, force=True)


def record_of(client, tag: str) -> dict:
    return json.loads(read_in_image(client, tag, "print(open('/etc/sglang-deploy/patches.json').read())"))


def label_of(record: dict) -> str:
    return ",".join(f"{k}={v['status']}" for k, v in sorted(record["fixes"].items()))


@pytest.fixture(scope="module")
def cpu_image(docker_client, cpu_base):
    fetch_wheel("sglang", OLD[0])
    fetch_wheel("flashinfer-python", OLD[1])
    build("sglang-cpu-test", "--tag", CPU_TAG)
    return docker_client.images.get(CPU_TAG)


@pytest.mark.network
def test_cpu_test_image_labels_match_the_computed_record(cpu_image, docker_client):
    labels = cpu_image.labels
    assert labels[PREFIX + "engine"] == "sglang"
    assert labels[PREFIX + "install-mode"] == "cpu-test"
    assert (labels[PREFIX + "sglang.version"], labels[PREFIX + "flashinfer.version"]) == OLD
    assert labels[PREFIX + "cuda.version"] == "12.9"
    for oci in ("title", "version", "source", "revision", "created", "licenses", "base.name"):
        assert labels.get(f"org.opencontainers.image.{oci}"), f"OCI label {oci} missing"
    record = record_of(docker_client, CPU_TAG)
    assert record["engine"] == "sglang" and record["sglang_version"] == OLD[0]
    assert record["flashinfer_version"] == OLD[1] and record["cuda_version"] == "12.9"
    assert {k: v["status"] for k, v in record["fixes"].items()} == {
        "autotune-flashinfer-cutlass": "applied",
        "dsa-fp8-page-table-guard": "applied",
    }
    assert labels[PREFIX + "patches"] == label_of(record)


@pytest.mark.network
def test_cpu_test_image_patched_files_are_marked_and_byte_compiled(cpu_image, docker_client):
    script = r"""
import json, pathlib, struct, sysconfig, sys
site = pathlib.Path(sysconfig.get_paths()["purelib"])
rec = json.load(open("/etc/sglang-deploy/patches.json"))
tag = sys.implementation.cache_tag
for fix, v in rec["fixes"].items():
    for rel in v["files"]:
        src = site / rel
        assert f"sglang-deploy patch {fix}" in src.read_text(), rel
        pyc = src.parent / "__pycache__" / f"{src.stem}.{tag}.pyc"
        head = pyc.read_bytes()[:16]
        mtime, size = struct.unpack("<II", head[8:16])
        st = src.stat()
        assert (mtime, size) == (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF), rel
        print("ok", rel)
"""
    out = read_in_image(docker_client, CPU_TAG, script)
    assert out.count("ok ") == 2, out


@pytest.mark.network
def test_cpu_test_image_runtime_contract(cpu_image, docker_client):
    cfg = cpu_image.attrs["Config"]
    assert cfg["Entrypoint"] == ["python3", "-m", "sglang.launch_server"]
    assert "/root/.cache/flashinfer" in (cfg.get("Volumes") or {})
    assert cfg["Healthcheck"]["Test"][-1].endswith("healthcheck.py")
    env = dict(e.split("=", 1) for e in cfg["Env"])
    assert env["SGLANG_CACHE_DIR"].startswith("/root/.cache/flashinfer")
    assert env["FLASHINFER_WORKSPACE_BASE"] == "/root"
    assert env["SGLANG_JIT_CACHE_DIR"] == "/root/.cache/flashinfer/sglang/jit"  # SGLang >= 0.5.18's own JIT
    link = read_in_image(docker_client, CPU_TAG, "import os;print(os.readlink('/tmp/root/cutlass_python_cache'))")
    assert link.strip() == "/root/.cache/flashinfer/cute-dsl/cutlass_python_cache"  # CuTe DSL builds land in the volume
    # non-root capable: an arbitrary uid can read the record and write the cache volume
    out = read_in_image(
        docker_client,
        CPU_TAG,
        "import json;json.load(open('/etc/sglang-deploy/patches.json'));"
        "open('/root/.cache/flashinfer/probe','w').write('x');print('ok')",
        user="1234:1234",
    )
    assert out.strip() == "ok"


def _smoke_in(client, tag: str, python: str) -> tuple[int, str]:
    """images/sglang/smoke.py --mode cpu-test under ``python`` in ``tag`` (the script passed with -c)."""
    script = (IMAGES / "sglang" / "smoke.py").read_text()
    container = client.containers.run(
        tag, entrypoint=[python, "-c"], command=[script, "--mode", "cpu-test"],
        detach=True, network_disabled=True,
    )  # fmt: skip
    try:
        code = container.wait(timeout=120)["StatusCode"]
        return code, container.logs().decode()
    finally:
        container.remove(v=True, force=True)


@pytest.mark.network
def test_cpu_test_image_can_compile_against_python_h(cpu_image, docker_client):
    """The runtime stage has the headers and a compiler Triton builds its launcher with (the build ran it too)."""
    code, out = _smoke_in(docker_client, CPU_TAG, "/opt/venv/bin/python")
    assert code == 0 and "image smoke: ok (Python.h, a C extension)" in out, out


def test_the_smoke_step_fails_an_image_without_python_headers(docker_client):
    """The test-engine image (scripts/setup.sh builds it) is bookworm's python3 without python3-dev."""
    code, out = _smoke_in(docker_client, f"{image_build.TEST_ENGINE_REPO}:release-a", "python3")
    assert code == 1, out
    assert "image smoke: FAIL no Python.h in /usr/include/python3.11" in out, out


@pytest.mark.network
def test_rebuild_with_same_inputs_is_skipped(cpu_image, docker_client):
    proc = build("sglang-cpu-test", "--tag", CPU_TAG)
    assert "up to date" in proc.stderr
    assert docker_client.images.get(CPU_TAG).id == cpu_image.id


@pytest.fixture(scope="module")
def test_engine_images(docker_client, cpu_base):
    build("test-engine", "--release", "all")
    return {
        key: docker_client.images.get(f"{image_build.TEST_ENGINE_REPO}:{rel.tag}")
        for key, rel in image_build.TEST_ENGINE_RELEASES.items()
    }


@pytest.mark.parametrize("key", sorted(image_build.TEST_ENGINE_RELEASES))
def test_test_engine_release_labels_and_record(test_engine_images, docker_client, key):
    rel = image_build.TEST_ENGINE_RELEASES[key]
    image = test_engine_images[key]
    labels = image.labels
    assert labels[PREFIX + "engine"] == "test-engine"
    assert labels[PREFIX + "sglang.version"] == rel.sglang
    assert labels[PREFIX + "flashinfer.version"] == rel.flashinfer
    assert labels[PREFIX + "cuda.version"] == rel.cuda
    assert "not SGLang" in labels["org.opencontainers.image.description"]
    record = record_of(docker_client, image.tags[0])
    assert record["engine"] == "test-engine"
    assert (record["sglang_version"], record["flashinfer_version"], record["cuda_version"]) == (
        rel.sglang,
        rel.flashinfer,
        rel.cuda,
    )
    assert {k: v["status"] for k, v in record["fixes"].items()} == rel.fixes
    assert labels[PREFIX + "patches"] == label_of(record)
    assert image.attrs["Config"]["Entrypoint"] == ["python3", "-m", "testengine"]
    # it refuses what the release it poses as refuses: a wrong flag fails a deploy, never passes silently
    env = dict(e.split("=", 1) for e in image.attrs["Config"]["Env"])
    assert env["TEST_ENGINE_SGLANG_VERSION"] == rel.sglang
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", image.tags[0], "--enable-warp-drive"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "unrecognized arguments: --enable-warp-drive" in proc.stderr


def test_release_c_is_the_one_without_the_guard():
    statuses = {k: r.fixes["dsa-fp8-page-table-guard"] for k, r in image_build.TEST_ENGINE_RELEASES.items()}
    assert statuses == {"a": "applied", "b": "applied", "c": "absent"}


def test_test_engine_container_turns_healthy(test_engine_images, docker_client):
    """HEALTHCHECK reads the port from the command line; no port is published to the host."""
    container = docker_client.containers.run(
        test_engine_images["a"].tags[0],
        command=["--host", "0.0.0.0", "--port", "30123"],
        detach=True,
        name=f"images-test-health-{time.time_ns()}",
    )
    try:
        deadline = time.monotonic() + 90
        status = "starting"
        while time.monotonic() < deadline:
            container.reload()
            status = container.attrs["State"].get("Health", {}).get("Status", "none")
            if status in ("healthy", "unhealthy") or container.status == "exited":
                break
            time.sleep(2)
        assert status == "healthy", container.logs(tail=30).decode()
    finally:
        container.remove(v=True, force=True)
