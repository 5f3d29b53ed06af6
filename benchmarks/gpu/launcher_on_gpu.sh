#!/usr/bin/env bash
# Runs on the lent H200 (device tool) with .device/carry carried: real SGLang 0.5.17 started the way
# the roles start it, through images/sglang/launch.py with the API key in a root-only file, and the
# four places a key leaks checked: every process's command line, SGLang's own log (it logs its whole
# ServerArgs), the environment of the server processes, and the API (401 without the key, 200 with).
#   bash benchmarks/gpu/launcher_on_gpu.sh     -> $OUT/launcher.log, $OUT/server.log
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.." || exit 1
exec > >(tee -a "$OUT/launcher.log") 2>&1
KEY="sk-device-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
rm -rf /tmp/carry /tmp/site && mkdir -p /tmp/carry && tar -xf .device/carry/sglang-0.5.17-wheels.tar.xz -C /tmp/carry \
  && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/carry/wheels/*.whl
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /models && python3 benchmarks/gpu/make_model.py /models/random-llama-0.9b 2>&1 | grep -v -i warn | tail -1
install -d -m 0700 /tmp/secrets && (umask 077; printf '%s\n' "$KEY" > /tmp/secrets/api-key)
t0=$(date +%s)
setsid python3 images/sglang/launch.py --api-key-file /tmp/secrets/api-key -- python3 -m sglang.launch_server \
  --model-path /models/random-llama-0.9b --tp-size 1 --attention-backend triton --host 127.0.0.1 --port 30000 \
  > "$OUT/server.log" 2>&1 &
for _ in $(seq 1 300); do curl -sf -o /dev/null http://127.0.0.1:30000/health && break; sleep 1; done
echo "ready after $(( $(date +%s) - t0 )) s"
echo "== API: without the key, with it"
curl -s -o /dev/null -w 'no key: %{http_code}\n' http://127.0.0.1:30000/v1/models
curl -s -o /dev/null -w 'wrong key: %{http_code}\n' -H "Authorization: Bearer sk-wrong" http://127.0.0.1:30000/v1/models
curl -s -o /dev/null -w 'key: %{http_code}\n' -H "Authorization: Bearer $KEY" http://127.0.0.1:30000/v1/models
curl -s -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"text":"Hello","sampling_params":{"max_new_tokens":8}}' http://127.0.0.1:30000/generate | head -c 200; echo
pids=$(pgrep -f 'sglang' | tr '\n' ' ')
echo "== server processes: $(echo $pids | wc -w)"
for p in $pids; do tr '\0' ' ' < /proc/$p/cmdline | cut -c1-150; echo; done
echo "== the key in a command line: $(for p in $pids; do tr '\0' ' ' < /proc/$p/cmdline; done | grep -c -- "$KEY")"
echo "== the key in an environment: $(for p in $pids; do tr '\0' '\n' < /proc/$p/environ; done | grep -c -- "$KEY")"
echo "== the key in SGLang's log: $(grep -c -- "$KEY" "$OUT/server.log")"
echo "== its ServerArgs line: $(grep -o "api_key=[^,]*" "$OUT/server.log" | sort | uniq -c | tr '\n' ' ')"
pkill -f 'sglang' ; sleep 3; pkill -9 -f 'sglang'
sed -i "s/$KEY/<KEY>/g" "$OUT/server.log" "$OUT/launcher.log"  # nothing to replace if the checks above say 0
