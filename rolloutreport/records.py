"""A host's record of one rollout run: what it ran before, what it runs now, why.

Built from the host's variables as the rollout left them (``HostVars``: any mapping, Ansible's
hostvars included), never from a second copy of the schema. Field names are what preflight
(the next run's "finish it first"), the summary templates and the tests read.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HostVars = Mapping[str, Any]

# The host variables a record is built from (the rollout's roles set them; each may be absent).
VARIABLES = (
    "sglang_rollout_stage",
    "sglang_server_image_before",
    "sglang_image_ref",
    "sglang_image",
    "sglang_image_id",
    "sglang_image_repo_digest",
    "sglang_image_pinned_by",
    "sglang_server_changed",
    "sglang_server_last_good",
    "sglang_server_put_back",
    "sglang_server_in_rotation",
    "sglang_server_drained_why",
    "sglang_gate_result",
    "sglang_rollout_failed",
    "sglang_rollout_failure",
    "sglang_rollout_failed_task",
    "flashinfer_cache_name",
    "flashinfer_cache_key",
    "flashinfer_cache_warm",
    "flashinfer_cache_seeded",
    "flashinfer_cache_seed_refused",
    "flashinfer_cache_archived",
    "flashinfer_cache_size_bytes",
)

NEXT_RUN = (
    "the controller lost its connection. The next run finishes this host first "
    "(re-gates the config it runs, or rolls it back) before any other host."
)


@dataclass
class CacheRecord:
    """The FlashInfer/Triton cache volume the server started on (roles/flashinfer_cache)."""

    name: str = ""
    key: str = ""
    start: str = ""  # cold | warm | seeded ("" before the cache stage)
    seeded: str = ""
    seed_refused: str = ""
    archived: str = ""
    size_bytes: int = 0


@dataclass
class HostRecord:
    """One host in one run. ``outcome``: in progress | ok | failed | unreachable."""

    host: str
    run_id: str
    check_mode: bool
    outcome: str
    stage: str = ""
    image_before: str = ""
    image_target: str = ""
    image_id: str = ""  # the content deployed (the canary's, on every later host)
    image_repo_digest: str = ""
    # whose image this host had to deploy: "canary <host>", "run <id> (unfinished)" (a host an
    # unfinished run left half-done), or "" (the canary itself, or pinning off)
    image_pinned_by: str = ""
    image_after: str = ""
    changed: bool = False
    gate: str = "not run"
    gate_location: str = ""
    gate_reason: str = ""
    failed_checks: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    rolled_back: bool = False
    put_back: str = ""  # an earlier run's leftover: drained, now back in rotation
    in_rotation: str = ""  # yes | no (its drain hook ran, no undrain since) | "" (no hook ran this run)
    drained_why: str = ""
    failure: str = ""
    failed_task: str = ""
    report_dir: str = ""
    # the gate group whose reference this host's gate wrote (its first passing gate, or a promotion)
    baseline_written: str = ""
    cache: CacheRecord = field(default_factory=CacheRecord)
    # when the host entered each stage of this run ({"stage", "at": epoch seconds}; "done" at its
    # final record): how long each stage took on each host (benchmarks/rollout.py reads them)
    stages: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _s(v: Any) -> str:
    return "" if v is None else str(v)


def _rotation(v: Any) -> str:
    return "" if v is None else "yes" if bool(v) else "no"


def _gate(hv: HostVars) -> Mapping[str, Any]:
    g = hv.get("sglang_gate_result")
    return g if isinstance(g, Mapping) else {}


def _cache(hv: HostVars) -> CacheRecord:
    warm = hv.get("flashinfer_cache_warm")
    seeded = _s(hv.get("flashinfer_cache_seeded"))
    start = "" if warm is None else "seeded" if seeded else "warm" if bool(warm) else "cold"
    return CacheRecord(
        name=_s(hv.get("flashinfer_cache_name")),
        key=_s(hv.get("flashinfer_cache_key")),
        start=start,
        seeded=seeded,
        seed_refused=_s(hv.get("flashinfer_cache_seed_refused")),
        archived=_s(hv.get("flashinfer_cache_archived")),
        size_bytes=int(hv.get("flashinfer_cache_size_bytes") or 0),
    )


def _base(host: str, run_id: str, check_mode: bool, hv: HostVars, outcome: str) -> HostRecord:
    gate = _gate(hv)
    return HostRecord(
        host=host,
        run_id=run_id,
        check_mode=check_mode,
        outcome=outcome,
        stage=_s(hv.get("sglang_rollout_stage")),
        image_before=_s(hv.get("sglang_server_image_before")),
        image_target=_s(hv.get("sglang_image_ref") or hv.get("sglang_image")),
        image_id=_s(hv.get("sglang_image_id")),
        image_repo_digest=_s(hv.get("sglang_image_repo_digest")),
        image_pinned_by=_s(hv.get("sglang_image_pinned_by")).strip(),
        changed=bool(hv.get("sglang_server_changed") or False),
        gate=_s(gate.get("verdict") or "not run"),
        gate_location=_s(gate.get("location")),
        failed_checks=[str(c) for c in gate.get("failed_checks") or []],
        report_dir=_s(gate.get("report_dir")),
        baseline_written=_s(gate.get("baseline_written")),
        put_back=_s(hv.get("sglang_server_put_back")),
        in_rotation=_rotation(hv.get("sglang_server_in_rotation")),
        drained_why=_s(hv.get("sglang_server_drained_why")) if hv.get("sglang_server_in_rotation") is False else "",
        cache=_cache(hv),
    )


def in_progress(host: str, run_id: str, check_mode: bool, hv: HostVars, stage: str) -> HostRecord:
    """The record while the host is at ``stage``: what the summary and the next run see if it is lost."""
    r = _base(host, run_id, check_mode, hv, "in progress")
    r.stage, r.image_after = stage, f"(in progress: {stage})"
    return r


def final(host: str, run_id: str, check_mode: bool, hv: HostVars) -> HostRecord:
    """Where the host ended up, written in the rollout's ``always:`` (a failed host included)."""
    failed = bool(hv.get("sglang_rollout_failed") or False)
    gate = _gate(hv)
    r = _base(host, run_id, check_mode, hv, "failed" if failed else "ok")
    rolled_back = bool(gate.get("rolled_back") or False)
    if check_mode:
        after = "(check mode: nothing changed)"
    elif rolled_back:
        after = _s(gate.get("rolled_back_to"))
    elif failed and r.gate in ("fail", "not-ready") and not hv.get("sglang_server_last_good"):
        after = "(stopped: first deploy failed)"
    elif failed:
        after = r.image_before
    else:
        after = _s(hv.get("sglang_image_ref"))
    r.image_after = after
    r.rolled_back = rolled_back
    r.gate_reason = _s(gate.get("reason"))
    r.messages = [str(m) for m in gate.get("messages") or []]
    r.failure = _s(hv.get("sglang_rollout_failure"))
    r.failed_task = _s(hv.get("sglang_rollout_failed_task"))
    return r


def lost(host: str, run_id: str, check_mode: bool, hv: HostVars, task: str = "") -> HostRecord:
    """A host that became unreachable: what the controller last knew of it, with its last stage."""
    r = _base(host, run_id, check_mode, hv, "in progress")
    return HostRecord(**mark_lost(r.to_dict(), task) | {"cache": r.cache})


def mark_lost(record: dict[str, Any], task: str) -> dict[str, Any]:
    """An "in progress" record (as written, a dict) as the record of a host lost during its stage."""
    stage = record.get("stage") or "?"
    return {
        **record,
        "outcome": "unreachable",
        "image_after": f"(unknown: unreachable during {stage})",
        "failure": f"unreachable during {stage}",
        "failed_task": task,
        "messages": [f"unreachable during {stage}: {NEXT_RUN}"],
    }


def record_path(run_dir: Path, host: str) -> Path:
    return run_dir / "hosts" / f"{host}.json"


def write_json(path: Path, data: Any) -> None:
    """Write next to the target and rename: a reader (the next run, a dashboard) never sees half."""
    path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=4, sort_keys=True) + "\n")
    os.chmod(tmp, 0o640)
    tmp.replace(path)


def stage_durations(record: Mapping[str, Any]) -> dict[str, float]:
    """Seconds the host spent in each stage of a record's marks (a stage entered twice counts twice);
    the stage it is still in (no later mark) is left out."""
    out: dict[str, float] = {}
    marks = record.get("stages") or []
    for here, nxt in itertools.pairwise(marks):
        out[here["stage"]] = round(out.get(here["stage"], 0.0) + float(nxt["at"]) - float(here["at"]), 2)
    return out


def read_record(path: Path) -> dict[str, Any]:
    """A record as written (a dict: the JSON file's content)."""
    return json.loads(path.read_text())


def write_record(run_dir: Path, record: HostRecord | dict[str, Any], mark: str = "") -> dict[str, Any]:
    """Write the host's record of this run (at ``record_path``) and return it as written. The stage
    marks of its earlier record in the run are kept, and ``mark`` (the stage it enters, or "done")
    is added unless it is the last one already."""
    data = record.to_dict() if isinstance(record, HostRecord) else dict(record)
    path = record_path(run_dir, data["host"])
    try:
        stages = list(json.loads(path.read_text()).get("stages") or [])
    except (OSError, ValueError, AttributeError):
        stages = list(data.get("stages") or [])
    if mark and (not stages or stages[-1].get("stage") != mark):
        stages.append({"stage": mark, "at": round(time.time(), 2)})
    data["stages"] = stages
    write_json(path, data)
    return data
