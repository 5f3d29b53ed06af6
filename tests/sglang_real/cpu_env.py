"""Build (once) the CPU environment the tests of tests/sglang_real/ run real SGLang releases in.

Why a second environment: SGLang's own parser and ``ServerArgs`` import torch, triton and
transformers, and each release pins its own transformers. The project's venv (Python 3.12, the
Ansible controller's) stays small; this one is Python 3.11, for which a CPU build of PyTorch
lies on these machines' disk (a CUDA build would be several GB).

    .cache/sglang-cpu/venv/                   requirements-cpu.txt, installed without resolving
    .cache/sglang-cpu/<release>/sglang/       the release's PyPI wheel, unpacked (images/build.py's cache)
    .cache/sglang-cpu/<release>/site/         overlay-<release>.txt (transformers & co. of that release)

Safe to run twice and from parallel test workers (a file lock; stamps of the requirement files).

    python tests/sglang_real/cpu_env.py 0.5.17 0.5.23
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from filelock import FileLock

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ROOT = REPO / ".cache" / "sglang-cpu"
RELEASES = ("0.5.17", "0.5.23")
PY311 = ("python3.11", str(Path.home() / ".pyenv/versions/3.11.7/bin/python3.11"), "/usr/bin/python3.11")


def _log(msg: str) -> None:
    print(f"[sglang-cpu] {msg}", file=sys.stderr, flush=True)


def _stamp(*files: Path) -> str:
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()


def _python311() -> str:
    for cand in PY311:
        path = shutil.which(cand) or (cand if Path(cand).is_file() else None)
        check = [path or "", "-c", "import sys; assert sys.version_info[:2] == (3, 11)"]
        if path and subprocess.run(check, capture_output=True, check=False).returncode == 0:
            return path
    raise SystemExit("tests/sglang_real needs Python 3.11 (the CPU PyTorch wheel's interpreter): none found")


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def _wheel(release: str) -> Path:
    """sglang's PyPI wheel, from images/build.py's download cache (.cache/wheels)."""
    spec = importlib.util.spec_from_file_location("images_build_for_cpu_env", REPO / "images" / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.ensure_wheel("sglang", release)


def venv_python() -> Path:
    return ROOT / "venv" / "bin" / "python"


def pythonpath(release: str) -> str:
    return f"{ROOT / release / 'sglang'}:{ROOT / release / 'site'}"


def ensure(releases: tuple[str, ...] = RELEASES) -> None:
    ROOT.mkdir(parents=True, exist_ok=True)
    with FileLock(str(ROOT / ".lock")):
        base = HERE / "requirements-cpu.txt"
        stamp = ROOT / "venv" / ".stamp"
        if not stamp.is_file() or stamp.read_text() != _stamp(base):
            _log("creating .cache/sglang-cpu/venv (CPU PyTorch, triton, SGLang's import-time needs)")
            shutil.rmtree(ROOT / "venv", ignore_errors=True)
            _run([_python311(), "-m", "venv", str(ROOT / "venv")])
            _run([str(venv_python()), "-m", "pip", "install", "-q", "--no-deps", "-r", str(base)])
            stamp.write_text(_stamp(base))
        for release in releases:
            overlay = HERE / f"overlay-{release}.txt"
            dest = ROOT / release
            stamp = dest / ".stamp"
            wheel = _wheel(release)
            want = _stamp(overlay) + wheel.name
            if stamp.is_file() and stamp.read_text() == want:
                continue
            _log(f"unpacking {wheel.name} and installing {overlay.name}")
            shutil.rmtree(dest, ignore_errors=True)
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(dest / "sglang")
            _run([str(venv_python()), "-m", "pip", "install", "-q", "--no-deps", "--target", str(dest / "site"),
                  "-r", str(overlay)])  # fmt: skip
            stamp.write_text(want)


if __name__ == "__main__":
    ensure(tuple(sys.argv[1:]) or RELEASES)
