#!/usr/bin/env bash
# Runs on a lent GPU machine (the device tool): the all-reduce bandwidth script of the serving
# image and the gpu_health module's parsers and rules against this machine's real nvidia-smi,
# kernel log and topology. What it prints under $OUT became tests/fixtures/*-h200-*.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi -L
python3 images/sglang/allreduce_bench.py --timeout-s 60 2>&1 | tee "$OUT/allreduce-h200-1gpu.txt"
echo "allreduce_bench rc=${PIPESTATUS[0]}"
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,compute_cap,driver_version,persistence_mode,ecc.mode.current,ecc.errors.uncorrected.volatile.total,retired_pages.pending \
  --format=csv > "$OUT/nvidia-smi-query-health.csv"
python3 - <<'PY' 2>&1 | tee "$OUT/gpu-health-h200.txt"
import json, shutil, sys, types
sys.path[:0] = ["roles/gpu_host/module_utils", "roles/gpu_host/library"]
import gpu_facts as f
# what Ansible ships with the module (ansible.module_utils.gpu_facts), without needing Ansible here
for name in ("ansible", "ansible.module_utils"):
    sys.modules.setdefault(name, types.ModuleType(name))
sys.modules["ansible.module_utils.gpu_facts"] = f
import gpu_health as g
rc, out, err = g._run(["nvidia-smi", f"--query-gpu={f.QUERY_FIELDS}", "--format=csv"])
gpus = f.parse_query(out)
q = f.parse_q(g._run(["nvidia-smi", "-q"])[1])
topo = g.parse_topo(g._run(["nvidia-smi", "topo", "-m"])[1])
rck, outk, errk = g._run(["dmesg"])
xid = f.parse_xid(outk) if rck == 0 else None
params = dict(expected_count=1, expected_arch="90", max_uncorrected_ecc=0, require_persistence=True,
              xid_ignore=[], allowed_links=["NV*"])
print("query rc", rc, "| dmesg rc", rck, errk.strip()[:120], "| dcgmi", shutil.which("dcgmi"))
print("gpus", json.dumps(gpus))
print("q", json.dumps(q.gpus))
print("topo", topo, "| xid", xid)
print("FAILURES", g.judge(gpus, q, topo, xid, None, params))
PY
