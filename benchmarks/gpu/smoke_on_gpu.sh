#!/usr/bin/env bash
# Runs on the lent H200 (device tool) with .device/carry carried: the image's build-time smoke step
# (images/sglang/smoke.py --mode gpu) against a real CUDA toolkit and Triton, with the GPU hidden
# (CUDA_VISIBLE_DEVICES=""), as in a docker build; then FlashInfer's own JIT for both arch lists.
#   bash benchmarks/gpu/smoke_on_gpu.sh        -> $OUT/smoke.log
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.." || exit 1
exec > >(tee -a "$OUT/smoke.log") 2>&1
echo "== toolchain"; command -v nvcc gcc cc; nvcc --version | tail -2
ls -d /usr/local/cuda*/lib64/stubs/libcuda.so 2>&1
python3 -c 'import sys,sysconfig,torch,triton; print(sys.version.split()[0], sysconfig.get_paths()["include"], "torch", torch.__version__, "triton", triton.__version__)'
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}; export CUDA_HOME
echo "== FlashInfer (carry set: the wheels of sglang 0.5.17)"
rm -rf /tmp/carry /tmp/site && mkdir -p /tmp/carry && tar -xf .device/carry/sglang-0.5.17-wheels.tar.xz -C /tmp/carry \
  && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/carry/wheels/*.whl
export PYTHONPATH=/tmp/site
echo "== smoke.py --mode gpu, GPU hidden"
t0=$(date +%s); CUDA_VISIBLE_DEVICES="" python3 images/sglang/smoke.py --mode gpu; echo "smoke rc=$? in $(( $(date +%s) - t0 )) s"
echo "== smoke.py with a broken C compiler must fail"
CC=/bin/false CUDA_VISIBLE_DEVICES="" python3 images/sglang/smoke.py --mode gpu; echo "smoke(CC=false) rc=$?"
echo "== smoke.py with an arch nvcc does not know must fail"
CUDA_VISIBLE_DEVICES="" python3 images/sglang/smoke.py --mode gpu --arch-list "10.0a 99.0a"; echo "smoke(99.0a) rc=$?"
