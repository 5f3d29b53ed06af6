"""A gate's verdict and key figures as node_exporter textfile metrics, for Prometheus and Grafana.

Why: the report (report.json, summary.md) lives on the controller, where no monitoring system
looks. node_exporter's textfile collector (``--collector.textfile.directory``, Debian's
``/var/lib/prometheus/node-exporter``) exposes every ``*.prom`` file of that folder on the host
it runs on, so an SRE's dashboards and alerts see each host's last gate next to its other
metrics. The rollout runs ``python -m validate textfile`` on the host, in the serving image (which
carries validate/ and prometheus-client), after the verdict is final
(roles/sglang_gate/tasks/metrics.yml).

The file is written by prometheus_client's ``write_to_textfile``: a temporary file beside it,
then a rename, so the collector never reads half a file. Names and units follow Prometheus'
conventions: base units (seconds, not the report's milliseconds), ``_seconds`` and
``_timestamp_seconds`` suffixes, HELP and TYPE for every family. Every series carries the labels
``image``, ``model``, ``profile`` (the GPU profile: sglang_gate_baseline_group) and ``engine``
(``test-engine`` for the stand-in, so its figures are never read as SGLang's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest, write_to_textfile

LABELS = ("image", "model", "profile", "engine")
# report key_metrics name -> (metric name, help, factor to the base unit)
FIGURES: dict[str, tuple[str, str, float]] = {
    "total_token_throughput": (
        "sglang_gate_total_token_throughput_tokens_per_second",
        "Median total (input + output) token throughput of the gate's saturation runs.",
        1.0,
    ),
    "output_token_throughput": (
        "sglang_gate_output_token_throughput_tokens_per_second",
        "Median output token throughput of the gate's saturation runs.",
        1.0,
    ),
    "request_throughput": (
        "sglang_gate_request_throughput_requests_per_second",
        "Median request throughput of the gate's saturation runs.",
        1.0,
    ),
    "single_stream_decode_tok_s": (
        "sglang_gate_single_stream_decode_tokens_per_second",
        "Decode speed of a lone request (1 / TPOT), the gate's single-stream phase.",
        1.0,
    ),
    "p99_ttft_ms": ("sglang_gate_p99_ttft_seconds", "99th percentile time to first token under saturation.", 1e-3),
    "p99_e2e_latency_ms": (
        "sglang_gate_p99_e2e_latency_seconds",
        "99th percentile end-to-end request latency under saturation.",
        1e-3,
    ),
    "mean_e2e_latency_ms": (
        "sglang_gate_mean_e2e_latency_seconds",
        "Mean end-to-end request latency under saturation.",
        1e-3,
    ),
}


@dataclass(frozen=True)
class GateMetrics:
    """What the textfile says about one gate: the verdict the rollout acted on, every check, the
    key figures in base units, how long the gate took and when it ended."""

    passed: bool
    checks: dict[str, bool]  # check name -> passed (failed checks named by the rollout included)
    figures: dict[str, float]  # metric name -> value in its base unit (figures not measured left out)
    duration_s: float | None
    finished_at: float | None  # Unix time
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return sorted(name for name, ok in self.checks.items() if not ok)

    @classmethod
    def from_report(
        cls,
        report: Mapping[str, Any],
        labels: Mapping[str, str],
        verdict: str | None = None,
        failed_checks: list[str] | None = None,
    ) -> GateMetrics:
        """From a gate report (``{}`` when the gate wrote none). ``verdict`` and ``failed_checks``:
        the rollout's final word when it differs from the report's (e.g. the gate timed out, or the
        log of the gate window could not be read), else the report's."""
        checks = {str(c["name"]): bool(c.get("passed")) for c in report.get("checks") or [] if "name" in c}
        for name in failed_checks if failed_checks is not None else report.get("failed_checks") or []:
            checks[str(name)] = False
        km = report.get("key_metrics") or {}
        figures = {
            metric: float(km[key]) * factor
            for key, (metric, _, factor) in FIGURES.items()
            if isinstance(km.get(key), int | float) and not isinstance(km.get(key), bool)
        }
        duration = report.get("duration_s")
        started = _timestamp(report.get("started_at"))
        finished = started + float(duration) if started is not None and isinstance(duration, int | float) else None
        engine = str(report.get("engine") or labels.get("engine") or "unknown")
        return cls(
            passed=(verdict or report.get("verdict")) == "pass",
            checks=checks,
            figures=figures,
            duration_s=float(duration) if isinstance(duration, int | float) else None,
            finished_at=finished,
            labels={"engine": engine, **{k: str(v) for k, v in labels.items() if k in LABELS}},
        )


def _timestamp(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except (TypeError, ValueError):
        return None


def registry(m: GateMetrics) -> CollectorRegistry:
    """The metric families of one gate (a fresh registry: nothing of this process leaks in)."""
    reg = CollectorRegistry()
    values = {k: m.labels.get(k, "") for k in LABELS}

    def gauge(name: str, doc: str, value: float, extra: Mapping[str, str] | None = None) -> None:
        g = Gauge(name, doc, [*LABELS, *(extra or {})], registry=reg)
        g.labels(**values, **(extra or {})).set(value)

    gauge("sglang_gate_passed", "1 if the last gate on this host passed (the rollout's verdict), else 0.", m.passed)
    gauge("sglang_gate_failed_checks", "Number of checks the last gate failed.", len(m.failed))
    checks = Gauge(
        "sglang_gate_check_passed", "1 if the check passed in the last gate, 0 if it failed.", [*LABELS, "check"],
        registry=reg,
    )  # fmt: skip
    for name, ok in sorted(m.checks.items()):
        checks.labels(**values, check=name).set(ok)
    docs = {metric: doc for metric, doc, _ in FIGURES.values()}
    for metric, value in m.figures.items():
        gauge(metric, docs[metric], value)
    if m.duration_s is not None:
        gauge("sglang_gate_duration_seconds", "How long the last gate took.", m.duration_s)
    if m.finished_at is not None:
        gauge("sglang_gate_last_run_timestamp_seconds", "When the last gate ended (Unix time).", m.finished_at)
    return reg


def render(m: GateMetrics) -> str:
    """The text exposition format, as the textfile holds it."""
    return generate_latest(registry(m)).decode()


def write(m: GateMetrics, path: str | Path) -> Path:
    """Write the textfile atomically (prometheus_client: temporary file beside it, then a rename)."""
    path = Path(path)
    if path.suffix != ".prom":
        raise ValueError(f"{path}: node_exporter's textfile collector reads only *.prom files")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), registry(m))
    return path


def add_parser(sub: Any) -> None:
    """``python -m validate textfile``: the subcommand's flags (validate/cli.py wires it)."""
    t = sub.add_parser("textfile", help="write a gate report's verdict and figures as node_exporter textfile metrics")
    t.add_argument("--report", required=True, help="report.json, or - for the report on stdin ({} when there is none)")
    t.add_argument("--out", required=True, help="the .prom file to write (in node_exporter's textfile directory)")
    t.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help=f"one of {', '.join(LABELS)}")
    t.add_argument("--verdict", choices=["pass", "fail"], help="the rollout's verdict (default: the report's)")
    t.add_argument("--failed-check", action="append", metavar="NAME", help="a check the rollout failed (repeatable)")


def command(args: Any, read_stdin: Any) -> int:
    """Run the subcommand; ValueError for bad input (the CLI turns it into exit 2 with the message)."""
    import json

    labels: dict[str, str] = {}
    for item in args.label:
        key, sep, value = item.partition("=")
        if not sep or key not in LABELS:
            raise ValueError(f"--label: must be KEY=VALUE with KEY one of {', '.join(LABELS)} (got {item!r})")
        labels[key] = value
    text = read_stdin() if args.report == "-" else Path(args.report).read_text(encoding="utf-8")
    try:
        report = json.loads(text or "{}")
    except ValueError as exc:
        raise ValueError(f"--report: not JSON: {exc}") from None
    if not isinstance(report, dict):
        raise ValueError("--report: must be a JSON object (a gate report)")
    metrics = GateMetrics.from_report(report, labels, args.verdict, args.failed_check)
    path = write(metrics, args.out)
    verdict = "pass" if metrics.passed else f"fail ({', '.join(metrics.failed) or 'no report'})"
    print(f"[gate] metrics: {path}: {verdict}, {len(metrics.figures)} figures", flush=True)
    return 0
