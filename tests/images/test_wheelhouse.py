"""The GPU image's lock, its wheelhouse, the local CUDA base's pieces: checked without building the image.

The lock (images/sglang/requirements.lock) is what the Dockerfile installs with --require-hashes; these
tests read the committed file itself, so a hand edit or a stale re-resolve fails here, in CI, rather than
in a 30-minute build.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import cuda_base
import pytest
import wheelhouse
from images_testlib import IMAGES
from packaging.requirements import Requirement

REPO = IMAGES.parent
DOCKERFILE = (IMAGES / "sglang" / "Dockerfile").read_text()


@pytest.fixture(scope="module")
def pins() -> dict[str, wheelhouse.Pin]:
    return wheelhouse.read_lock()


def test_the_lock_is_of_the_release_the_dockerfile_builds(pins) -> None:
    sglang = re.search(r"^ARG SGLANG_VERSION=(\S+)", DOCKERFILE, re.M).group(1)
    flashinfer = re.search(r"^ARG FLASHINFER_VERSION=(\S+)", DOCKERFILE, re.M).group(1)
    wheelhouse.check_release(pins, sglang, flashinfer)  # raises on a stale lock
    assert (pins["sglang"].version, pins["flashinfer-python"].version) == ("0.5.23", "0.7.2")
    with pytest.raises(wheelhouse.LockError, match=r"pins sglang 0.5.23, the build asks for 0.5.22: re-resolve with"):
        wheelhouse.check_release(pins, "0.5.22", flashinfer)


def test_every_pin_has_hashes_and_the_set_is_complete(pins) -> None:
    """pip --require-hashes --no-deps installs exactly this set: every name pinned once, with sha256s,
    and every requirement of sglang and flashinfer that applies on Linux x86-64 / CPython 3.12 in it."""
    assert len(pins) > 150 and all(p.hashes and all(len(h) == 64 for h in p.hashes) for p in pins.values())
    for name in ("torch", "triton", "sglang-kernel", "sgl-deep-gemm", "cuda-python", "transformers", "outlines-core"):
        assert name in pins, name
    assert pins["torch"].version == "2.14.1"


def test_the_gates_needs_come_from_pyproject_and_are_satisfied(pins) -> None:
    """One list: pyproject.toml's dependencies are resolved into the image, each within its specifier."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert deps == wheelhouse.gate_requirements() and "google-re2>=1.1" in deps
    for dep in deps:
        req = Requirement(dep)
        pin = pins[wheelhouse.canonical(req.name)]
        assert req.specifier.contains(pin.version), (dep, pin.version)
    assert "matplotlib" not in pins  # the optional plots extra stays out of the serving image
    inputs = (IMAGES / "sglang" / "requirements.in").read_text().splitlines()
    assert [line for line in inputs if not line.startswith("#")] == wheelhouse.lock_inputs("0.5.23", "0.7.2")


def test_nvcc_and_its_headers_are_the_cuda_release_torch_runs_on(pins) -> None:
    """nvcc (FlashInfer's JIT), its C runtime headers and NVVM are the 13.0 series of the cudart torch
    brings: an unpinned nvcc would resolve to the newest toolkit (humming-kernels pulls it)."""
    series = {name: ".".join(pins[name].version.split(".")[:2]) for name in wheelhouse.CUDA_BASE_PACKAGES}
    assert set(series.values()) == {"13.0"}, series
    assert pins["cuda-toolkit"].version.startswith("13.0.")


def test_sub_lock_takes_the_lines_of_the_same_lock(pins, tmp_path: Path) -> None:
    out = tmp_path / "cuda.lock"
    wheelhouse.sub_lock(wheelhouse.CUDA_BASE_PACKAGES, out)
    lines = out.read_text().splitlines()
    assert len(lines) == len(wheelhouse.CUDA_BASE_PACKAGES)
    assert lines[0] == pins["nvidia-cuda-nvcc"].requirement()
    with pytest.raises(wheelhouse.LockError, match="has no pin for no-such-package"):
        wheelhouse.sub_lock(("no-such-package",), out)


def test_read_lock_refuses_a_pin_without_a_hash(tmp_path: Path) -> None:
    bad = tmp_path / "r.lock"
    bad.write_text("numpy==2.3.5 \\\n    --hash=sha256:" + "a" * 64 + "\nsix==1.16.0\n")
    with pytest.raises(wheelhouse.LockError, match=r"six==1.16.0 has no --hash"):
        wheelhouse.read_lock(bad)
    with pytest.raises(wheelhouse.LockError, match="no lock; make it with"):
        wheelhouse.read_lock(tmp_path / "missing.lock")


def test_missing_counts_only_wheels_whose_sha256_the_lock_allows(tmp_path: Path) -> None:
    good = tmp_path / "demo_pkg-1.0-py3-none-any.whl"
    good.write_bytes(b"wheel bytes")
    digest = hashlib.sha256(b"wheel bytes").hexdigest()
    pins = {
        "demo-pkg": wheelhouse.Pin("demo-pkg", "1.0", (digest,)),
        "other": wheelhouse.Pin("other", "2", ("b" * 64,)),
    }
    assert [p.name for p in wheelhouse.missing(tmp_path, pins)] == ["other"]
    good.write_bytes(b"tampered")
    assert [p.name for p in wheelhouse.missing(tmp_path, pins)] == ["demo-pkg", "other"]


def test_serve_is_a_loopback_find_links_index(tmp_path: Path) -> None:
    (tmp_path / "x-1.0-py3-none-any.whl").write_bytes(b"w")
    with wheelhouse.serve(tmp_path, port=0) as url:
        assert url.startswith("http://127.0.0.1:")
        listing = urllib.request.urlopen(url, timeout=5).read().decode()
        assert 'href="x-1.0-py3-none-any.whl"' in listing
        assert urllib.request.urlopen(url + "x-1.0-py3-none-any.whl", timeout=5).read() == b"w"


def test_the_dockerfile_installs_the_lock_with_hashes_and_checks_it() -> None:
    assert "--no-deps --require-hashes -r /opt/sglang-deploy/requirements.lock" in DOCKERFILE
    assert "/opt/venv/bin/pip check" in DOCKERFILE
    # the label-only build arguments come last, so a new build date rebuilds no layer
    assert DOCKERFILE.index("ARG BUILD_DATE") > DOCKERFILE.index("COPY validate/")
    assert DOCKERFILE.index("COPY validate/") > DOCKERFILE.index("smoke.py --mode")


def test_the_local_base_takes_a_cpython_312_with_headers(tmp_path: Path) -> None:
    root = cuda_base.python_root(None)
    assert (root / "bin" / "python3.12").is_file()
    cuda_base._stage_python(root, tmp_path / "python")
    staged = tmp_path / "python"
    assert (staged / "bin" / "python3").resolve().name == "python3.12"
    assert (staged / "include" / "python3.12" / "Python.h").is_file()
    assert list((staged / "lib").glob("libpython3.12.so*"))
    assert not any((staged / "lib" / "python3.12" / "site-packages").iterdir())  # the host's packages stay behind
    assert not (staged / "lib" / "python3.12" / "test").exists()
    with pytest.raises(cuda_base.BaseError, match=r"--python-root /usr: needs bin/python3.12 of CPython 3.12"):
        cuda_base.python_root(Path("/usr"))


@pytest.mark.network
def test_the_driver_stub_exports_the_driver_api_of_the_locked_toolkit(pins, tmp_path: Path) -> None:
    """libcuda_stub.py on the cuda.h of the locked nvidia-cuda-runtime wheel (2 MB, downloaded by hash):
    every entry point under each name a caller links, soname libcuda.so.1, each returning 34."""
    req = tmp_path / "r.txt"
    req.write_text(pins["nvidia-cuda-runtime"].requirement() + "\n")
    download = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                "--require-hashes", "-d", str(tmp_path), "-r", str(req)]  # fmt: skip
    subprocess.run(download, check=True, capture_output=True)
    wheel = next(tmp_path.glob("nvidia_cuda_runtime-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        zf.extract("nvidia/cu13/include/cuda.h", tmp_path)
    sys.path.insert(0, str(IMAGES / "cuda-base"))
    import libcuda_stub

    out = tmp_path / "libcuda.so"
    count = libcuda_stub.build(tmp_path / "nvidia/cu13/include/cuda.h", out)
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(out)], capture_output=True, text=True, check=True)
    names = {line.split()[-1] for line in symbols.stdout.splitlines()}
    assert count == len(names) > 500
    assert {
        "cuInit",
        "cuMemAlloc",
        "cuMemAlloc_v2",
        "cuLaunchKernel",
        "cuLaunchKernel_ptsz",
        "cuGetProcAddress",
    } <= names
    soname = subprocess.run(["readelf", "-d", str(out)], capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libcuda.so.1]" in soname
    import ctypes

    lib = ctypes.CDLL(str(out))
    assert lib.cuInit(0) == 34  # CUDA_ERROR_STUB_LIBRARY
