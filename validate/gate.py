"""The gate: run the phases in order (validate/phases.py), judge each (validate/checks.py), build the report.

Order: readiness, server info, sampler warm-up, single stream, throughput (repeated),
stability sweep, then the output check, the log scan and the baseline. A phase that
finds the server dead or wedged stops the phases after it (listed as skipped), so a
broken host fails quickly and says where it broke. The verdict is "pass" only when
every check passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import __version__ as GATE_VERSION
from . import baseline as baseline_store
from . import checks as judge
from .checks import Check
from .client import make_session
from .config import GateConfig
from .limits import raise_open_files
from .logscan import DOCKER_PREFIX, LogScanResult, container_log_path, fetch_container_log, scan_logs
from .metrics import METRIC_DEFINITIONS
from .phases import Measurements, Measurer, StabilityStep
from .serverinfo import TEST_ENGINE_NOTE

SCHEMA_VERSION = 2


@dataclass
class GateOptions:
    url: str
    config: GateConfig
    config_path: str
    logs: list[str] = field(default_factory=list)
    baseline_path: str | None = None
    patch_record: dict[str, Any] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    report_dir: str | None = None


def key_metrics(tp: dict[str, Any] | None, ss: dict[str, Any] | None) -> dict[str, float | None]:
    """What a baseline compares: the throughput medians and the single-stream speed."""
    tp, ss = tp or {}, ss or {}
    lat = bool(tp.get("completed"))  # latencies of zero completed requests are not measurements
    return {
        "total_token_throughput": tp.get("total_throughput"),
        "output_token_throughput": tp.get("output_throughput"),
        "request_throughput": tp.get("request_throughput"),
        "single_stream_decode_tok_s": ss.get("decode_tok_s") if ss.get("success") else None,
        "p99_ttft_ms": tp.get("p99_ttft_ms") if lat else None,
        "p99_e2e_latency_ms": tp.get("p99_e2e_latency_ms") if lat else None,
        "mean_e2e_latency_ms": tp.get("mean_e2e_latency_ms") if lat else None,
    }


def compare_baseline(
    path: str | None, engine: str, config: GateConfig, now: dict[str, float | None]
) -> tuple[dict[str, Any], list[Check]]:
    """Read the group's reference now (after the load: a wave's first gate may have written it) and compare."""
    info: dict[str, Any] = {"path": path, "used": False}
    if not path:
        info["note"] = "no --baseline given: no regression check"
        return info, []
    try:
        ref_file = baseline_store.load(path)
    except baseline_store.BaselineError as exc:
        info["note"] = f"baseline not compared: {exc}"
        return info, []
    if ref_file is None:
        info["note"] = f"no baseline yet at {path}: no regression check this run"
        return info, []
    ref = ref_file.reference
    info["reference"] = {"started_at": ref.started_at, "labels": ref.labels, "how": ref.how}
    if ref.engine != engine:
        info["note"] = f"baseline was measured on engine {ref.engine!r}, this server is {engine!r}: not compared"
        return info, []
    mine = baseline_store.workload(config.model_dump())
    changed = [f"{k}: {ref.workload.get(k)!r} -> {v!r}" for k, v in mine.items() if ref.workload.get(k) != v]
    if changed:
        info["note"] = "baseline measured a different workload, not compared (" + "; ".join(changed) + ")"
        return info, []
    checks = judge.baseline(ref.key_metrics, now, config)
    info.update(
        used=True,
        note=f"compared with the group's reference from {ref.started_at or 'unknown time'} ({ref.how})",
        tolerance=config.baseline.tolerance,
        values={k: {"baseline": ref.key_metrics.get(k), "measured": now.get(k)} for k in config.baseline.metrics},
    )
    return info, checks


def scan(logs: list[str], config: GateConfig, report_dir: str | None, since: str | None) -> LogScanResult:
    """Scan log files; ``docker:NAME`` entries are fetched now (``--since`` the gate's start) next to the report."""
    files: list[str] = []
    errors: list[str] = []
    for entry in logs:
        if not entry.startswith(DOCKER_PREFIX):
            files.append(entry)
            continue
        name = entry[len(DOCKER_PREFIX) :]
        dest = container_log_path(report_dir or ".", name)
        err = fetch_container_log(name, dest, since)
        if err:
            errors.append(err)
        else:
            files.append(str(dest))
    lc = config.logs
    res = scan_logs(files, {s.name: s.pattern for s in lc.extra_signatures}, lc.context_lines)
    res.errors = errors + res.errors
    return res


class Gate:
    """Runs every phase against ``opts.url``, judges each, and builds the report dict."""

    def __init__(self, opts: GateOptions, say: Callable[[str], None]) -> None:
        self.o = opts
        self.c = opts.config
        self.say = say
        self.base = opts.url.rstrip("/")
        self.checks: list[Check] = []
        self.skipped: list[str] = []
        self.m = Measurements()
        self.down = False
        self.step_passed: dict[int, bool] = {}  # stability step number -> the judge's verdict

    def _add(self, *found: Check | None) -> None:
        for check in found:
            if check is not None:
                self.checks.append(check)
                if not check.passed:
                    self.say(check.message)

    def _health(self, phase: str, h: Any) -> None:
        self.m.health.append(h)
        c = judge.health(phase, h)
        self._add(c)
        self.down = self.down or c is not None

    def _open_files(self) -> None:
        c = self.c
        tp = c.throughput
        biggest = max(
            [1]  # the single stream and the probes
            + ([min(tp.num_prompts, tp.max_concurrency or tp.num_prompts)] if tp.enabled else [])
            + (list(c.stability.concurrency) if c.stability.enabled else [])
        )
        self.m.file_limit = raise_open_files(biggest)
        if self.m.file_limit.adjusted:
            self.say(self.m.file_limit.note)

    async def _measure(self) -> None:
        async with make_session() as session:
            mm = Measurer(session, self.base, self.c, self.say)
            self.m.readiness = await mm.readiness()
            self._add(judge.readiness(self.m.readiness, self.c.readiness.timeout_s))
            if not self.m.readiness.ready:
                self.down = True  # every phase below is listed as skipped, with this reason
            else:
                self.m.server = await mm.server_info()
                if self.m.server.summary["engine"] == "test-engine":
                    self.say("NOTE: " + TEST_ENGINE_NOTE)
                self.m.warmup = await mm.sampler_warmup()
                if not self.m.warmup.ok:  # a server that hangs or dies at its first request stops the gate here
                    self._health("sampler_warmup", await mm.health("after the failed warm-up request"))
            phases = [
                ("single_stream", self.c.single_stream.enabled, self._single_stream),
                ("throughput", self.c.throughput.enabled, self._throughput),
                ("stability", self.c.stability.enabled, self._stability),
            ]
            for name, enabled, fn in phases:
                if not enabled:
                    self.skipped.append(f"{name}: disabled in config")
                elif self.down:
                    self.skipped.append(f"{name}: skipped, the server was down or wedged")
                else:
                    try:
                        await fn(mm)
                    except Exception as exc:  # a gate bug in one phase: fail it, keep the report
                        text = f"FAILED {name}: gate error {exc.__class__.__name__}: {exc}"
                        self._add(Check(f"{name}.error", False, None, None, "", text))

    async def _single_stream(self, mm: Measurer) -> None:
        assert self.m.server is not None  # phases run only after readiness, which read the server info
        ss = self.m.single_stream = await mm.single_stream(self.m.server.model)
        self._add(*judge.single_stream(ss, self.c))
        if not ss.request.success:
            self._health("single_stream", await mm.health("after the failed single-stream request"))

    async def _throughput(self, mm: Measurer) -> None:
        tp = self.m.throughput = await mm.throughput(self.m.file_limit)
        self._add(*judge.throughput(tp, self.c))
        if not tp.refused:
            self._health("throughput", await mm.health("after the throughput phase"))

    async def _stability(self, mm: Measurer) -> None:
        conc = self.c.stability.concurrency
        for idx, c in enumerate(conc, start=1):
            if self.down:
                self.m.stability.append(StabilityStep(idx, len(conc), c, 0, skipped=True))
                continue
            st = await mm.stability_step(idx, len(conc), c, self.m.file_limit)
            self.m.stability.append(st)
            check = judge.stability_step(st, self.c)
            self.step_passed[idx] = check.passed
            self.checks.append(check)
            self.say(check.message)
            if st.health is not None:
                self.m.health.append(st.health)
                self.down = self.down or not st.health.healthy

    def _step_dict(self, st: StabilityStep) -> dict[str, Any]:
        """The step's measurements plus its verdict (the judge's check of that step)."""
        d = st.to_dict()
        if not st.skipped:
            d["passed"] = self.step_passed[st.step]
        return d

    async def run(self) -> dict[str, Any]:
        started = datetime.now(UTC)
        self._open_files()
        await self._measure()
        self._add(judge.output(self.m.results))
        scanned = self.c.logs.enabled and bool(self.o.logs)
        logs = scan(self.o.logs, self.c, self.o.report_dir, started.isoformat()) if scanned else None
        if logs is not None:
            self._add(judge.logs(logs))
        elif self.c.logs.enabled:
            self.skipped.append("logs: no --log file given")
        summary = self.m.server.summary if self.m.server else {"engine": "unknown", "source": "unavailable"}
        engine = summary["engine"]
        tp = self.m.throughput.to_dict() if self.m.throughput and self.m.throughput.runs else None
        ss = self.m.single_stream.to_dict() if self.m.single_stream else None
        km = key_metrics(tp, ss)
        base_info, base_checks = compare_baseline(self.o.baseline_path, engine, self.c, km)
        self._add(*base_checks)
        m = self.m
        phases: dict[str, Any] = {
            "readiness": asdict(m.readiness) if m.readiness else None,
            "open_files": asdict(m.file_limit) if m.file_limit else None,
            "sampler_warmup": asdict(m.warmup) if m.warmup else None,
            "single_stream": ss,
            "throughput": tp or (m.throughput.to_dict() if m.throughput else None),
            "stability": {"steps": [self._step_dict(s) for s in m.stability]} if m.stability else None,
            "health_checks": [asdict(h) for h in m.health],
            "logs": logs.to_dict() if logs else None,
            "server_info_raw": m.server.raw if m.server else None,
            "server_info_note": m.server.note if m.server else None,
        }
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": f"sglang-gate {GATE_VERSION}",
            "verdict": judge.verdict(self.checks),
            "engine": engine,
            "engine_note": TEST_ENGINE_NOTE if engine == "test-engine" else "",
            "url": self.base,
            "started_at": started.isoformat(timespec="seconds"),
            "duration_s": round((datetime.now(UTC) - started).total_seconds(), 2),
            "labels": self.o.labels,
            "config_file": self.o.config_path,
            "config": self.c.model_dump(),
            "server_info": summary,
            "patch_record": self.o.patch_record,
            "checks": [asdict(c) for c in self.checks],
            "failed_checks": [c.name for c in self.checks if not c.passed],
            "skipped": self.skipped,
            "key_metrics": km,
            "baseline": base_info,
            "phases": {k: v for k, v in phases.items() if v is not None},
            "metric_definitions": METRIC_DEFINITIONS,
        }


def rejudge_logs(report: dict[str, Any], config: GateConfig, logs: list[str], report_dir: str) -> dict[str, Any]:
    """Add the server's log of the gate window to a finished report and judge it again.

    The rollout fetches the container's log (``docker logs --since <gate start>``) after
    the gate, from a host the controller-side gate cannot read; the files the gate
    already scanned are scanned again with them, and the one ``logs.crash_signatures``
    check and the verdict are replaced.
    """
    earlier = ((report.get("phases") or {}).get("logs") or {}).get("files") or []
    files = [f for f in earlier if Path(f).is_file()] + [f for f in logs if f not in earlier]
    res = scan(files, config, report_dir, None)
    check = judge.logs(res)
    kept = [c for c in report.get("checks", []) if c.get("name") != "logs.crash_signatures"]
    report["checks"] = [*kept, asdict(check)]
    report["failed_checks"] = [c["name"] for c in report["checks"] if not c["passed"]]
    report["verdict"] = judge.verdict([Check(**c) for c in report["checks"]])
    report.setdefault("phases", {})["logs"] = res.to_dict()
    report["skipped"] = [s for s in report.get("skipped", []) if not s.startswith("logs:")]
    return report
