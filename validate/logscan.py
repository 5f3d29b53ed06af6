"""Scan server logs for crash signatures, in bounded memory, and keep the first matches with context.

A production log can be gigabytes: files are read line by line (a line longer than
``MAX_LINE`` is read in pieces), only ``context_lines`` lines before a match are
kept, and at most ``MAX_MATCHES`` matches are stored (every match is counted).
Container logs (``docker:NAME``) are streamed by ``docker logs --since`` straight
into a file next to the report, never into memory.
"""

from __future__ import annotations

import re
import subprocess
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .signatures import GENERIC, compile_all

MAX_LINE = 64 * 1024
MAX_MATCHES = 50
DOCKER_PREFIX = "docker:"


@dataclass
class LogMatch:
    """One signature hit: where, which line, and a few lines around it."""

    signature: str
    file: str
    line_no: int
    line: str
    context: list[str]


@dataclass
class LogScanResult:
    files: list[str]
    matches: list[LogMatch] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lines_scanned: int = 0

    @property
    def first(self) -> LogMatch | None:
        """The most useful match: the earliest specific one, else the earliest."""
        specific = [m for m in self.matches if m.signature != GENERIC]
        return (specific or self.matches or [None])[0]

    def to_dict(self) -> dict[str, Any]:
        first = self.first
        return {
            "files": self.files,
            "lines_scanned": self.lines_scanned,
            "counts": self.counts,
            "first_match": asdict(first) if first else None,
            "matches": [asdict(m) for m in self.matches[:20]],
            "errors": self.errors,
        }


def _lines(path: str) -> Any:
    with open(path, "rb") as f:
        while True:
            raw = f.readline(MAX_LINE)
            if not raw:
                return
            yield raw.rstrip(b"\r\n").decode("utf-8", errors="replace")


def scan_logs(paths: list[str], extra: dict[str, str] | None = None, context_lines: int = 3) -> LogScanResult:
    """Scan files in order; matches keep file order, then line order."""
    compiled = compile_all(extra)
    # One alternation rejects the (nearly all) clean lines in a single search; on a hit the
    # signatures are tried in order so the first listed one names the line.
    anyone = re.compile("|".join(f"(?:{rx.pattern})" for _, rx in compiled))
    result = LogScanResult(files=list(paths))
    for path in paths:
        before: deque[str] = deque(maxlen=context_lines)
        waiting: list[tuple[LogMatch, int]] = []  # matches still collecting lines after them
        try:
            for i, line in enumerate(_lines(path), start=1):
                result.lines_scanned += 1
                for m, _ in waiting:
                    m.context.append(line[:500])
                if waiting:
                    waiting = [(m, left - 1) for m, left in waiting if left > 1]
                if not anyone.search(line):
                    before.append(line[:500])
                    continue
                for name, rx in compiled:
                    if rx.search(line):
                        result.counts[name] = result.counts.get(name, 0) + 1
                        if len(result.matches) < MAX_MATCHES:
                            m = LogMatch(name, path, i, line.strip()[:500], [*before, line[:500]])
                            result.matches.append(m)
                            if context_lines:
                                waiting.append((m, context_lines))
                        break
                before.append(line[:500])
        except OSError as exc:
            result.errors.append(f"{path}: {exc.strerror or exc}")
    return result


def fetch_container_log(name: str, dest: Path, since: str | None, timeout_s: float = 300.0) -> str | None:
    """``docker logs [--since T] NAME`` streamed into ``dest``; returns an error text or None."""
    argv = ["docker", "logs", *(["--since", since] if since else []), name]
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(dest, "wb") as out:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker logs {name}: {exc}"
    if proc.returncode != 0:
        with open(dest, "rb") as f:
            return f"docker logs {name}: " + f.read(300).decode(errors="replace").strip()
    return None


def container_log_path(report_dir: str | Path, name: str) -> Path:
    return Path(report_dir) / f"container-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.log"
