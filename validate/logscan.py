"""Scan server logs for known crash signatures and report the first match with context.

The patterns are the texts SGLang, PyTorch and NCCL really print (the
page_table_1_flattened AttributeError of DSA + FP8 KV prefill, NaN detection during
sampling, CUDA/NCCL errors, CUDA OOM). A config can add its own.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BUILTIN_SIGNATURES: dict[str, str] = {
    "page_table_1_flattened": r"AttributeError.*page_table_1_flattened|"
    r"page_table_1_flattened should have been generated",
    "nan_in_decode": r"NaN in the logits|NaN happened|"
    r"nan(?:s)? (?:detected|found) in (?:logits|decode|output)",
    "cuda_error": r"CUDA error:|CUDA_ERROR_[A-Z_]+|cudaError[A-Za-z]+|device-side assert triggered",
    "nccl_error": r"NCCL error|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|"
    r"Watchdog caught collective operation timeout",
    "oom": r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError:|cudaErrorMemoryAllocation",
    "scheduler_exception": r"Scheduler hit an exception",
}


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

    @property
    def first(self) -> LogMatch | None:
        return self.matches[0] if self.matches else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "counts": self.counts,
            "first_match": asdict(self.first) if self.first else None,
            "matches": [asdict(m) for m in self.matches[:20]],
            "errors": self.errors,
        }


def scan_logs(paths: list[str], extra: dict[str, str] | None = None, context_lines: int = 3) -> LogScanResult:
    """Scan files in order; matches keep file order, then line order (the first is the earliest)."""
    sigs = {**BUILTIN_SIGNATURES, **(extra or {})}
    compiled = [(name, re.compile(pat)) for name, pat in sigs.items()]
    result = LogScanResult(files=list(paths))
    for path in paths:
        try:
            lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as exc:
            result.errors.append(f"{path}: {exc.strerror or exc}")
            continue
        for i, line in enumerate(lines):
            for name, rx in compiled:
                if rx.search(line):
                    result.counts[name] = result.counts.get(name, 0) + 1
                    lo, hi = max(0, i - context_lines), min(len(lines), i + context_lines + 1)
                    result.matches.append(
                        LogMatch(
                            signature=name,
                            file=path,
                            line_no=i + 1,
                            line=line.strip()[:500],
                            context=[s[:500] for s in lines[lo:hi]],
                        )
                    )
                    break
    # The specific signature is the useful one: a generic "Scheduler hit an exception"
    # line precedes the real error in SGLang's traceback, so prefer any other match.
    specific = [m for m in result.matches if m.signature != "scheduler_exception"]
    if specific and result.matches[0].signature == "scheduler_exception":
        result.matches.remove(specific[0])
        result.matches.insert(0, specific[0])
    return result
