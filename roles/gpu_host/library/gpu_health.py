#!/usr/bin/python
"""Ansible module gpu_health: is this GPU host fit to take a new server? Reads, never changes.

Why a module and not shell + Jinja: the checks parse several nvidia-smi outputs and the
kernel log, and each failure must name the GPU and the value; pure parsing functions are
tested against output recorded on a real H200 (tests/fixtures/nvidia-smi-h200-2026-12-02).
Stdlib only: it runs with the host's Python.

Checks: GPU count and compute capability; uncorrected ECC errors since the driver loaded;
retired pages pending and, on Ampere and later, row remapping pending or failed
(``nvidia-smi -q``); persistence mode; Xid events in the kernel log since boot, or since the
host's last good deploy when ``xid_since_file`` names its record (an Xid the host already had
when it last passed a gate is not held against it forever); the
GPU-to-GPU link types of ``nvidia-smi topo -m`` against the ones the inventory allows; and
``dcgmi diag -r 1`` when DCGM is installed.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import time
from typing import Any

# The one reader of nvidia-smi's output and the Xid rule, shared with preflight: the role's
# module_utils/gpu_facts.py (a link to the bundle's preflight/gpu_facts.py), which Ansible packs into
# this module's payload, so the host needs nothing of the bundle.
from ansible.module_utils import gpu_facts as facts

DOCUMENTATION = r"""
module: gpu_health
short_description: Check a GPU host's health before it takes a new server (read-only)
description:
  - Runs nvidia-smi (query, -q, topo -m), reads the kernel log for Xid events and runs
    dcgmi diag -r 1 when DCGM is installed. Fails naming each GPU and value that is off.
options:
  nvidia_smi: {type: str, default: nvidia-smi, description: nvidia-smi binary.}
  expected_count: {type: int, required: true, description: GPUs expected.}
  expected_arch: {type: str, default: "", description: Compute capability digits, e.g. 120 (empty = any).}
  max_uncorrected_ecc: {type: int, default: 0, description: Most uncorrected volatile ECC errors allowed per GPU.}
  require_persistence: {type: bool, default: true, description: Persistence mode must be Enabled.}
  check_xid: {type: bool, default: true, description: Fail on Xid events in the kernel log since boot.}
  xid_since_file:
    type: str
    default: ""
    description:
      - A file whose modification time marks the host's last good deploy (sglang_server's last-good record).
      - Xid events the kernel logged before it are reported, not failed; empty or missing = since boot.
  xid_ignore: {type: list, elements: int, default: [], description: Xid codes to ignore.}
  kernel_log_command: {type: list, elements: str, default: [dmesg], description: Command printing the kernel log.}
  allowed_links:
    type: list
    elements: str
    default: []
    description: GPU-to-GPU link types allowed (fnmatch, e.g. NV*, PIX); empty = any.
  dcgmi: {type: str, default: dcgmi, description: dcgmi binary; the diag runs only when it is installed.}
  run_dcgmi: {type: bool, default: true, description: Run dcgmi diag -r 1 when DCGM is installed.}
"""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topo(text: str) -> tuple[list[str], dict[tuple[str, str], str]]:
    """``nvidia-smi topo -m``: the GPU names and the link type of every GPU pair."""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header_idx = next((i for i, line in enumerate(lines) if line.strip().startswith("GPU0")), None)
    if header_idx is None:
        return [], {}
    columns = [c.strip() for c in lines[header_idx].split("\t") if c.strip()]
    gpus = [c for c in columns if re.fullmatch(r"GPU\d+", c)]
    links: dict[tuple[str, str], str] = {}
    for line in lines[header_idx + 1 :]:
        cells = [c.strip() for c in line.split("\t")]
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        for col, cell in zip(gpus, cells[1 : 1 + len(gpus)], strict=False):
            if col != cells[0] and cell:
                links[(cells[0], col)] = cell
    return gpus, links


def since_boot(path: str, now: float, uptime_s: float) -> float | None:
    """``path``'s modification time in seconds since boot (0 when it is older than this boot), or
    None when there is no such file: events logged before it were on the host when it last passed."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    return facts.after_boot(mtime, now, uptime_s)


def parse_dcgmi(text: str) -> list[str]:
    """Tests ``dcgmi diag`` reports as failed (its result table: ``| Name | Fail ... |``)."""
    failed = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[1].lower().startswith("fail"):
            failed.append(f"{cells[0]}: {cells[1]}")
    return failed


def judge(
    gpus: list[dict[str, str | None]],
    q: facts.SmiLog,
    topo: tuple[list[str], dict[tuple[str, str], str]] | None,
    xid: list[dict[str, Any]] | None,
    dcgmi_failed: list[str] | None,
    params: dict[str, Any],
) -> list[str]:
    """Every problem, one line each, naming the GPU and the value."""
    fails: list[str] = []
    want = params["expected_count"]
    if len(gpus) != want:
        fails.append(f"{len(gpus)} GPU(s) visible, expected {want} (sglang_gpu_count)")
    want_arch = facts.arch(params.get("expected_arch"))
    by_pci = {facts.pci_key(k): v for k, v in q.gpus.items()}
    for g in gpus:
        name = f"GPU{g.get('index')} ({g.get('name')}, {g.get('pci.bus_id') or g.get('uuid')})"
        if want_arch and facts.arch(g.get("compute_cap")) != want_arch:
            cap = g.get("compute_cap")
            fails.append(f"{name}: compute capability {cap}, expected sm_{want_arch} (sglang_gpu_arch)")
        ecc = g.get("ecc.errors.uncorrected.volatile.total")
        if ecc is not None and ecc.isdigit() and int(ecc) > params["max_uncorrected_ecc"]:
            fails.append(
                f"{name}: {ecc} uncorrected ECC errors since the driver loaded "
                f"(allowed {params['max_uncorrected_ecc']}): drain and reset the GPU"
            )
        if (g.get("retired_pages.pending") or "").lower() == "yes":
            fails.append(f"{name}: retired pages pending: reboot the host to retire them")
        if params["require_persistence"] and (g.get("persistence_mode") or "").lower() != "enabled":
            fails.append(f"{name}: persistence mode {g.get('persistence_mode')}, expected Enabled (nvidia-smi -pm 1)")
        rows = by_pci.get(facts.pci_key(g.get("pci.bus_id")), {})
        if (rows.get("Remapped Rows/Pending") or "").lower() == "yes":
            fails.append(f"{name}: row remapping pending: reset the GPU (or reboot) before use")
        if (rows.get("Remapped Rows/Remapping Failure Occurred") or "").lower() == "yes":
            fails.append(f"{name}: row remapping failed: the GPU needs service")
    if xid:
        fails += facts.xid_failures(xid, gpus, params.get("xid_after_s"), params["xid_ignore"])
    if topo is not None and params["allowed_links"]:
        names, links = topo
        if len(names) != len(gpus):
            fails.append(f"nvidia-smi topo -m lists {len(names)} GPU(s), nvidia-smi lists {len(gpus)}")
        for (a, b), kind in sorted(links.items()):
            if a < b and not any(fnmatch.fnmatchcase(kind, p) for p in params["allowed_links"]):
                allowed = ", ".join(params["allowed_links"])
                fails.append(f"{a}-{b}: link {kind}, expected one of {allowed} (gpu_host_allowed_links)")
    for test in dcgmi_failed or []:
        fails.append(f"dcgmi diag -r 1: {test}")
    return fails


def _run(argv: list[str], timeout: float = 120.0) -> tuple[int, str, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, "", str(exc)
    return p.returncode, p.stdout, p.stderr


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "expected_count": {"type": "int", "required": True},
            "expected_arch": {"type": "str", "default": ""},
            "max_uncorrected_ecc": {"type": "int", "default": 0},
            "require_persistence": {"type": "bool", "default": True},
            "check_xid": {"type": "bool", "default": True},
            "xid_since_file": {"type": "str", "default": ""},
            "xid_ignore": {"type": "list", "elements": "int", "default": []},
            "kernel_log_command": {"type": "list", "elements": "str", "default": ["dmesg"]},
            "allowed_links": {"type": "list", "elements": "str", "default": []},
            "dcgmi": {"type": "str", "default": "dcgmi"},
            "run_dcgmi": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    smi = p["nvidia_smi"]
    rc, out, err = _run([smi, f"--query-gpu={facts.QUERY_FIELDS}", "--format=csv"])
    if rc != 0:
        module.fail_json(msg=f"nvidia-smi failed (rc {rc}): {(err or out).strip()[:300]}; install the NVIDIA driver")
    gpus = facts.parse_query(out)
    rc_q, out_q, _ = _run([smi, "-q"])
    q = facts.parse_q(out_q) if rc_q == 0 else facts.SmiLog()
    rc_t, out_t, err_t = _run([smi, "topo", "-m"])
    topo = parse_topo(out_t) if rc_t == 0 else None
    problems: list[str] = []
    if rc_t != 0 and p["allowed_links"]:
        problems.append(f"nvidia-smi topo -m failed (rc {rc_t}): {err_t.strip()[:200]}")
    xid = None
    if p["check_xid"]:
        rc_k, out_k, err_k = _run(p["kernel_log_command"])
        if rc_k != 0:
            problems.append(facts.kernel_log_unreadable(p["kernel_log_command"], rc_k, err_k))
        else:
            xid = facts.parse_xid(out_k)
            if p["xid_since_file"]:
                with open("/proc/uptime", encoding="ascii") as fh:
                    uptime_s = float(fh.read().split()[0])
                p["xid_after_s"] = since_boot(p["xid_since_file"], time.time(), uptime_s)
    dcgmi_failed = None
    dcgmi_ran = False
    if p["run_dcgmi"] and shutil.which(p["dcgmi"]):
        rc_d, out_d, err_d = _run([p["dcgmi"], "diag", "-r", "1"], timeout=600)
        dcgmi_ran = True
        dcgmi_failed = parse_dcgmi(out_d)
        if rc_d != 0 and not dcgmi_failed:
            problems.append(f"dcgmi diag -r 1 failed (rc {rc_d}): {(err_d or out_d).strip()[:200]}")
    problems += judge(gpus, q, topo, xid, dcgmi_failed, p)
    result = {
        "changed": False,
        "gpus": gpus,
        "links": {f"{a}-{b}": kind for (a, b), kind in (topo[1].items() if topo else []) if a < b},
        "xid_events": xid or [],
        "xid_after_s": p.get("xid_after_s"),
        "dcgmi_ran": dcgmi_ran,
        "failures": problems,
    }
    if problems:
        module.fail_json(msg="GPU health: " + "; ".join(problems), **result)
    module.exit_json(msg=f"{len(gpus)} GPU(s) healthy", **result)


if __name__ == "__main__":
    main()
