"""The gate's own open-file limit: 1024 concurrent streams need more than a shell's default 1024 fds.

A healthy server must not fail the gate for "Too many open files" in the client. At
start the gate raises its soft RLIMIT_NOFILE towards what its largest phase needs
(up to the hard limit, which an unprivileged process cannot exceed); a phase whose
concurrency still does not fit is refused with a message saying what to raise.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

# fds beyond one socket per stream: the event loop, log files, the report, docker logs, ...
FD_MARGIN = 64


@dataclass
class FileLimit:
    soft: int
    hard: int
    wanted: int
    note: str
    adjusted: bool = True  # the gate tried to change the limit (worth printing)

    def allows(self, concurrency: int) -> bool:
        return concurrency + FD_MARGIN <= self.soft

    def refusal(self, concurrency: int) -> str:
        return (
            f"needs {concurrency + FD_MARGIN} open files for {concurrency} concurrent streams but the gate may open "
            f"{self.soft} (hard limit {self.hard}): raise it (ulimit -n, LimitNOFILE, docker --ulimit nofile) and rerun"
        )


def _inf(v: int) -> int:
    return 1 << 30 if v == resource.RLIM_INFINITY else v


def raise_open_files(concurrency: int) -> FileLimit:
    """Raise the soft limit to fit ``concurrency`` streams (never lowers it)."""
    wanted = concurrency + FD_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft_n, hard_n = _inf(soft), _inf(hard)
    if soft_n >= wanted:
        return FileLimit(soft_n, hard_n, wanted, f"open-file limit {soft_n} already fits {wanted}", adjusted=False)
    target = min(wanted, hard_n)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        return FileLimit(soft_n, hard_n, wanted, f"could not raise the open-file limit from {soft_n}: {exc}")
    note = f"open-file limit raised {soft_n} -> {target}"
    if target < wanted:
        note += f" (the hard limit {hard_n} is below the {wanted} wanted)"
    return FileLimit(target, hard_n, wanted, note)
