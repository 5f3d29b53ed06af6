#!/usr/bin/env bash
# Runs on the lent H200 (the device tool), from the repository root, with .device/carry carried:
#   bash benchmarks/gpu/real_sglang.sh cache compare overflow
#   bash benchmarks/gpu/real_sglang.sh trust-healthy      then   trust-faults (with the baseline carried back;
#   RS_OTHER=1 also builds the other-weights model, so trust-faults ends with a gate on it)
# Installs the carry set (benchmarks/gpu/prepare_carry.py) into /tmp/site unless that very set is there,
# builds the tokenizer and the random-weight Llama unless they are there (make_model.py), and runs
# the stages of real_sglang.py. What comes back: $OUT/results.json, $OUT/fixtures.tar.gz,
# $OUT/driver.log. A second call on the same (still warm) machine reuses all of it.
set -uo pipefail
OUT=${OUT:-/tmp/out}
PYTHON=${PYTHON:-python3}
export RS_WORK=${RS_WORK:-/tmp/rs} PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$RS_WORK/models"
cd "$(dirname "$0")/../.." || exit 1
t0=$(date +%s)
stamp=$(cksum < .device/carry/sglang-0.5.17-wheels.tar.xz)
if [ "$(cat /tmp/site/.carry-stamp 2>/dev/null)" != "$stamp" ]; then
  rm -rf /tmp/site
  rm -rf /tmp/carry && mkdir -p /tmp/carry
  tar -xf .device/carry/sglang-0.5.17-wheels.tar.xz -C /tmp/carry || exit 1
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    /tmp/carry/wheels/*.whl || exit 1
  echo "$stamp" > /tmp/site/.carry-stamp
  echo "carry set installed in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/driver.log"
fi
export PYTHONPATH=/tmp/site:$PWD
ln -sfn "$RS_WORK/models" /models || exit 1
# the model the roles rendered (render.yml -e rs_model_size=...): /models/random-llama-<size>
MODEL=$("$PYTHON" -c 'import json; c = json.load(open(".device/carry/rendered-serve.json"))["command"]; print(c[c.index("--model-path") + 1])')
"$PYTHON" benchmarks/gpu/make_model.py "$MODEL" --size "${MODEL##*-}" 2>&1 | grep -v -i "warn" | tail -2 | tee -a "$OUT/driver.log"
case " $* ${RS_OTHER:+trust-answers} " in *" trust-answers "*)  # the same shape and tokenizer, other weights (answers.reference must fail)
  "$PYTHON" benchmarks/gpu/make_model.py "$MODEL-seed1" --size "${MODEL##*-}" --seed 1 \
    --tokenizer-from "$MODEL" 2>&1 | grep -v -i "warn" | tail -2 | tee -a "$OUT/driver.log" ;;
esac
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$OUT/driver.log"
"$PYTHON" -c 'import sglang, flashinfer, torch, transformers; print("sglang", sglang.__version__, "flashinfer", flashinfer.__version__, "torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1 | tee -a "$OUT/driver.log"
"$PYTHON" benchmarks/gpu/real_sglang.py "$@" 2>&1 | tee -a "$OUT/driver.log"
exit "${PIPESTATUS[0]}"
