"""The run's summary, from the host records on the controller (not from live hostvars, so hosts
that failed and left the play are in it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .records import write_json
from .state import out_of_rotation


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "hosts").glob("*.json"))]


def summarize(
    records: list[dict[str, Any]],
    all_hosts: list[str],
    run_id: str,
    finished: bool,
    canaries: Mapping[str, str] | None = None,
    state: Mapping[str, Any] | None = None,
    waves: list[list[str]] | None = None,
) -> dict[str, Any]:
    """Who moved, who stayed, who failed or was lost, and the image in flight. ``canaries``: the
    run's canary of each GPU profile (preflight's pick), so a failed canary is named as one.
    ``state``: the fleet state file as it is now, for every host out of rotation whoever drained it
    (this run's records know only the hosts this run reached) and the hosts put back right after
    preflight whose own turn a stopped run never reached. ``waves``: the waves preflight planned
    after the canaries (preflight/waves.py), in their order."""
    names = [r["host"] for r in records]
    canaries = {str(k): str(v) for k, v in (canaries or {}).items()}
    failed = [r["host"] for r in records if r["outcome"] == "failed"]
    this_run_drained = {
        r["host"]: {"why": r.get("drained_why", ""), "by": "this run"} for r in records if r.get("in_rotation") == "no"
    }
    lost = [r["host"] for r in records if r["outcome"] == "unreachable"]

    def hosts(pred: Callable[[dict[str, Any]], Any]) -> list[str]:
        return [r["host"] for r in records if pred(r)]

    return {
        "run_id": run_id,
        "finished": finished,
        "hosts": records,
        # one ID when every host deployed the canary's (sglang_image_pin_to_canary)
        "image_ids": sorted({r["image_id"] for r in records if r.get("image_id")}),
        "not_reached": [h for h in all_hosts if h not in names],
        "moved": hosts(lambda r: r["outcome"] == "ok" and r["gate"] == "pass"),
        "unchanged": hosts(lambda r: r["outcome"] == "ok" and r["gate"] != "pass"),
        "rolled_back": hosts(lambda r: r.get("rolled_back")),
        "put_back": sorted(
            set(hosts(lambda r: r.get("put_back")))
            | {h for h, e in (state or {}).get("hosts", {}).items() if e.get("put_back_run") == run_id}
        ),
        "left_drained": hosts(lambda r: r.get("in_rotation") == "no"),
        # every host out of rotation at the end (host -> why, and who drained it), from the state file
        "out_of_rotation": out_of_rotation(state, run_id) if state is not None else this_run_drained,
        "failed": failed,
        "canaries": canaries,
        # profile -> its canary, for each canary that failed or became unreachable: no wave started after it
        "failed_canaries": {g: h for g, h in canaries.items() if h in failed or h in lost},
        "waves": [[str(h) for h in wave] for wave in waves or []],
        "unreachable": lost,
        # the gate groups whose reference this run wrote (a group's first passing gate, or a promotion)
        "baselines_written": sorted({r["baseline_written"] for r in records if r.get("baseline_written")}),
    }


def write_summary(run_dir: Path, summary: dict[str, Any], markdown: str) -> None:
    write_json(run_dir / "rollout-summary.json", summary)
    tmp = run_dir / "rollout-summary.md.tmp"
    tmp.write_text(markdown)
    tmp.chmod(0o640)
    tmp.replace(run_dir / "rollout-summary.md")
