"""Build-time smoke test of the runtime stage: can this image compile what SGLang compiles at run time?

Why: Triton compiles its NVIDIA launcher (``cuda_utils.c``) with the system C compiler against the
interpreter's ``Python.h`` at the first kernel launch, and FlashInfer JIT-compiles its kernels with
nvcc. An image without the headers or a compiler builds fine and dies at the first start on a GPU
host ("fatal error: Python.h: No such file or directory", SGLang PR 18644). This runs in the
Dockerfile (no GPU needed) and fails the build instead.

    python3 smoke.py --mode cpu-test   # headers, a C extension against Python.h built and imported
    python3 smoke.py --mode gpu        # + Triton's cuda_utils launcher, nvcc and a FlashInfer JIT module per arch

Exit 0 when everything applies passed, 1 with one line per failure on stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

EXT_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(42); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "smoke_ext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_smoke_ext(void) { return PyModule_Create(&module); }
"""

KERNEL_SOURCE = "__global__ void smoke(float *x) { x[threadIdx.x] += 1.0f; }\n"


def compiler() -> str | None:
    """The C compiler Triton would pick: $CC, else cc, gcc, clang on PATH."""
    return os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)


def check_python_headers() -> str | None:
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        return f"no Python.h in {include} (install the interpreter's -dev package, e.g. python3-dev)"
    return None


def check_c_extension(workdir: Path) -> str | None:
    """Build and import a C extension against Python.h, as Triton builds its launcher."""
    cc = compiler()
    if cc is None:
        return "no C compiler (cc, gcc or clang) on PATH: Triton cannot build its launcher"
    src = workdir / "smoke_ext.c"
    src.write_text(EXT_SOURCE)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    out = workdir / f"smoke_ext{suffix}"
    include = sysconfig.get_paths()["include"]
    proc = subprocess.run(
        [cc, "-O2", "-shared", "-fPIC", f"-I{include}", str(src), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return f"{cc} could not build a C extension against Python.h: {proc.stderr.strip()[-400:]}"
    spec = importlib.util.spec_from_file_location("smoke_ext", out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.answer() != 42:
        return "the compiled C extension imported but returned a wrong value"
    return None


def check_triton_launcher(workdir: Path) -> str | None:
    """Triton's own NVIDIA launcher (cuda_utils), compiled as at the first kernel launch.

    No GPU in a build: libcuda comes from the toolkit's stub, offered under the driver's soname.
    """
    stub = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "lib64" / "stubs" / "libcuda.so"
    if not stub.is_file():
        return f"no CUDA driver stub at {stub}: cannot link Triton's launcher (is the base a CUDA devel image?)"
    libdir = workdir / "libcuda"
    libdir.mkdir()
    (libdir / "libcuda.so").symlink_to(stub)
    (libdir / "libcuda.so.1").symlink_to(stub)
    env = dict(os.environ, TRITON_LIBCUDA_PATH=str(libdir), TRITON_CACHE_DIR=str(workdir / "triton"))
    env["LD_LIBRARY_PATH"] = f"{libdir}:{env.get('LD_LIBRARY_PATH', '')}"
    code = "from triton.backends.nvidia.driver import CudaUtils; CudaUtils(); print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0 or "ok" not in proc.stdout:
        return f"Triton could not build its cuda_utils launcher: {proc.stderr.strip()[-600:]}"
    return None


def check_nvcc(workdir: Path, arch_list: str) -> list[str]:
    """nvcc (FlashInfer's JIT compiler) builds a kernel for each arch of FLASHINFER_CUDA_ARCH_LIST."""
    nvcc = shutil.which("nvcc") or str(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc")
    if not Path(nvcc).is_file():
        return ["no nvcc: FlashInfer cannot JIT-compile its kernels (the runtime stage needs a CUDA devel base)"]
    src = workdir / "smoke.cu"
    src.write_text(KERNEL_SOURCE)
    failures = []
    for arch in arch_list.replace(";", " ").split():
        sm = arch.replace(".", "")  # "12.0a" -> "120a"
        gencode = f"arch=compute_{sm},code=sm_{sm}"
        proc = subprocess.run(
            [nvcc, "-c", "-gencode", gencode, str(src), "-o", str(workdir / f"smoke_{sm}.o")],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            failures.append(f"nvcc cannot build for {arch} ({gencode}): {proc.stderr.strip()[-300:]}")
    return failures


FLASHINFER_JIT = """
import flashinfer
from flashinfer.jit import activation
spec = activation.gen_act_and_mul_module("silu")
spec.build(verbose=False) if hasattr(spec, "build") else spec.build_and_load()
print("ok", flashinfer.__version__, spec.name)
"""


def check_flashinfer_jit(workdir: Path, arch_list: str) -> str | None:
    """FlashInfer's own JIT (ninja + nvcc) builds one of its modules for every arch of the list, GPU hidden."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", FLASHINFER_CUDA_ARCH_LIST=arch_list)
    env["FLASHINFER_WORKSPACE_BASE"] = str(workdir / "flashinfer")
    proc = subprocess.run([sys.executable, "-c", FLASHINFER_JIT], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0 or not proc.stdout.startswith("ok"):
        return f"FlashInfer could not JIT-build silu_and_mul for {arch_list}: {proc.stderr.strip()[-600:]}"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["cpu-test", "gpu"], required=True)
    ap.add_argument("--arch-list", default=os.environ.get("FLASHINFER_CUDA_ARCH_LIST", "10.0a 12.0a"))
    args = ap.parse_args(argv)
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="image-smoke-") as tmp:
        work = Path(tmp)
        headers = check_python_headers()
        failures += [headers] if headers else []
        ext = None if headers else check_c_extension(work)
        failures += [ext] if ext else []
        if args.mode == "gpu":
            launcher = check_triton_launcher(work)
            failures += [launcher] if launcher else []
            nvcc = check_nvcc(work, args.arch_list)
            failures += nvcc
            jit = None if nvcc else check_flashinfer_jit(work, args.arch_list)
            failures += [jit] if jit else []
    for failure in failures:
        print(f"image smoke: FAIL {failure}", file=sys.stderr)
    if not failures:
        gpu = f", Triton's launcher, nvcc and FlashInfer's JIT for {args.arch_list}" if args.mode == "gpu" else ""
        checks = f"Python.h, a C extension{gpu}"
        print(f"image smoke: ok ({checks})")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
