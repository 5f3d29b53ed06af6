"""A separate venv holding ``sglang`` (``--no-deps``) and only what ``sglang.bench_serving`` imports.

bench_serving is the yardstick the gate's client is compared with; it lives in its
own venv under .cache/ (git-ignored) so the project venv stays small. Torch is not
installed: the two bench_serving imports that pull it in (``sglang/__init__.py`` and
``sglang.srt.disaggregation.utils``, which only supplies FAKE_BOOTSTRAP_HOST) are
bypassed by the runner, see _bench_serving_runner.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".cache" / "bench-serving-venv"
SGLANG = "sglang==0.5.23"
# What sglang/benchmark/serving.py imports, directly or through its datasets/utils modules.
DEPS = [
    "aiohttp==3.14.5",
    "numpy==2.5.5",
    "requests==2.34.2",
    "tqdm==4.70.1",
    "orjson==3.13.0",
    "msgspec==0.23.0",
    "transformers==5.19.0",
    "tokenizers==0.23.2",
    "pybase64==1.5.1",
    "pillow==13.0.0",
    "datasets==5.2.0",
    "psutil==7.2.2",
    "pyzmq==27.3.0",
]


def python() -> Path:
    return VENV / "bin" / "python"


def ensure() -> Path:
    """Create the venv on first use (about a minute, from PyPI); later runs reuse it."""
    marker = VENV / ".complete"
    if marker.exists():
        return python()
    print(f"[bench] creating {VENV} with {SGLANG} (--no-deps) and bench_serving's imports ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(python()), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", SGLANG], check=True)
    subprocess.run([*pip, *DEPS], check=True)
    marker.write_text("ok\n")
    return python()
