"""What preflight asks a host, in one shell probe, and how its answer is read.

The probe is a POSIX shell script run with ``ansible.builtin.raw`` (become as the inventory says):
one SSH round trip per host, no module upload and no Python started on the host. Each command's
output is framed by a marker line carrying its exit status, so one failing command (nvidia-smi on a
host whose driver fell over) is reported as such and the others are still read.

nvidia-smi's answers are read by ``gpu_facts`` (the one parser, shared with the gpu_host role's
gpu_health module), on the recorded H200's shapes (tests/fixtures/nvidia-smi-h200-*, docs/preflight.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .gpu_facts import QUERY_FIELDS

MARK = "@@preflight"
# $1: the disk path to measure; $2: the nvidia-smi command, or "-" on hosts without GPUs;
# $3: "version" to ask the docker engine whether it answers (hosts gpu_host does not prepare),
#     "runtimes" to ask it for its runtimes and look for the NVIDIA toolkit (GPU hosts), else "-";
# $4: the last good deploy's record ("-": none) and, after it, the command printing the kernel log
#     (absent: Xid events are not asked for). Only the kernel log's Xid lines travel back (the last
#     50), and the clock that places the record in seconds since boot, as dmesg stamps its lines.
SCRIPT = r"""
s() { n=$1; shift; o=$("$@" 2>&1); r=$?; printf '%s %s rc=%s\n%s\n' "@@preflight" "$n" "$r" "$o"; }
x() { o=$("$@" 2>&1); r=$?; printf '%s xid rc=%s\n' "@@preflight" "$r"
  if [ "$r" = 0 ]; then printf '%s\n' "$o" | grep -F 'NVRM: Xid' | tail -n 50
  else printf '%s\n' "$o" | tail -n 3; fi; }
s uid id -u
s df df -P -B1 "$1"
if [ "$2" != - ]; then
  s nvidia-smi "$2" -q
  s gpus "$2" --query-gpu=QUERY_FIELDS --format=csv
fi
[ "$3" = version ] && s docker docker version --format '{{.Server.Version}}'
if [ "$3" = runtimes ]; then
  s runtimes docker info --format '{{json .Runtimes}}'
  s toolkit sh -c 'command -v nvidia-container-runtime'
fi
if [ $# -gt 4 ]; then
  f=$4; shift 4
  s clock sh -c 'date +%s; cut -d" " -f1 /proc/uptime; stat -c %Y "$1" 2>/dev/null || echo none' clock "$f"
  x "$@"
fi
exit 0
""".replace("QUERY_FIELDS", QUERY_FIELDS)
_HEADER = re.compile(rf"^{MARK} (\S+) rc=(-?\d+)$", re.MULTILINE)


@dataclass(frozen=True)
class Section:
    """One command of the probe: its exit status and its output (stdout and stderr)."""

    rc: int
    out: str


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
