"""Scan server logs for crash signatures, in bounded memory, and keep the first matches with context.

A production log can be gigabytes: files are read line by line (a line longer than
``MAX_LINE`` is read in pieces), only ``context_lines`` lines before a match are
kept, and at most ``MAX_MATCHES`` matches are stored (every match is counted).
Container logs (``docker:NAME``) are streamed by ``docker logs --since`` straight
into a file next to the report, never into memory. Both the fetch and the scan stop at the
gate's deadline (the whole gate, report included, ends by ``deadline_s``).

Start banners count from the gate's own start: each file's byte offset then (0 for a file
that holds only the gate's window) splits its banners into starts before the gate (an
earlier run of the server in the same log, a restart during start-up) and starts during it.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from collections.abc import Iterator
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
    offsets: dict[str, int] = field(default_factory=dict)  # file -> its size when the gate started (bytes)
    starts_before: dict[str, int] = field(default_factory=dict)  # file -> start banners before that offset
    starts_during: dict[str, int] = field(default_factory=dict)  # file -> start banners after it

    @property
    def restarts(self) -> list[str]:
        """Starts during the gate: any banner after a file's offset at the gate's start."""
        return [
            f"{f}: {n} start banner(s) ({START_BANNER!r}) after the gate began"
            for f, n in self.starts_during.items()
            if n
        ]

    @property
    def earlier_starts(self) -> list[str]:
        """Restarts before the gate: more than one banner before a file's offset (the server's own start is one)."""
        return [f"{f}: {n} starts before the gate began" for f, n in self.starts_before.items() if n > 1]

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
            "offsets": self.offsets,
            "starts_before": self.starts_before,
            "starts_during": self.starts_during,
            "restarts": self.restarts,
            "earlier_starts": self.earlier_starts,
        }


def _lines(path: str) -> Iterator[tuple[int, str]]:
    """(byte offset where the line starts, the line) for each line of ``path``."""
    with open(path, "rb") as f:
        pos = 0
        while True:
            raw = f.readline(MAX_LINE)
            if not raw:
                return
            yield pos, raw.rstrip(b"\r\n").decode("utf-8", errors="replace")
            pos += len(raw)


def scan_logs(
    paths: list[str],
    extra: dict[str, str] | None = None,
    context_lines: int = 3,
    offsets: dict[str, int] | None = None,
    deadline: float | None = None,
) -> LogScanResult:
    """Scan files in order; matches keep file order, then line order. ``offsets``: each file's size
    when the gate started (missing: 0, the file holds only the gate's window); a banner before it
    started the server before the gate, one after it is a restart during the gate. ``deadline``
    (``time.monotonic()``): the scan stops there, and says so in ``errors``."""
    compiled = compile_all(extra)
    # One alternation rejects the (nearly all) clean lines in a single search; on a hit the
    # signatures are tried in order so the first listed one names the line. With user patterns
    # in it the alternation is RE2 too (compile_all refused any RE2 cannot run).
    joined = "|".join(f"(?:{rx.pattern})" for _, rx in compiled)
    anyone = compile_user_regex(joined) if extra else compile_builtin(joined)
    result = LogScanResult(files=list(paths))
    for path in paths:
        start = (offsets or {}).get(path, 0)
        result.offsets[path] = start
        result.starts_before[path] = result.starts_during[path] = 0
        before: deque[str] = deque(maxlen=context_lines)
        waiting: list[tuple[LogMatch, int]] = []  # matches still collecting lines after them
        try:
            for i, (pos, line) in enumerate(_lines(path), start=1):
                result.lines_scanned += 1
                if deadline is not None and i % 4096 == 0 and time.monotonic() > deadline:
                    result.errors.append(f"{path}: scan stopped at line {i:,} by the gate's deadline_s")
                    break
                if START_BANNER in line:
                    side = result.starts_before if pos < start else result.starts_during
                    side[path] += 1
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


async def fetch_container_log(name: str, dest: Path, since: str | None, timeout_s: float) -> str | None:
    """``docker logs [--since T] NAME`` streamed into ``dest`` within ``timeout_s``; returns an error text or None.

    Cancelling it (the gate stopped by a signal) kills ``docker logs``: nothing outlives the gate."""
    argv = ["docker", "logs", *(["--since", since] if since else []), name]
    dest.parent.mkdir(parents=True, exist_ok=True)
    if timeout_s <= 0:
        return f"docker logs {name}: not fetched, no time left before the gate's deadline_s"
    with open(dest, "wb") as out:
        try:
            proc = await asyncio.create_subprocess_exec(*argv, stdout=out, stderr=asyncio.subprocess.STDOUT)
        except OSError as exc:
            return f"docker logs {name}: {exc}"
        try:
            rc = await asyncio.wait_for(proc.wait(), timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            proc.kill()
            await asyncio.shield(proc.wait())
            if isinstance(exc, asyncio.CancelledError):
                raise
            return f"docker logs {name}: did not finish within {timeout_s:.3g}s (the time left before the deadline)"
    if rc != 0:
        with open(dest, "rb") as f:
            return f"docker logs {name}: " + f.read(300).decode(errors="replace").strip()
    return None


def container_log_path(report_dir: str | Path, name: str) -> Path:
    return Path(report_dir) / f"container-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.log"
