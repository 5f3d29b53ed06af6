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
from .userregex import compile_builtin, compile_user_regex

MAX_LINE = 64 * 1024
MAX_MATCHES = 50
# uvicorn's line at every start of SGLang's HTTP server (tests/fixtures: "INFO:     Started server
# process [614]"); the test engine writes the same words when it simulates a restart.
START_BANNER = "Started server process ["
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
    banners: dict[str, int] = field(default_factory=dict)  # file -> SGLang start banners in it
    window: list[str] = field(default_factory=list)  # files that hold only the gate's window (no start-up)

    @property
    def restarts(self) -> list[str]:
        """Files that show a server start the gate did not expect: any banner in a window-only file,
        a second one in a file that holds the start-up too."""
        return [
            f"{f}: {n} start banner(s) ({START_BANNER!r})"
            for f, n in self.banners.items()
            if n > (0 if f in self.window else 1)
        ]

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
            "start_banners": self.banners,
            "window": self.window,
            "restarts": self.restarts,
        }


def _lines(path: str) -> Any:
    with open(path, "rb") as f:
        while True:
            raw = f.readline(MAX_LINE)
            if not raw:
                return
            yield raw.rstrip(b"\r\n").decode("utf-8", errors="replace")


def scan_logs(
    paths: list[str], extra: dict[str, str] | None = None, context_lines: int = 3, window: list[str] | None = None
) -> LogScanResult:
    """Scan files in order; matches keep file order, then line order. ``window``: files holding
    only the gate's window (a start banner there is a restart)."""
    compiled = compile_all(extra)
    # One alternation rejects the (nearly all) clean lines in a single search; on a hit the
    # signatures are tried in order so the first listed one names the line. With user patterns
    # in it the alternation is RE2 too (compile_all refused any RE2 cannot run).
    joined = "|".join(f"(?:{rx.pattern})" for _, rx in compiled)
    anyone = compile_user_regex(joined) if extra else compile_builtin(joined)
    result = LogScanResult(files=list(paths), window=list(window or []))
    for path in paths:
        result.banners[path] = 0
        before: deque[str] = deque(maxlen=context_lines)
        waiting: list[tuple[LogMatch, int]] = []  # matches still collecting lines after them
        try:
            for i, line in enumerate(_lines(path), start=1):
                result.lines_scanned += 1
                if START_BANNER in line:
                    result.banners[path] += 1
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
