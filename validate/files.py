"""The one way the gate writes a JSON file: strict JSON, atomic, readable, optionally locked.

Why one helper: report.json is read by Ansible (``from_json``) and by people with
``jq``; Python's default writer emits ``Infinity``/``NaN`` tokens that neither accepts,
``mkstemp`` creates files readable by the owner alone, and a baseline shared by the
concurrent gates of one wave must never be seen half-written or be lost to a race.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

# rw-r--r-- (less the umask): reports and baselines are read by other users (CI, Ansible).
FILE_MODE = 0o644


def strict_json(obj: Any) -> Any:
    """A copy that ``json.dumps(allow_nan=False)`` accepts: +-inf -> "inf"/"-inf", NaN -> None.

    ``request_rate: .inf`` must survive as a readable value, so infinities become
    strings rather than nulls; a NaN carries no information and becomes null.
    """
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, dict):
        return {str(k): strict_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [strict_json(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    """Strict JSON text (no Infinity/NaN tokens), indented for people."""
    return json.dumps(strict_json(obj), indent=2, allow_nan=False, default=str) + "\n"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write via a temp file in the same folder + rename: a reader sees the old or the new file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE & ~_umask())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Strict JSON, atomically (see :func:`write_text_atomic`)."""
    write_text_atomic(path, dumps(data))


class LockTimeout(Exception):
    """Another process held the lock for longer than we wait."""


@contextlib.contextmanager
def locked(path: str | Path, timeout_s: float = 60.0) -> Iterator[None]:
    """Hold ``<path>.lock`` (an OS file lock) for a read-modify-write of ``path``."""
    lock_path = Path(str(path) + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(lock_path), timeout=timeout_s, mode=FILE_MODE):
            yield
    except Timeout:
        raise LockTimeout(f"{lock_path} is held by another process (waited {timeout_s:g}s)") from None
