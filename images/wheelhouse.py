"""The GPU image's Python dependency set: one hash-pinned lock, its wheels, and a loopback index.

Why a lock: sglang 0.5.23 pulls about 200 packages (torch 2.14.1 with NVIDIA's CUDA 13.0 wheels,
sglang-kernel, FlashInfer, DeepGEMM, ...). Resolved by pip at build time, a rebuild next month
gets other wheels; pinned with their sha256, every build installs the same bytes or fails.

    python3 images/build.py lock        # re-resolve (uv) into images/sglang/requirements.lock

The lock's inputs are the release pins (sglang, flashinfer-python), the CUDA toolkit wheels that
pin nvcc & co. to the runtime torch brings (``cuda-toolkit[...]``), and the gate's own runtime
needs, read from pyproject.toml's ``[project] dependencies`` (one list: the controller's venv and the
image install the same names). The wheels are for CPython 3.12 on x86-64 glibc >= 2.34
(sglang 0.5.23 ships only manylinux_2_34 wheels; outlines-core 0.1.26, which it pins through
outlines 0.1.11, has no wheel for 3.13).

Build hosts without the package index (and this project's CI machines, whose containers do not
share the host's proxy certificates) download the wheels on the host once (``download``) and serve
them to ``docker build --network host`` from 127.0.0.1 (``serve``); the Dockerfile installs with
``--no-index --require-hashes`` either way.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LOCK = HERE / "sglang" / "requirements.lock"
PYTHON = "3.12"
# where `download` keeps the lock's wheels between builds (git-ignored)
WHEELHOUSE = REPO / ".cache" / "wheelhouse" / "py312"
# `serve`'s port: fixed, because the Dockerfile's PIP_FIND_LINKS is a build argument and docker's
# layer cache keys on it (a new port each build would reinstall 4 GB of wheels every time)
PORT = 38731
# sglang 0.5.23's wheels are manylinux_2_34: the oldest glibc the image's base may have
GLIBC = (2, 34)
# nvcc, its C runtime and headers, cudart and NVRTC at the versions torch's CUDA 13.0 runtime
# brings (an unpinned nvcc, pulled by humming-kernels, would resolve to the newest toolkit)
CUDA_TOOLKIT = "cuda-toolkit[nvcc,cudart,crt,cccl,nvrtc]==13.0.3"
# what the local CUDA base lays out under /usr/local/cuda (images/cuda-base/)
CUDA_BASE_PACKAGES = (
    "nvidia-cuda-nvcc",
    "nvidia-cuda-crt",
    "nvidia-cuda-runtime",
    "nvidia-cuda-cccl",
    "nvidia-cuda-nvrtc",
    "nvidia-nvvm",
)


class LockError(Exception):
    """The lock is missing, stale for the asked release, or its wheels could not be fetched."""


@dataclass(frozen=True)
class Pin:
    """One ``name==version`` of the lock with the sha256 of every file pip may pick for it."""

    name: str
    version: str
    hashes: tuple[str, ...]

    def requirement(self) -> str:
        hashes = " ".join(f"--hash=sha256:{h}" for h in self.hashes)
        return f"{self.name}=={self.version} {hashes}"


def canonical(name: str) -> str:
    """PEP 503 name: what pip compares."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path = LOCK) -> dict[str, Pin]:
    """The pins of a ``--generate-hashes`` requirements file, by canonical name."""
    if not path.is_file():
        raise LockError(f"{path}: no lock; make it with `python3 images/build.py lock`")
    text = re.sub(r"\\\n", " ", path.read_text())
    pins: dict[str, Pin] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)\s*(.*)", line)
        if not m:
            raise LockError(f"{path}: a line that is no `name==version --hash=...` pin: {line[:80]!r}")
        hashes = tuple(re.findall(r"--hash=sha256:([0-9a-f]{64})", m.group(3)))
        if not hashes:
            raise LockError(f"{path}: {m.group(1)}=={m.group(2)} has no --hash (pip --require-hashes refuses it)")
        pins[canonical(m.group(1))] = Pin(canonical(m.group(1)), m.group(2), hashes)
    return pins


def gate_requirements(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """The gate's runtime needs: pyproject.toml's ``[project] dependencies`` (the one list)."""
    return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])


def lock_inputs(sglang: str, flashinfer: str) -> list[str]:
    return [f"sglang=={sglang}", f"flashinfer-python=={flashinfer}", CUDA_TOOLKIT, *gate_requirements()]


def check_release(pins: dict[str, Pin], sglang: str, flashinfer: str, path: Path = LOCK) -> None:
    """The lock must be of the release the build asks for: a stale lock fails, naming the fix."""
    for name, want in (("sglang", sglang), ("flashinfer-python", flashinfer)):
        got = pins.get(name)
        if got is None or got.version != want:
            have = got.version if got else "nothing"
            raise LockError(
                f"{path.name} pins {name} {have}, the build asks for {want}: "
                f"re-resolve with `python3 images/build.py lock --sglang-version {sglang} "
                f"--flashinfer-version {flashinfer}` and review the diff"
            )


def compile_lock(sglang: str, flashinfer: str, out: Path = LOCK) -> None:
    """Resolve the inputs for CPython 3.12 / manylinux_2_34 x86-64 with uv (a cross-target resolver:
    pip can only resolve for the interpreter it runs in) and write the hash-pinned lock."""
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(uv).exists():
        raise LockError("uv is not installed (it is in requirements.txt: run scripts/setup.sh)")
    inputs = out.with_suffix(".in")
    header = "# The lock's inputs (images/wheelhouse.py); `python3 images/build.py lock` rewrites both files\n"
    inputs.write_text(header + "\n".join(lock_inputs(sglang, flashinfer)) + "\n")
    cmd = [uv, "pip", "compile", str(inputs), "--python-version", PYTHON,
           "--python-platform", f"x86_64-manylinux_{GLIBC[0]}_{GLIBC[1]}", "--generate-hashes",
           "--no-build", "--custom-compile-command", "python3 images/build.py lock", "-o", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=out.parent)
    if proc.returncode != 0:
        raise LockError(f"uv could not resolve {inputs.name}: {proc.stderr.strip()[-1500:]}")


def _platforms() -> list[str]:
    """pip download matches --platform tags exactly: every manylinux tag a 2.34 glibc runs."""
    tags = ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64", "linux_x86_64"]
    return tags + [f"manylinux_2_{minor}_x86_64" for minor in range(5, GLIBC[1] + 1)]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def missing(dest: Path, pins: dict[str, Pin]) -> list[Pin]:
    """The pins without a wheel in ``dest`` whose sha256 is one the lock allows."""
    have: dict[str, list[Path]] = {}
    for wheel in dest.glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        have.setdefault(f"{canonical(name)}=={version}", []).append(wheel)
    return [
        pin
        for pin in pins.values()
        if not any(_sha256(w) in pin.hashes for w in have.get(f"{pin.name}=={pin.version}", []))
    ]


def download(dest: Path = WHEELHOUSE, lock: Path = LOCK) -> list[Path]:
    """Every wheel of the lock into ``dest`` (kept between builds: only missing ones are fetched).

    ``--no-deps`` with the complete lock, ``--only-binary`` (nothing is compiled), hashes checked.
    A machine-wide pip constraint file (some hosts cap torch) must not change what the lock pins,
    so PIP_CONSTRAINT points at an empty file for this call."""
    pins = read_lock(lock)
    dest.mkdir(parents=True, exist_ok=True)
    todo = missing(dest, pins)
    if todo:
        requirements = dest / ".missing.txt"
        requirements.write_text("".join(pin.requirement() + "\n" for pin in todo))
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--require-hashes", "--python-version", PYTHON, "--implementation", "cp", "-d", str(dest),
               "-r", str(requirements)]  # fmt: skip
        for tag in _platforms():
            cmd += ["--platform", tag]
        env = {**os.environ, "PIP_CONSTRAINT": os.devnull}
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        requirements.unlink()
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if "WARNING: Location" not in ln]
            raise LockError(f"pip could not download the locked wheels into {dest}: {' '.join(lines)[-1500:]}")
        still = missing(dest, pins)
        if still:
            raise LockError(f"{dest}: no wheel with a locked sha256 for {', '.join(p.name for p in still)}")
    return sorted(dest.glob("*.whl"))


def sub_lock(names: tuple[str, ...], out: Path, lock: Path = LOCK) -> None:
    """The lines of the lock for ``names`` only (the CUDA base installs this part of the same lock)."""
    pins = read_lock(lock)
    missing = [n for n in names if n not in pins]
    if missing:
        raise LockError(f"{lock.name} has no pin for {', '.join(missing)}")
    out.write_text("".join(pins[n].requirement() + "\n" for n in names))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return None


@contextlib.contextmanager
def serve(directory: Path, port: int = PORT) -> Iterator[str]:
    """A read-only ``--find-links`` index of ``directory`` on 127.0.0.1:``port`` for as long as the
    block runs; ``docker build --network host`` reaches it, nothing beyond this host does."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        raise LockError(f"cannot serve the wheelhouse on 127.0.0.1:{port} ({exc}): pass --wheelhouse-port") from exc
    thread = threading.Thread(target=server.serve_forever, name="wheelhouse", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
