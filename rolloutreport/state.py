"""The fleet's state between runs: one file on the controller that every real run updates.

Why: the next run must know which hosts an earlier run left half-done (lost mid-stage: finish
them first), which it left out of the load balancer, and which image the fleet is moving to.
Reading that from "the newest run folder" lost it whenever a ``--check`` run (records marked
check mode) or a ``--limit`` run (records of a few hosts) came in between. Here each host's
entry changes only when a real run writes a record of that host, under an exclusive lock, by an
atomic rename; a check-mode record never changes it. Path: ``sglang_rollout_state_file``
(default ``<reports dir>/fleet-state.json``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .records import write_json

SCHEMA = 1
FILE_NAME = "fleet-state.json"
# a host whose last record says this still needs finishing: lost during a stage, or the
# controller died while it was at one (its record never left "in progress")
PENDING = ("unreachable", "in progress")


@dataclass
class HostState:
    """One host as the last real run that touched it left it."""

    run_id: str
    outcome: str  # ok | failed | unreachable | in progress
    stage: str
    image_after: str
    image_id: str
    pending_repair: bool  # the next run finishes this host before any other
    drained: bool  # out of the load balancer (its drain hook ran, no undrain since)
    drained_why: str
    updated: str
    # who took it out of rotation: the run id whose drain hook ran, or "found drained on the host
    # (run X)" for a drain this file never saw (the host's own marker said so)
    drained_by: str = ""
    put_back_run: str = ""  # the run that last put it back in rotation (an earlier run's leftover)


def state_path(run_dir: Path, override: Any = "") -> Path:
    """``sglang_rollout_state_file`` when set, else fleet-state.json beside the run folders."""
    return Path(str(override)) if override else run_dir.parent / FILE_NAME


def empty() -> dict[str, Any]:
    return {"schema": SCHEMA, "hosts": {}, "image_in_flight": {}}


def read_state(path: Path) -> dict[str, Any]:
    """The state file, or an empty state when there is none yet; a damaged file is an error, never
    silently "nothing pending" (that would let a rollout skip a half-done host)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return empty()
    except ValueError as exc:
        raise ValueError(f"{path}: not a fleet state file ({exc}); fix or remove it") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("hosts"), dict):
        raise ValueError(f"{path}: not a fleet state file of schema {SCHEMA}; fix or remove it")
    return data


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Exclusive across processes (forks of one run, two runs): read-modify-write as one step."""
    path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def host_state(record: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> HostState:
    """A host's entry from its record of this run; what the record does not know (the rotation of a
    host whose hooks did not run) stays as it was."""
    prev = before or {}
    rotation = record.get("in_rotation", "")
    drained = prev.get("drained", False) if rotation == "" else rotation == "no"
    return HostState(
        run_id=str(record.get("run_id", "")),
        outcome=str(record.get("outcome", "")),
        stage=str(record.get("stage", "")),
        image_after=str(record.get("image_after", "")),
        image_id=str(record.get("image_id", "")),
        pending_repair=record.get("outcome") in PENDING,
        drained=bool(drained),
        drained_why=str(record.get("drained_why") or prev.get("drained_why", "")) if drained else "",
        updated=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        drained_by=(
            str(record.get("run_id", "")) if rotation == "no" else str(prev.get("drained_by", "")) if drained else ""
        ),
        put_back_run=str(record.get("run_id", "")) if record.get("put_back") else str(prev.get("put_back_run", "")),
    )


def merge_record(path: Path, record: Mapping[str, Any]) -> dict[str, Any] | None:
    """Fold one host record into the state file; check-mode records change nothing (None)."""
    if record.get("check_mode"):
        return None
    with _locked(path):
        state = read_state(path)
        host = str(record["host"])
        state["hosts"][host] = asdict(host_state(record, state["hosts"].get(host)))
        if record.get("image_id"):  # the image this run moves the fleet to (the canary's ID on every host)
            prev_flight = state.get("image_in_flight") or {}
            same = prev_flight.get("image_id") == record.get("image_id")
            state["image_in_flight"] = {
                # the run that started moving the fleet to this image (a later run finishing it keeps it)
                "run_id": str(prev_flight.get("run_id") if same else record.get("run_id", "")),
                "image": str(record.get("image_target", "")),
                "image_id": str(record.get("image_id", "")),
                "repo_digest": str(record.get("image_repo_digest", "")),
            }
        write_json(path, state)
        return state


def set_rotation(
    path: Path, host: str, run_id: str, in_rotation: bool, why: str = "", by: str = "", check_mode: bool = False
) -> dict[str, Any] | None:
    """Change only a host's rotation in the state file (the rest of its entry stays): the put-back
    right after preflight, before the host's own turn, which a stopped run may never reach; and a
    host found drained on the host that this file did not know. Check mode changes nothing (None)."""
    if check_mode:
        return None
    with _locked(path):
        state = read_state(path)
        prev = state["hosts"].get(host) or {}
        entry = {
            **asdict(HostState("", "", "", "", "", False, False, "", "")),
            **prev,
            "drained": not in_rotation,
            "drained_why": "" if in_rotation else why or prev.get("drained_why", ""),
            "drained_by": "" if in_rotation else by or prev.get("drained_by", ""),
            "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        if in_rotation:  # called for a host known, or found, drained: this run put it back
            entry["put_back_run"] = run_id
        state["hosts"][host] = entry
        write_json(path, state)
        return state


def finish_run(path: Path, summary: Mapping[str, Any], check_mode: bool) -> dict[str, Any] | None:
    """At a real run's last summary: the image in flight has landed when no host failed, was lost or
    was left unreached, and no host of the fleet is still pending repair (a --limit run leaves the
    hosts outside it pending: they deploy the image in flight when they are finished); otherwise it
    stays, for the next run and the operator."""
    if check_mode:
        return None
    with _locked(path):
        state = read_state(path)
        if not any(summary.get(k) for k in ("failed", "unreachable", "not_reached")) and not pending_hosts(state):
            state["image_in_flight"] = {}
        write_json(path, state)
        return state


def pending_hosts(state: Mapping[str, Any]) -> list[str]:
    return sorted(h for h, s in state.get("hosts", {}).items() if s.get("pending_repair"))


def lost_runs(state: Mapping[str, Any]) -> list[str]:
    """The runs that lost a host (the last record of some host is theirs and says unreachable), in the
    order the file lists those hosts. Such a run stopped there and can release no lock any more (a
    batch lost whole ends the playbook at once): the next run takes its locks back on every host
    (plugins/modules/rollout_fleet_lock.py)."""
    out: list[str] = []
    for entry in state.get("hosts", {}).values():
        run_id = str(entry.get("run_id", ""))
        if entry.get("outcome") == "unreachable" and run_id and run_id not in out:
            out.append(run_id)
    return out


def drained_hosts(state: Mapping[str, Any]) -> dict[str, str]:
    return {h: s.get("drained_why", "") for h, s in sorted(state.get("hosts", {}).items()) if s.get("drained")}


def out_of_rotation(state: Mapping[str, Any], run_id: str = "") -> dict[str, dict[str, str]]:
    """Every host out of rotation now, with why and who drained it ("this run" for ``run_id``)."""
    out = {}
    for host, entry in sorted(state.get("hosts", {}).items()):
        if entry.get("drained"):
            by = str(entry.get("drained_by", ""))
            if by and by == run_id:
                who = "this run"
            else:
                who = by if by.startswith("found") else f"run {by}" if by else "an earlier run"
            out[host] = {"why": str(entry.get("drained_why", "")), "by": who}
    return out
