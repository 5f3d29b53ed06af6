"""The report history on the controller, bounded: the newest run folders are kept, older ones go.

Why: every run adds a folder (host records, summary, gate reports with their logs); on a fleet
rolled daily they pile up without end. The fleet state file (state.py) carries what the next run
needs, so old folders are only history. A folder that the state file still names as a host's
last run is kept whatever its age (its reports explain that host's state), and so is the current
run's. Only folders that look like a run's (a ``hosts/`` folder or a summary in them) are touched.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any


def is_run_folder(path: Path) -> bool:
    return path.is_dir() and ((path / "hosts").is_dir() or (path / "rollout-summary.json").is_file())


def prune_runs(reports_dir: Path, keep: int, current: str, state: dict[str, Any], dry_run: bool = False) -> list[str]:
    """Remove the run folders beyond the newest ``keep`` (by modification time), never ``current``
    nor a run the state file names; returns the names removed, oldest first. ``keep`` < 1 keeps all.
    ``dry_run`` (a ``--check`` run) removes nothing and returns what a real run would remove."""
    if keep < 1 or not reports_dir.is_dir():
        return []
    protected = {current} | {str(h.get("run_id")) for h in (state.get("hosts") or {}).values() if isinstance(h, dict)}
    runs = [p for p in reports_dir.iterdir() if p.name == current or is_run_folder(p)]
    runs.sort(key=lambda p: (p.stat().st_mtime, p.name))
    old = [p for p in runs[: max(0, len(runs) - keep)] if p.name not in protected]
    for path in [] if dry_run else old:
        shutil.rmtree(path, ignore_errors=True)
    return [p.name for p in old]
