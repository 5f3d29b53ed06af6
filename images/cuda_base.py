"""The local CUDA 13.0 devel base's build context: the CUDA wheels of the image's lock, and a CPython 3.12.

Why a local base: the production Dockerfile's default base, nvidia/cuda:13.0.1-devel-ubuntu24.04,
needs a container registry; build hosts (and this project's CI machines) that cannot reach one make
an equivalent from Debian's mirror and the package index: images/cuda-base/Dockerfile. What differs
from nvidia/cuda is written in images/README.md (Debian 12's glibc 2.36 and gcc 12 instead of
Ubuntu's 2.39 and gcc 13; the toolkit 13.0.3 from NVIDIA's wheels; a generated driver stub).

The interpreter: Debian packages no CPython 3.12 (bookworm 3.11, trixie 3.13) and SGLang 0.5.23
cannot run on 3.13 from wheels (outlines-core 0.1.26), so the build copies a CPython 3.12 tree
built for Debian 12 (``--python-root``; by default the build host's pyenv 3.12, as scripts/setup.sh
finds it for the controller). Its site-packages are left behind: the image's venv brings its own.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import wheelhouse

HERE = Path(__file__).resolve().parent
PYTHON_CANDIDATES = ("~/.pyenv/versions/3.12*", "/usr/local", "/usr")
# not needed at run time, and large or GUI-only: the test suite, IDLE, Tk, 2to3's grammar tests
SKIP_DIRS = {"test", "idlelib", "tkinter", "turtledemo", "__pycache__", "site-packages"}


class BaseError(Exception):
    """The CPython tree or the CUDA wheels for the base are not usable; the message says why."""


def _version_of(root: Path) -> str | None:
    exe = root / "bin" / f"python{wheelhouse.PYTHON}"
    if not exe.is_file():
        return None
    probe = (
        "import os, sys, sysconfig; h = os.path.join(sysconfig.get_paths()['include'], 'Python.h'); "
        "print('%d.%d' % sys.version_info[:2], os.path.isfile(h), bool(sysconfig.get_config_var('Py_ENABLE_SHARED')))"
    )
    proc = subprocess.run([str(exe), "-c", probe], capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def python_root(given: Path | None) -> Path:
    """The CPython 3.12 prefix to copy: ``given``, or the first candidate that is one."""
    candidates = [given] if given else [p for pat in PYTHON_CANDIDATES for p in sorted(Path("/").glob(
        str(Path(pat).expanduser()).lstrip("/")))]  # fmt: skip
    for root in candidates:
        facts = _version_of(root)
        if facts == f"{wheelhouse.PYTHON} True True":
            return root
        if given:
            raise BaseError(
                f"--python-root {root}: needs bin/python{wheelhouse.PYTHON} of CPython {wheelhouse.PYTHON} with "
                f"its headers (Python.h) and a shared libpython; found {facts or 'no such interpreter'}"
            )
    raise BaseError(
        f"no CPython {wheelhouse.PYTHON} with headers and a shared libpython among {', '.join(PYTHON_CANDIDATES)}: "
        f"pass --python-root PREFIX (a 3.12 built for Debian 12, e.g. `pyenv install 3.12`)"
    )


def _ignore(directory: str, names: list[str]) -> set[str]:
    skipped = {n for n in names if n in SKIP_DIRS or n.endswith((".pyc", ".pyo"))}
    if Path(directory).name == "site-packages":
        skipped |= set(names)
    return skipped


def stage(ctx: Path, python: Path) -> None:
    """Fill the base's build context: Dockerfile, stub generator, cuda.lock + its wheels, python/."""
    for name in ("Dockerfile", "libcuda_stub.py"):
        shutil.copy2(HERE / "cuda-base" / name, ctx / name)
    wheelhouse.sub_lock(wheelhouse.CUDA_BASE_PACKAGES, ctx / "cuda.lock")
    pins = wheelhouse.read_lock()
    (ctx / "wheels").mkdir()
    for name in wheelhouse.CUDA_BASE_PACKAGES:
        pin = pins[name]
        stem = f"{name.replace('-', '_')}-{pin.version}-"
        found = sorted(wheelhouse.WHEELHOUSE.glob(f"{stem}*.whl"))
        if not found:
            raise BaseError(f"no wheel {stem}*.whl in {wheelhouse.WHEELHOUSE}: the wheelhouse download did not run")
        try:
            (ctx / "wheels" / found[0].name).hardlink_to(found[0])
        except OSError:
            shutil.copy2(found[0], ctx / "wheels" / found[0].name)
    _stage_python(python, ctx / "python")


def _stage_python(root: Path, dest: Path) -> None:
    """The interpreter as a /usr/local overlay, laid out as `make install --prefix=/usr/local` (and the
    official python images) lay it out: bin/python3.12 (+ python3), lib/libpython3.12.so*, the
    standard library and include/python3.12. CPython finds its library relative to the executable, so
    the prefix it was built for does not matter; a venv made from /usr/local/bin/python3 finds it too."""
    version = wheelhouse.PYTHON
    for sub in ("bin", "lib", "include"):
        (dest / sub).mkdir(parents=True)
    shutil.copy2(root / "bin" / f"python{version}", dest / "bin" / f"python{version}")
    (dest / "bin" / "python3").symlink_to(f"python{version}")
    for lib in sorted((root / "lib").glob(f"libpython{version}.so*")):
        shutil.copy2(lib, dest / "lib" / lib.name, follow_symlinks=False)
    shutil.copytree(root / "lib" / f"python{version}", dest / "lib" / f"python{version}", symlinks=True, ignore=_ignore)
    (dest / "lib" / f"python{version}" / "site-packages").mkdir(exist_ok=True)
    shutil.copytree(root / "include" / f"python{version}", dest / "include" / f"python{version}", symlinks=True)
