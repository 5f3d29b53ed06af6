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

    {"schema": ..., "reference": {engine, workload, key_metrics, noise, started_at, labels, how,
                                  answers, accuracy},
     "history": [older references, newest first]}

``answers`` are the reference gate's scored greedy answers, ``accuracy`` its score on the known-answer
questions with the settings that make it comparable. A part missing from a reference (written by an
older gate) cannot be compared: the gate fails that comparison and names the way to accept it
(``--promote-baseline``). A passing report.json (the format before this one) is still read as a reference.
"""

from __future__ import annotations

import hashlib
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
    answers: dict[str, Any] | None = None  # the group's reference answers (validate/phases.py, reference)
    noise: dict[str, float | None] = Field(default_factory=dict)  # each key metric's relative standard error
    accuracy: dict[str, Any] | None = None  # {settings, questions, correct, invalid, accuracy} (phases.accuracy)


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
    # the single stream's tokens are counted from streamed ids on /generate (figures from before were
    # the chat route's, counted by the server's usage claim): not the same measurement
    out["single_stream.route"] = "/generate"
    return out


def answer_settings(answers: dict[str, Any]) -> dict[str, Any]:
    """What makes two sets of reference answers comparable: their length and the exact prompts."""
    prompts = [a.get("prompt") for a in answers.get("answers") or [] if isinstance(a, dict)]
    digest = hashlib.sha256(json.dumps(prompts).encode()).hexdigest()[:16]
    return {"max_new_tokens": answers.get("max_new_tokens"), "prompts": digest}


def changes(then: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Each setting that differs, as ``name: then -> now`` (the message of a comparison that cannot be made)."""
    return [f"{k}: {then.get(k)!r} -> {v!r}" for k, v in now.items() if then.get(k) != v]


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
        accuracy=report.get("accuracy"),
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


def record(path: str | Path, report: dict[str, Any], promote: bool, lock_timeout_s: float = 60.0) -> tuple[bool, str]:
    """Make ``report`` the group's reference if it has none (or ``promote``); returns (written, note).

    Only a passing report can become a reference. Read, decide and write happen under
    one lock (waited for at most ``lock_timeout_s``), so two gates that pass at once cannot
    both become "the first".
    """
    if report.get("verdict") != "pass":
        return False, "baseline not written: the gate failed"
    p = Path(path)
    with locked(p, lock_timeout_s):
        try:
            current = load(p)
        except BaselineError as exc:
            if not promote:
                return False, f"baseline not written: the existing file is unusable ({exc}); promote explicitly"
            current = None
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
