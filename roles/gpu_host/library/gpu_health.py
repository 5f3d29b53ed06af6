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

import csv
import fnmatch
import io
import os
import re
import shutil
import subprocess
import time
from typing import Any

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

QUERY_FIELDS = (
    "index,name,uuid,pci.bus_id,compute_cap,driver_version,persistence_mode,ecc.mode.current,"
    "ecc.errors.uncorrected.volatile.total,retired_pages.pending"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)")
_KTIME = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")  # dmesg's default stamp: seconds since boot
# Xid codes an operator meets most (NVIDIA's Xid catalogue), for readable messages.
XID_MEANING = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup",
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapper failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def _value(text: str) -> str | None:
    text = text.strip()
    return None if text in ("", "[N/A]", "N/A", "[Not Supported]", "Not Supported") else text


def parse_query(text: str) -> list[dict[str, str | None]]:
    """``nvidia-smi --query-gpu=... --format=csv``: one dict per GPU, keyed by the header's field names."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows:
        return []
    header = [h.split(" [")[0].strip() for h in rows[0]]
    return [{h: _value(v) for h, v in zip(header, row, strict=False)} for row in rows[1:] if row]


def parse_q(text: str) -> dict[str, dict[str, str | None]]:
    """``nvidia-smi -q``: per GPU bus id, the row-remapping and retired-page state."""
    out: dict[str, dict[str, str | None]] = {}
    current: dict[str, str | None] | None = None
    section = ""
    for raw in text.splitlines():
        m = re.match(r"^GPU ([0-9A-Fa-f:.]+)\s*$", raw)
        if m:
            current = out.setdefault(m.group(1).lower(), {})
            continue
        if current is None or not raw.strip():
            continue
        indent = len(raw) - len(raw.lstrip())
        name, sep, value = raw.strip().partition(":")
        name = name.strip()
        if not sep or (not value.strip() and indent == 4):
            if indent == 4:
                section = name
            continue
        if section in ("Remapped Rows", "Retired Pages") and indent == 8:
            current[f"{section}/{name}"] = _value(value)
    return out


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


def parse_xid(text: str) -> list[dict[str, Any]]:
    """Xid events of the kernel log: the GPU's PCI address, the code, the line and, when the line
    carries dmesg's stamp, the seconds since boot (``t``; None without one)."""
    out = []
    for line in text.splitlines():
        if m := _XID.search(line):
            k = _KTIME.match(line.strip())
            out.append(
                {
                    "pci": m.group(1).lower(),
                    "code": int(m.group(2)),
                    "line": line.strip()[:300],
                    "t": float(k.group(1)) if k else None,
                }
            )
    return out


def since_boot(path: str, now: float, uptime_s: float) -> float | None:
    """``path``'s modification time in seconds since boot (0 when it is older than this boot), or
    None when there is no such file: events logged before it were on the host when it last passed."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    return max(0.0, mtime - (now - uptime_s))


def parse_dcgmi(text: str) -> list[str]:
    """Tests ``dcgmi diag`` reports as failed (its result table: ``| Name | Fail ... |``)."""
    failed = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[1].lower().startswith("fail"):
            failed.append(f"{cells[0]}: {cells[1]}")
    return failed


def _pci_key(bus_id: str | None) -> str:
    """'00000000:3B:00.0' and '0000:3b:00' name the same GPU: compare bus:device."""
    m = re.search(r"([0-9a-f]{2}):([0-9a-f]{2})(?:\.\d)?$", (bus_id or "").lower())
    return f"{m.group(1)}:{m.group(2)}" if m else (bus_id or "").lower()


def judge(
    gpus: list[dict[str, str | None]],
    q: dict[str, dict[str, str | None]],
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
    arch = re.sub(r"\D", "", str(params.get("expected_arch") or ""))
    by_pci = {_pci_key(k): v for k, v in q.items()}
    for g in gpus:
        name = f"GPU{g.get('index')} ({g.get('name')}, {g.get('pci.bus_id') or g.get('uuid')})"
        cap = (g.get("compute_cap") or "").replace(".", "")
        if arch and cap != arch:
            fails.append(f"{name}: compute capability {g.get('compute_cap')}, expected sm_{arch} (sglang_gpu_arch)")
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
        rows = by_pci.get(_pci_key(g.get("pci.bus_id")), {})
        if (rows.get("Remapped Rows/Pending") or "").lower() == "yes":
            fails.append(f"{name}: row remapping pending: reset the GPU (or reboot) before use")
        if (rows.get("Remapped Rows/Remapping Failure Occurred") or "").lower() == "yes":
            fails.append(f"{name}: row remapping failed: the GPU needs service")
    if xid:
        index_of = {_pci_key(g.get("pci.bus_id")): g.get("index") for g in gpus}
        after = params.get("xid_after_s")  # the last good deploy, in seconds since boot
        since = "since boot" if after is None else "since the last good deploy"
        for ev in xid:
            if ev["code"] in params["xid_ignore"]:
                continue
            if after is not None and ev.get("t") is not None and ev["t"] < after:
                continue  # the host passed a gate with it: reported in xid_events, not failed
            gpu = index_of.get(_pci_key(ev["pci"]))
            who = f"GPU{gpu}" if gpu is not None else f"GPU at PCI {ev['pci']}"
            meaning = XID_MEANING.get(ev["code"], "see NVIDIA's Xid catalogue")
            fails.append(f"{who}: Xid {ev['code']} ({meaning}) in the kernel log {since}: {ev['line']}")
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
    rc, out, err = _run([smi, f"--query-gpu={QUERY_FIELDS}", "--format=csv"])
    if rc != 0:
        module.fail_json(msg=f"nvidia-smi failed (rc {rc}): {(err or out).strip()[:300]}; install the NVIDIA driver")
    gpus = parse_query(out)
    rc_q, out_q, _ = _run([smi, "-q"])
    q = parse_q(out_q) if rc_q == 0 else {}
    rc_t, out_t, err_t = _run([smi, "topo", "-m"])
    topo = parse_topo(out_t) if rc_t == 0 else None
    problems: list[str] = []
    if rc_t != 0 and p["allowed_links"]:
        problems.append(f"nvidia-smi topo -m failed (rc {rc_t}): {err_t.strip()[:200]}")
    xid = None
    if p["check_xid"]:
        rc_k, out_k, err_k = _run(p["kernel_log_command"])
        if rc_k != 0:
            problems.append(
                f"cannot read the kernel log for Xid events ({' '.join(p['kernel_log_command'])}: rc {rc_k}, "
                f"{err_k.strip()[:200]}): run with become, or set gpu_host_check_xid: false"
            )
        else:
            xid = parse_xid(out_k)
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
