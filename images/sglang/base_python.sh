#!/bin/sh
# The interpreter and compilers a stage of images/sglang/Dockerfile needs, from its base or from apt.
#   base_python.sh build   MODE    python3 with venv + pip (the build stage makes /opt/venv with it)
#   base_python.sh runtime MODE    python3 with its headers, gcc, g++, libc headers (Triton, FlashInfer JIT)
# A base that already has them (images/cuda-base: CPython 3.12 and the compilers) gets nothing from apt,
# so no second, other Python lands beside the one the venv was made from. Otherwise the distribution's
# packages (Ubuntu 24.04 under nvidia/cuda: Python 3.12; Debian 12 in cpu-test mode: 3.11).
# MODE gpu: the interpreter must be CPython 3.12, the lock's (images/sglang/requirements.lock).
set -eu
stage=${1:?usage: base_python.sh build|runtime gpu|cpu-test}
mode=${2:?usage: base_python.sh build|runtime gpu|cpu-test}

case "$stage" in
  build) need="import venv, ensurepip" ; packages="python3 python3-venv python3-pip ca-certificates" ;;
  runtime) need="import os, sysconfig; assert os.path.isfile(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))"
           packages="python3 python3-dev gcc g++ libc6-dev ca-certificates" ;;
  *) echo "base_python.sh: stage must be build or runtime, got '$stage'" >&2; exit 2 ;;
esac

if command -v python3 >/dev/null 2>&1 && python3 -c "$need" 2>/dev/null \
   && { [ "$stage" = build ] || { command -v gcc && command -v g++; } >/dev/null 2>&1; }; then
  echo "base_python.sh: the base's $(python3 -V 2>&1) ($(command -v python3)) has what the $stage stage needs"
else
  apt-get update
  # shellcheck disable=SC2086 # a word list on purpose
  apt-get install -y --no-install-recommends $packages
  rm -rf /var/lib/apt/lists/*
fi

if [ "$mode" = gpu ] && ! python3 -c 'import sys; raise SystemExit(sys.version_info[:2] != (3, 12))'; then
  echo "base_python.sh: GPU mode needs CPython 3.12 (the wheels of images/sglang/requirements.lock are cp312);" \
       "this base's python3 is $(python3 -V 2>&1): use nvidia/cuda:13.0.x-devel-ubuntu24.04 or --local-cuda-base" >&2
  exit 1
fi
