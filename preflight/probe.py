"""What preflight asks a host, in one shell probe, and how its answer is read.

The probe is a POSIX shell script run with ``ansible.builtin.raw`` (become as the inventory says):
one SSH round trip per host, no module upload and no Python started on the host. Each command's
output is framed by a marker line carrying its exit status, so one failing command (nvidia-smi on a
host whose driver fell over) is reported as such and the others are still read.

The shape of ``nvidia-smi -q`` is the recorded H200's (tests/fixtures/nvidia-smi-h200-2026-12-02,
docs/preflight.md): ``Driver Version : 580.159.04``, one ``GPU <bus id>`` line per GPU, ``MIG Mode`` /
``Current``, ``FB Memory Usage`` / ``Total : N MiB`` and ``Fabric`` / ``State`` / ``Status`` blocks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MARK = "@@preflight"
# $1: the disk path to measure; $2: the nvidia-smi command, or "-" on hosts without GPUs;
# $3: "docker" to ask the docker engine (hosts gpu_host does not prepare), else "-".
SCRIPT = r"""
s() { n=$1; shift; o=$("$@" 2>&1); r=$?; printf '%s %s rc=%s\n%s\n' "@@preflight" "$n" "$r" "$o"; }
s uid id -u
s df df -P -B1 "$1"
[ "$2" = - ] || s nvidia-smi "$2" -q
[ "$3" = docker ] && s docker docker version --format '{{.Server.Version}}'
exit 0
"""
_HEADER = re.compile(rf"^{MARK} (\S+) rc=(-?\d+)$", re.MULTILINE)


@dataclass(frozen=True)
class Section:
    """One command of the probe: its exit status and its output (stdout and stderr)."""

    rc: int
    out: str


@dataclass(frozen=True)
class Smi:
    """What preflight reads from ``nvidia-smi -q``."""

    driver_version: str  # "0" when the line is missing
    gpus: int
    memory_mib: list[int] = field(default_factory=list)  # each GPU's FB memory total
    mig: list[str] = field(default_factory=list)  # each GPU's MIG mode (Current)
    fabric: list[str] = field(default_factory=list)  # each GPU's "State / Status" of its NVSwitch fabric

    @property
    def driver_major(self) -> int:
        head = self.driver_version.split(".", 1)[0]
        return int(head) if head.isdigit() else 0


@dataclass(frozen=True)
class HostProbe:
    """A host's answer to the probe; ``unreachable`` when SSH (or become) never got there."""

    unreachable: bool = False
    message: str = ""  # Ansible's, when unreachable or the probe itself failed
    sections: dict[str, Section] = field(default_factory=dict)

    def get(self, name: str) -> Section | None:
        return self.sections.get(name)


def parse_sections(stdout: str) -> dict[str, Section]:
    """The marker-framed sections of the probe's output (text before the first marker is dropped:
    sudo's or a login banner's). Over SSH with become, Ansible runs the command on a pty, so its
    lines end in CRLF: they are read as LF."""
    stdout = stdout.replace("\r\n", "\n")
    heads = list(_HEADER.finditer(stdout))
    out: dict[str, Section] = {}
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(stdout)
        out[head.group(1)] = Section(int(head.group(2)), stdout[head.end() + 1 : end].rstrip("\n"))
    return out


def parse_probe(result: Any) -> HostProbe:
    """A registered ``raw`` result (a dict) as a HostProbe; anything else (the host was never asked)
    is an unreachable host without a message."""
    if not isinstance(result, dict):
        return HostProbe(unreachable=True, message="the probe did not run on this host")
    if result.get("unreachable"):
        return HostProbe(unreachable=True, message=str(result.get("msg", "")))
    sections = parse_sections(str(result.get("stdout", "")))
    if not sections and (result.get("failed") or result.get("rc")):
        return HostProbe(
            message=f"the probe failed (rc {result.get('rc')}): {result.get('stderr') or result.get('msg', '')}"
        )
    return HostProbe(sections=sections)


def parse_smi(text: str) -> Smi:
    driver = re.search(r"Driver Version\s*:\s*([0-9.]+)", text)
    return Smi(
        driver_version=driver.group(1) if driver else "0",
        gpus=len(re.findall(r"(?m)^GPU [0-9A-Fa-f]+:[0-9A-Fa-f:.]+$", text)),
        memory_mib=[int(m) for m in re.findall(r"FB Memory Usage\s*\n\s*Total\s*:\s*([0-9]+) MiB", text)],
        mig=re.findall(r"MIG Mode\s*\n\s*Current\s*:\s*(\S+)", text),
        fabric=[
            f"{state} / {status}"
            for state, status in re.findall(
                r"Fabric\s*\n\s*State\s*:\s*([^\n]*?)\s*\n\s*Status\s*:\s*([^\n]*?)\s*\n", text
            )
        ],
    )
