"""The fleet's state as node_exporter textfile metrics on the controller, for Prometheus and Grafana.

Why: which hosts moved, were rolled back, are left out of the load balancer, wait for repair or
were lost lives in the summary and the fleet state file (summary.py, state.py) on the controller;
an SRE's alerts need it where they look. Written with every summary of a real run (after each
batch, and at the end; a ``--check`` run writes none), from the same summary and state, by
prometheus_client's ``write_to_textfile`` (temporary file, then a rename). Path:
``sglang_rollout_metrics_file`` (default ``<reports dir>/metrics/sglang_rollout.prom``; point it into
the controller's node_exporter textfile directory, or "" for none).

Two kinds of series: ``sglang_rollout_last_run_*`` describe the newest run (its hosts by result,
when its summary was written, its outcome), ``sglang_fleet_*`` the fleet as every run so far left
it (the state file: hosts drained or pending repair, per host too, so an alert can name them).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

# the summary's host lists counted per run
RUN_RESULTS = ("moved", "unchanged", "rolled_back", "put_back", "left_drained", "failed", "unreachable", "not_reached")
OUTCOMES = ("succeeded", "failed", "unreachable", "in_progress")
FLEET_STATES = ("ok", "failed", "unreachable", "in_progress", "drained", "pending_repair")


FILE_NAME = "sglang_rollout.prom"


def metrics_path(run_dir: Path, override: Any = None) -> Path | None:
    """``sglang_rollout_metrics_file`` when set ("" turns the metrics off), else
    ``<reports dir>/metrics/sglang_rollout.prom`` beside the run folders."""
    if override is None:
        return run_dir.parent / "metrics" / FILE_NAME
    return Path(str(override)) if str(override) else None


def images(summary: Mapping[str, Any]) -> list[str]:
    """The images the run's hosts were moved to (their records' target)."""
    return sorted({str(r["image_target"]) for r in summary.get("hosts") or [] if r.get("image_target")})


def outcome(summary: Mapping[str, Any]) -> str:
    """The run's outcome: failed (a host failed: the rollout stopped or will), unreachable (a host
    was lost: it stopped), succeeded (finished, every host of the run reached), else in_progress."""
    if summary.get("failed"):
        return "failed"
    if summary.get("unreachable"):
        return "unreachable"
    if summary.get("finished") and not summary.get("not_reached"):
        return "succeeded"
    return "in_progress"


def registry(summary: Mapping[str, Any], state: Mapping[str, Any], now: float | None = None) -> CollectorRegistry:
    """The families of one summary and the fleet state it was written with."""
    reg = CollectorRegistry()

    def gauge(name: str, doc: str, *labels: str) -> Gauge:
        return Gauge(name, doc, list(labels), registry=reg)

    run_hosts = gauge("sglang_rollout_last_run_hosts", "Hosts of the newest run by result (its summary).", "result")
    for result in RUN_RESULTS:
        run_hosts.labels(result=result).set(len(summary.get(result) or []))
    gauge("sglang_rollout_last_run_timestamp_seconds", "When the newest run last wrote its summary (Unix time).").set(
        time.time() if now is None else now
    )
    gauge(
        "sglang_rollout_last_run_finished", "1 once the newest run wrote its final summary, else 0 (running, stopped)."
    ).set(bool(summary.get("finished")))
    run_outcome = gauge("sglang_rollout_last_run_outcome", "1 for the newest run's outcome, else 0.", "outcome")
    for name in OUTCOMES:
        run_outcome.labels(outcome=name).set(name == outcome(summary))
    gauge("sglang_rollout_last_run_info", "The newest run's id and image (always 1).", "run_id", "image").labels(
        run_id=str(summary.get("run_id", "")), image=",".join(images(summary))
    ).set(1)

    hosts: Mapping[str, Mapping[str, Any]] = state.get("hosts") or {}
    counts = dict.fromkeys(FLEET_STATES, 0)
    for entry in hosts.values():
        last = str(entry.get("outcome"))
        counts[last if last in ("ok", "failed", "unreachable") else "in_progress"] += 1
        counts["drained"] += bool(entry.get("drained"))
        counts["pending_repair"] += bool(entry.get("pending_repair"))
    fleet = gauge(
        "sglang_fleet_hosts",
        "Hosts of the fleet state file by state: the outcome of each host's last run (ok, failed, unreachable,"
        " in_progress), drained (out of the load balancer), pending_repair (the next run finishes it first).",
        "state",
    )
    for name, count in counts.items():
        fleet.labels(state=name).set(count)
    drained = gauge("sglang_fleet_host_drained", "1 if the host is out of the load balancer.", "host")
    pending = gauge("sglang_fleet_host_pending_repair", "1 if the next run finishes this host first.", "host")
    for host, entry in sorted(hosts.items()):
        drained.labels(host=host).set(bool(entry.get("drained")))
        pending.labels(host=host).set(bool(entry.get("pending_repair")))
    return reg


def write_fleet_metrics(path: str | Path, summary: Mapping[str, Any], state: Mapping[str, Any]) -> Path:
    """Write the textfile atomically (a temporary file beside it, then a rename)."""
    path = Path(path)
    if path.suffix != ".prom":
        raise ValueError(f"{path}: node_exporter's textfile collector reads only *.prom files")
    path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
    write_to_textfile(str(path), registry(summary, state))
    return path
