"""The controller's judgement of the fleet lock: did this run take every host of the run?

Each host answers ``rollout_fleet_lock`` (plugins/modules) in preflight; one controller task
(the ``rollout_fleet_lock_judge`` action) reads all the answers. Why all at once: a run may roll
only when it holds *every* host of the run, since the only thing that keeps two runs from rolling the
same hosts is that no host can be held by both. A run that holds part of them releases that part
and stops: of two runs that started at the same moment and split the hosts, the younger one
(the module's order: start, then token) gives up on each host the older one holds, and the older
one waits on each host the younger one took until it goes (``sglang_rollout_lock_wait_s``), so
one of them ends up holding all. What the run took over (a stale heartbeat) or broke
(``sglang_rollout_break_lock``) is written to the run's folder (``fleet-lock.json``) and named in
its summary.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .records import write_json

LOG_NAME = "fleet-lock.json"
HELD_BY_US = ("taken", "ours", "took_over", "broke")


@dataclass
class Verdict:
    """The judgement: ``won`` (every host is this run's), what to release, what to tell."""

    won: bool
    taken: list[str] = field(default_factory=list)  # hosts this run holds now (released when it lost)
    held: dict[str, str] = field(default_factory=dict)  # host -> the other run holding it
    no_answer: dict[str, str] = field(default_factory=dict)  # host -> why its lock could not be taken
    events: list[dict[str, Any]] = field(default_factory=list)  # took over / broke, per host
    msg: str = ""
    warnings: list[str] = field(default_factory=list)


def _short(hosts: list[str], limit: int = 10) -> str:
    return ", ".join(hosts[:limit]) + (f" and {len(hosts) - limit} more" if len(hosts) > limit else "")


def judge(
    results: Mapping[str, Mapping[str, Any]], run_id: str, stale_s: int, check: bool, break_run_id: str = ""
) -> Verdict:
    """``results``: each host's registered ``rollout_fleet_lock`` answer (state present)."""
    verdict = Verdict(won=True)
    by_holder: dict[str, list[str]] = {}
    for host in sorted(results):
        res = results[host]
        outcome = res.get("outcome", "")
        if res.get("unreachable") or res.get("failed") or not outcome:
            verdict.no_answer[host] = str(res.get("msg") or "no answer")[:300]
        elif outcome == "held":
            text = str(res.get("holder_text") or res.get("holder", {}).get("run_id", "?"))
            verdict.held[host] = text
            by_holder.setdefault(text, []).append(host)
        else:
            verdict.taken.append(host)
            if outcome in ("took_over", "broke", "reclaimed"):
                holder = dict(res.get("holder") or {})
                verdict.events.append(
                    {"host": host, "what": outcome, "previous": holder, "text": str(res.get("holder_text", ""))}
                )
    verdict.won = not verdict.held and not verdict.no_answer
    verb = {
        "took_over": "takes over the stale lock of",
        "broke": "breaks the lock of",
        "reclaimed": "takes back the lock left by",
    }
    if check:
        verdict.taken = []  # check mode takes nothing, so nothing is to be released
        verb = {
            key: "would " + value.replace("takes", "take").replace("breaks", "break") for key, value in verb.items()
        }
    why_of = {
        "broke": "sglang_rollout_break_lock",
        "reclaimed": "that run lost a host and stopped: this controller's fleet state",
    }
    for what in ("took_over", "broke", "reclaimed"):
        for text in sorted({e["text"] for e in verdict.events if e["what"] == what}):
            on = [e["host"] for e in verdict.events if e["what"] == what and e["text"] == text]
            why = why_of.get(what, f"heartbeat older than {stale_s} s")
            verdict.warnings.append(f"run {run_id} {verb[what]} {text} on {_short(on)} ({why})")
    if verdict.won:
        took = len(verdict.events)
        verdict.msg = (
            f"{'check mode: a real run would take' if check else 'run ' + run_id + ' holds'} the rollout lock "
            f"of all {len(results)} hosts"
            + (
                f" ({took} of them {'taken over or broken' if not check else 'from a stale or broken lock'})"
                if took
                else ""
            )
        )
        return verdict
    parts = [f"{text} holds {_short(hosts)}" for text, hosts in by_holder.items()]
    parts += [f"{host}: the lock could not be taken ({why})" for host, why in verdict.no_answer.items()]
    release = (
        f" Run {run_id} changed nothing and releases the {len(verdict.taken)} host locks it took"
        f" ({_short(verdict.taken)})."
        if verdict.taken
        else f" Run {run_id} changed nothing and holds no lock."
    )
    advice = (
        " Wait for that run to finish. If it is dead, its lock is taken over once its heartbeat is older than "
        f"sglang_rollout_host_lock_stale_s ({stale_s} s), or break it at once with "
        "-e sglang_rollout_break_lock=<its run id>."
    )
    if break_run_id and by_holder:
        advice += f" (sglang_rollout_break_lock={break_run_id} names no run that holds these hosts.)"
    prefix = "check mode: a real run would stop here, " if check else ""
    verdict.msg = (
        prefix
        + "another rollout holds hosts of this run: "
        + "; ".join(parts)
        + "."
        + ("" if check else release)
        + advice
    )
    return verdict


def log_events(run_dir: Path, verdict: Verdict, run_id: str, user: str, controller: str) -> Path | None:
    """Append what this run took over or broke to ``<run dir>/fleet-lock.json`` (who, whose, where)."""
    if not verdict.events:
        return None
    path = run_dir / LOG_NAME
    try:
        log = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        log = {"run_id": run_id, "events": []}
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for event in verdict.events:
        log["events"].append({**event, "by": f"{user}@{controller}", "run_id": run_id, "at": when})
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(path, log)
    return path


def read_log(run_dir: Path) -> list[dict[str, Any]]:
    """The run's lock events (``[]`` when it took over and broke nothing), for its summary."""
    try:
        return list(json.loads((run_dir / LOG_NAME).read_text(encoding="utf-8")).get("events", []))
    except (OSError, ValueError):
        return []


def as_result(verdict: Verdict) -> dict[str, Any]:
    """The verdict as a task result's fields."""
    return asdict(verdict)
