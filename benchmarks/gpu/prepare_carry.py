"""Prepare, on the CPU side, the one carry set that real SGLang 0.5.17 needs on the lent H200.

The device machine has PyTorch 2.11 / CUDA 13 and no network, so SGLang and what it imports
beyond the device image travel as wheels (the device tool's README: 64 MiB a call). Three of
them are large for reasons a one-GPU Llama run does not need, so they are slimmed here:

- ``sglang-kernel``: ``flash_ops.abi3.so`` (FA3, 1.1 GB), ``sm100/``, ``infllm_ops`` and
  ``flashmla_ops`` go; ``sm90/common_ops`` stays (``--attention-backend triton`` on sm_90);
- ``xgrammar``: its static library goes and the bindings lose their debug info (``strip``).

Everything is pinned (the pins that matter, and why: docs/real-sglang-h200.md, "How to run it":
transformers 5.12.1 with tokenizers 0.22.2, FastAPI below the releases that need OpenTelemetry), packed as
stored wheels in one xz tar under ``.device/carry/`` (git-ignored), and named in the device
call's ``carry``. ``benchmarks/gpu/real_sglang.sh`` unpacks and installs it there.

Usage: python benchmarks/gpu/prepare_carry.py [--out .device/carry]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

# What the device image lacks (or has in a version SGLang 0.5.17 refuses), for launch_server,
# bench_serving and the gate on a random-weight Llama with the triton attention backend.
PINS = [
    "sglang==0.5.17",
    "sglang-kernel==0.4.5",
    "flashinfer-python==0.6.15.post1",
    "apache-tvm-ffi==0.1.11",
    "transformers==5.12.1",
    "tokenizers==0.22.2",
    "xgrammar==0.2.1",
    "fastapi==0.135.0",
    "starlette==0.49.3",
    "uvicorn==0.38.0",
    "pydantic==2.12.5",
    "pydantic-core==2.41.5",
    "annotated-types==0.7.0",
    "typing-inspection==0.4.2",
    "python-multipart==0.0.20",
    "pyzmq==27.1.0",
    "msgspec==0.19.0",
    "orjson==3.11.4",
    "partial-json-parser==0.2.1.1.post7",
    "pybase64==1.4.2",
    "setproctitle==1.3.7",
    "zstandard==0.25.0",
    "openai==2.6.1",
    "openai-harmony==0.0.4",
    "distro==1.9.0",
    "jiter==0.12.0",
    "sniffio==1.3.1",
    "jsonschema==4.25.1",
    "jsonschema-specifications==2025.9.1",
    "referencing==0.37.0",
    "rpds-py==0.29.0",
    "dill==0.4.0",
    "compressed-tensors==0.12.2",
    "gguf==0.17.1",
    "interegular==0.3.3",
    "llguidance==1.3.0",
    "blobfile==3.0.0",
    "pycryptodomex==3.23.0",
    "soundfile==0.13.1",
    "cffi==2.0.0",
    "pycparser==2.23",
    "cuda-python==13.0.3",
    "nvidia-cutlass-dsl==4.6.0",
    "tabulate==0.9.0",
    "typer==0.20.0",
    "shellingham==1.5.4",
    "ipython==9.7.0",
    "decorator==5.2.1",
    "jedi==0.19.2",
    "parso==0.8.5",
    "matplotlib-inline==0.2.1",
    "traitlets==5.14.3",
    "pexpect==4.9.0",
    "ptyprocess==0.7.0",
    "prompt-toolkit==3.0.52",
    "wcwidth==0.2.14",
    "stack-data==0.6.3",
    "executing==2.2.1",
    "asttokens==3.0.1",
    "pure-eval==0.2.3",
    "ipython-pygments-lexers==1.1.1",
    "watchfiles==1.1.1",
    "filelock==3.20.0",
    "loguru==0.7.3",  # compressed-tensors' logger, imported with the quantization registry
    "datasets==5.2.0",  # imported by bench_serving's dataset registry even for random-ids
    "multiprocess==0.70.19",
]

PLATFORMS = [
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
    "any",
]

# Files dropped from a wheel (prefix match on the path inside it).
DROP = {
    "sglang_kernel": ("sgl_kernel/flash_ops", "sgl_kernel/sm100/", "sgl_kernel/infllm_ops", "sgl_kernel/flashmla_ops"),
    "xgrammar": ("xgrammar/lib/libxgrammar.a",),
    "sglang": ("sglang/multimodal_gen/",),  # the diffusion server, never imported by launch_server
}
# Shared objects whose debug info is stripped.
STRIP = {"xgrammar": ("xgrammar/libxgrammar_bindings.so",)}


def download(pins: list[str], dest: Path) -> None:
    """One ``pip download --no-deps`` for cp312 manylinux: the device cannot resolve anything."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        "-d",
        str(dest),
    ]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd + pins, check=True)


def slim(wheel: Path, work: Path) -> Path:
    """Rewrite a wheel stored (uncompressed, so the one xz over the tar compresses across wheels),
    without the files in DROP and with the objects in STRIP stripped of debug info."""
    dist = wheel.name.split("-")[0]
    drop, strip = DROP.get(dist, ()), STRIP.get(dist, ())
    out = work / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            if info.filename.startswith(drop):
                continue
            data = src.read(info)
            if info.filename in strip and shutil.which("strip"):
                with tempfile.NamedTemporaryFile(suffix=".so") as tmp:
                    tmp.write(data)
                    tmp.flush()
                    subprocess.run(["strip", "--strip-debug", tmp.name], check=True)
                    data = Path(tmp.name).read_bytes()
            info.compress_type = zipfile.ZIP_STORED
            dst.writestr(info, data)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(".device/carry"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "sglang-0.5.17-wheels.tar.xz"
    with tempfile.TemporaryDirectory() as tmp:
        raw, slimmed = Path(tmp, "raw"), Path(tmp, "slim")
        raw.mkdir()
        slimmed.mkdir()
        download(PINS, raw)
        wheels = sorted(slim(w, slimmed) for w in raw.glob("*.whl"))
        with tarfile.open(target, "w:xz", preset=6) as tar:
            for wheel in wheels:
                tar.add(wheel, arcname=f"wheels/{wheel.name}")
        total = sum(w.stat().st_size for w in wheels)
        print(
            f"{len(wheels)} wheels, {total / 2**20:.1f} MiB unpacked -> {target} "
            f"({target.stat().st_size / 2**20:.1f} MiB)"
        )
    digest = hashlib.sha256(target.read_bytes()).hexdigest()[:16]
    print(f"sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
