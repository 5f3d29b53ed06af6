"""What a GPU host's NVIDIA tools say, read once: ``nvidia-smi -q``, ``nvidia-smi --query-gpu`` and the
kernel log's Xid events, with the Xid rule both readers apply.

Two readers, one parser: preflight (on the controller, from the probe's answer: preflight/probe.py)
and the gpu_host role's ``gpu_health`` module (on the host, at the host's turn). The module runs
with the host's Python, so this file is stdlib only and shipped by Ansible as a module_utils:
``roles/gpu_host/module_utils/gpu_facts.py`` is a symbolic link to this file, and the module
imports it as ``ansible.module_utils.gpu_facts`` (Ansible packs it into the module's payload).

The shapes are the recorded H200's (tests/fixtures/nvidia-smi-h200-2026-12-02, -03: driver
580.159.04): ``nvidia-smi -q`` is a header (``Driver Version : 580.159.04``) then one ``GPU <bus id>``
block per GPU, each value indented four spaces per section level (``    MIG Mode`` /
``        Current : Disabled``); ``--query-gpu ... --format=csv`` is a header line with units
(``memory.total [MiB]``) then one row per GPU, ``[N/A]`` where a field does not apply.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from typing import Any

# What the gpu_health module and preflight's probe ask nvidia-smi (one query, one parser).
QUERY_FIELDS = (
    "index,name,uuid,pci.bus_id,compute_cap,driver_version,persistence_mode,ecc.mode.current,"
    "ecc.errors.uncorrected.volatile.total,retired_pages.pending"
)
_GPU_LINE = re.compile(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f:.]+)\s*$")
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)")
_KTIME = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")  # dmesg's default stamp: seconds since boot
_NOT_A_VALUE = ("", "[N/A]", "N/A", "[Not Supported]", "Not Supported")
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


@dataclass(frozen=True)
class SmiLog:
    """``nvidia-smi -q``: the values before the first GPU, and each GPU's values by their path
    (``"MIG Mode/Current"``, ``"FB Memory Usage/Total"``, ``"Remapped Rows/Pending"``), keyed by the
    GPU's bus id in lower case, in the order nvidia-smi lists them."""

    header: dict[str, str] = field(default_factory=dict)
    gpus: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def driver_version(self) -> str:
        """``"580.159.04"``; ``"0"`` when the line is missing."""
        return self.header.get("Driver Version") or "0"

    @property
    def driver_major(self) -> int:
        head = self.driver_version.split(".", 1)[0]
        return int(head) if head.isdigit() else 0

    def each(self, path: str) -> list[str]:
        """The value at ``path`` of every GPU that has it."""
        return [values[path] for values in self.gpus.values() if path in values]

    @property
    def memory_mib(self) -> list[int]:
        """Each GPU's framebuffer size (``FB Memory Usage / Total``) in MiB."""
        return [int(v.split()[0]) for v in self.each("FB Memory Usage/Total") if v.split()[0].isdigit()]

    @property
    def mig(self) -> list[str]:
        """Each GPU's current MIG mode (``Disabled``, ``Enabled``; ``N/A`` where the GPU has none)."""
        return self.each("MIG Mode/Current")

    @property
    def fabric(self) -> list[str]:
        """Each GPU's NVSwitch fabric as ``"State / Status"`` (``"N/A / N/A"`` on PCIe cards)."""
        return [
            f"{values['Fabric/State']} / {values.get('Fabric/Status', '')}"
            for values in self.gpus.values()
            if "Fabric/State" in values
        ]


def parse_q(text: str) -> SmiLog:
    """``nvidia-smi -q`` as an SmiLog. A line without a value opens a section at its indentation
    (four spaces a level); a line ``name : value`` is stored under the sections above it."""
    header: dict[str, str] = {}
    gpus: dict[str, dict[str, str]] = {}
    current = header
    path: list[str] = []
    for raw in text.splitlines():  # CRLF too (a probe over SSH with become runs on a pty)
        gpu = _GPU_LINE.match(raw)
        if gpu:
            current = gpus.setdefault(gpu.group(1).lower(), {})
            path = []
            continue
        if not raw.strip():
            continue
        depth = (len(raw) - len(raw.lstrip(" "))) // 4
        name, sep, value = raw.strip().partition(":")
        name = name.strip()
        del path[max(depth - 1, 0) :]
        if sep and value.strip():
            current["/".join([*path, name])] = value.strip()
        elif depth > 0:  # a section: its values follow, one level deeper
            path.append(name)
    return SmiLog(header, gpus)


def value(text: str | None) -> str | None:
    """A field's value, or None where nvidia-smi says it does not apply (``[N/A]``, ``Not Supported``)."""
    text = (text or "").strip()
    return None if text in _NOT_A_VALUE else text


def parse_query(text: str) -> list[dict[str, str | None]]:
    """``nvidia-smi --query-gpu=... --format=csv``: one dict per GPU, keyed by the header's field names
    (without their units)."""
    rows = list(csv.reader(io.StringIO(text.strip())))
    if not rows:
        return []
    header = [h.split(" [")[0].strip() for h in rows[0]]
    return [{h: value(v) for h, v in zip(header, row, strict=False)} for row in rows[1:] if row]


def arch(compute_cap: Any) -> str:
    """Compute capability as the digits the inventory uses: ``"12.0"``, ``"sm_120"``, ``120`` -> ``"120"``."""
    return re.sub(r"\D", "", str(compute_cap or ""))


def pci_key(bus_id: str | None) -> str:
    """'00000000:3B:00.0' and '0000:3b:00' name the same GPU: compare bus:device."""
    m = re.search(r"([0-9a-f]{2}):([0-9a-f]{2})(?:\.\d)?$", (bus_id or "").lower())
    return f"{m.group(1)}:{m.group(2)}" if m else (bus_id or "").lower()


def parse_xid(text: str) -> list[dict[str, Any]]:
    """Xid events of the kernel log: the GPU's PCI address, the code, the line and, when the line
    carries dmesg's stamp, the seconds since boot (``t``; None without one)."""
    out = []
    for line in text.splitlines():
        m = _XID.search(line)
        if m:
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


def after_boot(mtime: float | None, now: float, uptime_s: float) -> float | None:
    """A file's modification time (``mtime``, epoch seconds) in seconds since this boot (0 when it is
    older than this boot); None when there is no such file. Xid events the kernel stamped before it
    were on the host when it last passed a gate."""
    if mtime is None:
        return None
    return max(0.0, mtime - (now - uptime_s))


def xid_failures(
    events: list[dict[str, Any]], gpus: list[dict[str, str | None]], after_s: float | None, ignore: list[int]
) -> list[str]:
    """One line per Xid event that counts: not an ignored code, and not stamped before the last good
    deploy (``after_s``, seconds since boot; None counts every event since boot). ``gpus`` (the query's
    rows) names the GPU by its index."""
    index_of = {pci_key(g.get("pci.bus_id")): g.get("index") for g in gpus}
    since = "since boot" if after_s is None else "since the last good deploy"
    fails = []
    for ev in events:
        if ev["code"] in ignore:
            continue
        if after_s is not None and ev.get("t") is not None and ev["t"] < after_s:
            continue  # the host passed a gate with it: reported, not failed
        gpu = index_of.get(pci_key(ev["pci"]))
        who = f"GPU{gpu}" if gpu is not None else f"GPU at PCI {ev['pci']}"
        meaning = XID_MEANING.get(ev["code"], "see NVIDIA's Xid catalogue")
        fails.append(f"{who}: Xid {ev['code']} ({meaning}) in the kernel log {since}: {ev['line']}")
    return fails


def kernel_log_unreadable(command: list[str], rc: int, said: str) -> str:
    """Why Xid events could not be counted, and the fix."""
    return (
        f"cannot read the kernel log for Xid events ({' '.join(command)}: rc {rc}, {said.strip()[:200]}): "
        "run with become, or set gpu_host_check_xid: false"
    )
