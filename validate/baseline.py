"""The baseline: the reference figures of a host group, kept apart from the last host that passed.

Why not "the last passing report": if every passing host replaced the reference, a
fleet could slide 5 % per host (each within tolerance of the one before) without a
single failure. So a group's reference is written once, by the first passing gate of
the group, or on purpose with ``--promote-baseline`` (after a new image proves
faster, say); an ordinary passing host never replaces it. The file keeps the last
few references (``history``) so a promotion can be read back and undone, and every
write happens under a file lock, atomically, so the concurrent gates of one wave
cannot corrupt it.

File format (``schema: sglang-gate-baseline/2``)::

    {"schema": ..., "reference": {engine, workload, key_metrics, started_at, labels, how},
     "history": [older references, newest first]}

A passing report.json (the format before this one) is still read as a reference.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .files import locked, write_json_atomic

SCHEMA = "sglang-gate-baseline/2"
HISTORY = 5


class BaselineError(Exception):
    """A baseline file that cannot be used; the message names the file and the field."""


class Reference(BaseModel):
    model_config = ConfigDict(extra="ignore")

    engine: str = Field(min_length=1)
    workload: dict[str, Any]
    key_metrics: dict[str, float | None]
    started_at: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    how: str = ""
    answers: dict[str, Any] | None = None  # the group's reference answers (validate/answers.py)
    noise: dict[str, float | None] = Field(default_factory=dict)  # each key metric's relative standard error


class BaselineFile(BaseModel):
    model_config = ConfigDict(extra="ignore")

    schema_: str = Field(alias="schema")
    reference: Reference
    history: list[Reference] = Field(default_factory=list)


def workload(config: dict[str, Any]) -> dict[str, Any]:
    """The config fields that make two runs' figures comparable (a baseline must match them)."""
    tp = config.get("throughput") or {}
    ss = config.get("single_stream") or {}
    out: dict[str, Any] = {}
    for k in ("num_prompts", "input_len", "output_len", "request_rate", "max_concurrency"):
        v = tp.get(k)
        # .inf is written as "inf" in strict JSON; older reports carry a float inf
        out[f"throughput.{k}"] = "inf" if str(v) in ("inf", "Infinity") else v
    out.update({f"single_stream.{k}": ss.get(k) for k in ("prompt", "max_tokens")})
    return out


def reference_of(report: dict[str, Any], how: str) -> Reference:
    return Reference(
        engine=report.get("engine") or "unknown",
        workload=workload(report.get("config") or {}),
        key_metrics=report.get("key_metrics") or {},
        started_at=report.get("started_at") or "",
        labels=report.get("labels") or {},
        how=how,
        answers=report.get("reference_answers"),
        noise=report.get("key_noise") or {},
    )


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    return ".".join(str(p) for p in e["loc"]) + f": {e['msg']}"


def parse(data: Any, source: str) -> BaselineFile:
    """Validate a loaded baseline (either format); BaselineError names the bad field."""
    if not isinstance(data, dict):
        raise BaselineError(f"{source}: must be a JSON object")
    try:
        if "schema" in data:
            if data["schema"] != SCHEMA:
                raise BaselineError(f"{source}: schema {data['schema']!r} is not {SCHEMA!r}")
            return BaselineFile.model_validate(data)
        if data.get("verdict") != "pass":  # the old format: a passing report.json
            raise BaselineError(f"{source}: not a baseline and not a passing report (verdict {data.get('verdict')!r})")
        return BaselineFile.model_validate({"schema": SCHEMA, "reference": reference_of(data, "legacy report")})
    except ValidationError as exc:
        raise BaselineError(f"{source}: {_first_error(exc)}") from None


def load(path: str | Path) -> BaselineFile | None:
    """The group's baseline, or None when the group has none yet."""
    p = Path(path)
    if not p.exists():
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BaselineError(f"{p}: not readable JSON: {exc}") from None
    return parse(data, str(p))


def record(path: str | Path, report: dict[str, Any], promote: bool) -> tuple[bool, str]:
    """Make ``report`` the group's reference if it has none (or ``promote``); returns (written, note).

    Only a passing report can become a reference. Read, decide and write happen under
    one lock, so two gates that pass at once cannot both become "the first".
    """
    if report.get("verdict") != "pass":
        return False, "baseline not written: the gate failed"
    p = Path(path)
    with locked(p):
        try:
            current = load(p)
        except BaselineError as exc:
            if not promote:
                return False, f"baseline not written: the existing file is unusable ({exc}); promote explicitly"
            current = None
        if (
            current is not None
            and not promote
            and current.reference.answers is None
            and report.get("reference_answers")
        ):
            # a reference from before the answers check: keep its figures, add this gate's answers
            current.reference.answers = report["reference_answers"]
            doc = {
                "schema": SCHEMA,
                "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "reference": current.reference.model_dump(),
                "history": [h.model_dump() for h in current.history],
            }
            write_json_atomic(p, doc)
            return True, f"baseline kept, the group's reference answers added: {p}"
        if current is not None and not promote:
            return False, (
                f"baseline kept: the group's reference is from {current.reference.started_at or 'an earlier gate'} "
                "(an ordinary pass never replaces it; --promote-baseline does)"
            )
        how = "promoted (--promote-baseline)" if promote else "first passing gate of the group"
        new = reference_of(report, how)
        history = [current.reference, *current.history][:HISTORY] if current is not None else []
        doc = {
            "schema": SCHEMA,
            "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "reference": new.model_dump(),
            "history": [h.model_dump() for h in history],
        }
        write_json_atomic(p, doc)
    return True, f"baseline written ({how}): {p}"
