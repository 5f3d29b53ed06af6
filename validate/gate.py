"""The gate itself: readiness, server info, single stream, throughput, sweep, logs, baseline.

Phases run in that order against one server. Each produces metrics for the report
and named checks ({name, passed, measured, required, unit, message}); the verdict is
"pass" only when every check passed. A phase that finds the server dead or wedged
stops the phases after it (they are listed as skipped), so a broken host fails
quickly and says where it broke.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from . import __version__ as GATE_VERSION
from .client import chat_stream, get_json, make_session, probe
from .config import GateConfig
from .load import LoadResult, random_ids, run_load
from .logscan import scan_logs
from .metrics import METRIC_DEFINITIONS, BenchMetrics, RequestResult
from .serverinfo import TEST_ENGINE_NOTE, model_name, redact, summarize

SCHEMA_VERSION = 1

# Key metrics a baseline compares: name -> (higher is better?, unit).
KEY_METRICS: dict[str, tuple[bool, str]] = {
    "total_token_throughput": (True, "tok/s"),
    "output_token_throughput": (True, "tok/s"),
    "request_throughput": (True, "req/s"),
    "single_stream_decode_tok_s": (True, "tok/s"),
    "p99_ttft_ms": (False, "ms"),
    "p99_e2e_latency_ms": (False, "ms"),
    "mean_e2e_latency_ms": (False, "ms"),
}


@dataclass
class Check:
    """One gate decision; ``required`` is compared to ``measured`` with ``op``."""

    name: str
    passed: bool
    measured: float | int | str | None
    required: float | int | str | None
    unit: str
    message: str
    op: str = ""


@dataclass
class GateOptions:
    url: str
    config: GateConfig
    config_path: str
    logs: list[str] = field(default_factory=list)
    baseline: dict[str, Any] | None = None
    baseline_path: str | None = None
    baseline_note: str = ""
    patch_record: dict[str, Any] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    report_dir: str | None = None


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3g}"
    return str(v)


def _threshold(
    name: str, measured: float | None, required: float | None, op: str, unit: str, what: str
) -> Check | None:
    """A floor (op '>=') or ceiling (op '<=') check; None when the config sets no threshold.

    ``measured`` None means nothing completed to measure: a failed check, never a pass
    (a latency ceiling must not pass because every request failed).
    """
    if required is None:
        return None
    if measured is None:
        return Check(name, False, None, required, unit, f"FAILED {what}: not measured, no request completed", op)
    ok = measured >= required if op == ">=" else measured <= required
    verb = "at least" if op == ">=" else "at most"
    msg = f"{what}: {_fmt(measured)} {unit} (required {verb} {_fmt(required)} {unit})"
    return Check(name, ok, round(measured, 3), required, unit, msg if ok else "FAILED " + msg, op)


def _workload(config: dict[str, Any]) -> dict[str, Any]:
    """The config fields that make two runs' figures comparable (a baseline must match them)."""
    tp = config.get("throughput") or {}
    ss = config.get("single_stream") or {}
    keys = ("num_prompts", "input_len", "output_len", "request_rate", "max_concurrency")
    out = {f"throughput.{k}": tp.get(k) for k in keys}
    out.update({f"single_stream.{k}": ss.get(k) for k in ("prompt", "max_tokens")})
    return out


class Gate:
    """Runs every phase against ``opts.url`` and builds the report dict."""

    def __init__(self, opts: GateOptions, say: Callable[[str], None]) -> None:
        self.o = opts
        self.c = opts.config
        self.say = say
        self.base = opts.url.rstrip("/")
        self.checks: list[Check] = []
        self.phases: dict[str, Any] = {}
        self.skipped: list[str] = []
        self.server_down = False
        self.all_results: list[RequestResult] = []

    def _add(self, check: Check | None) -> None:
        if check is not None:
            self.checks.append(check)
            if not check.passed:
                self.say(check.message)

    async def _with_progress(self, aw: Any, what: str) -> Any:
        """Await ``aw``, printing ``what`` with the elapsed time every progress_interval_s."""
        task = asyncio.ensure_future(aw)
        start = time.monotonic()
        while True:
            done, _ = await asyncio.wait({task}, timeout=self.c.progress_interval_s)
            if done:
                return task.result()
            self.say(f"{what}: {time.monotonic() - start:.0f}s elapsed")

    # ----- phases -----
    async def readiness(self, session: aiohttp.ClientSession) -> bool:
        """Wait for /health then /health_generate to answer 200, with a deadline and progress."""
        rc = self.c.readiness
        start = time.monotonic()
        last = "no answer yet"
        next_note = 0.0
        while True:
            elapsed = time.monotonic() - start
            remaining = rc.timeout_s - elapsed
            if remaining <= 0:
                break
            per = min(rc.request_timeout_s, max(remaining, 0.5))
            st, err = await probe(session, self.base + "/health", per)
            if st == 200:
                st2, err2 = await probe(session, self.base + "/health_generate", per)
                if st2 == 200:
                    secs = time.monotonic() - start
                    self.phases["readiness"] = {"ready": True, "seconds": round(secs, 2)}
                    self.say(f"ready after {secs:.1f}s (/health and /health_generate answered 200)")
                    self._add(
                        Check(
                            "readiness",
                            True,
                            round(secs, 2),
                            rc.timeout_s,
                            "s",
                            f"server ready after {secs:.1f}s",
                            "<=",
                        )
                    )
                    return True
                last = f"/health_generate: {err2}"
            else:
                last = f"/health: {err}"
            if elapsed >= next_note:
                self.say(f"waiting for {self.base}/health: {elapsed:.0f}s of {rc.timeout_s:g}s (last: {last})")
                next_note = elapsed + rc.interval_s
            await asyncio.sleep(min(rc.interval_s, max(0.0, rc.timeout_s - (time.monotonic() - start))))
        self.phases["readiness"] = {"ready": False, "seconds": rc.timeout_s, "last_error": last}
        self._add(
            Check(
                "readiness",
                False,
                None,
                rc.timeout_s,
                "s",
                f"FAILED server not ready within {rc.timeout_s:g}s (readiness.timeout_s); last: {last}",
                "<=",
            )
        )
        self.server_down = True
        return False

    async def server_info(self, session: aiohttp.ClientSession) -> tuple[dict[str, Any], str]:
        to = self.c.readiness.request_timeout_s
        _, si, _ = await get_json(session, self.base + "/get_server_info", to)
        if si is None:
            _, si, _ = await get_json(session, self.base + "/server_info", to)
        _, mi, _ = await get_json(session, self.base + "/get_model_info", to)
        if mi is None:
            _, mi, _ = await get_json(session, self.base + "/model_info", to)
        _, models, _ = await get_json(session, self.base + "/v1/models", to)
        si = si if isinstance(si, dict) else None
        mi = mi if isinstance(mi, dict) else None
        summary = summarize(si, mi)
        summary["source"] = "/get_server_info" if si else "unavailable"
        self.phases["server_info_raw"] = redact(si) if si else None
        return summary, model_name(si, models if isinstance(models, dict) else None)

    async def sampler_warmup(self, session: aiohttp.ClientSession) -> None:
        """One untimed sampled request (temperature/top_p set) before anything is measured.

        SGLang's start-up warm-up is greedy, so FlashInfer's sampling kernel is JIT-built
        by the first sampled request: minutes on a cold cache (docs/flashinfer-cache.md),
        which must not land in a measured TTFT. Its result is recorded, never gated on.
        """
        body = json.dumps(
            {"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 4, "temperature": 0.7, "top_p": 0.9}}
        ).encode()
        timeout = self.c.single_stream.timeout_s
        t0 = time.monotonic()
        try:
            async with session.post(
                self.base + "/generate",
                data=body,
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                await resp.read()
                ok, note = resp.status == 200, f"HTTP {resp.status}"
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            ok, note = False, f"{exc.__class__.__name__}: {exc}"[:200]
        secs = time.monotonic() - t0
        self.phases["sampler_warmup"] = {"ok": ok, "seconds": round(secs, 2), "note": note}
        if secs > 10 or not ok:
            self.say(f"sampler warm-up request: {note} after {secs:.1f}s (untimed)")
        if not ok:  # a server that hangs or dies at its first request stops the gate here
            await self._health_after(session, "sampler_warmup", "after the failed warm-up request")

    async def single_stream(self, session: aiohttp.ClientSession, model: str) -> None:
        sc = self.c.single_stream
        self.say(f"single stream: {sc.prompt!r}, max_tokens {sc.max_tokens} (/v1/chat/completions)")
        try:
            r = await self._with_progress(
                asyncio.wait_for(
                    chat_stream(session, self.base + "/v1/chat/completions", model, sc.prompt, sc.max_tokens),
                    timeout=sc.timeout_s,
                ),
                f"single stream: waiting for the answer (deadline {sc.timeout_s:g}s)",
            )
        except TimeoutError:
            r = RequestResult(error=f"no complete answer within single_stream.timeout_s = {sc.timeout_s:g}s")
        self.all_results.append(r)
        decode = (
            (r.output_len - 1) / (r.latency - r.ttft) if r.success and r.output_len > 1 and r.latency > r.ttft else 0.0
        )
        data = {
            "success": r.success,
            "error": r.error,
            "output_tokens": r.output_len,
            "ttft_ms": round(r.ttft * 1000, 2),
            "e2e_s": round(r.latency, 3),
            "decode_tok_s": round(decode, 3),
            "e2e_tok_s": round(r.output_len / r.latency, 3) if r.latency > 0 else 0.0,
            "finish_reason": r.finish_reason,
        }
        self.phases["single_stream"] = data
        if not r.success:
            self._add(Check("single_stream.request", False, None, None, "", f"FAILED single-stream request: {r.error}"))
            await self._health_after(session, "single_stream", "after the failed single-stream request")
            return
        self.say(
            f"single stream: {r.output_len} tokens in {r.latency:.1f}s, TTFT {r.ttft * 1000:.0f} ms, "
            f"decode {decode:.1f} tok/s"
        )
        self._add(
            _threshold(
                "single_stream.decode_tok_s",
                decode,
                sc.min_decode_tok_s,
                ">=",
                "tok/s",
                "single-stream decode speed",
            )
        )
        self._add(_threshold("single_stream.ttft_ms", r.ttft * 1000, sc.max_ttft_ms, "<=", "ms", "single-stream TTFT"))

    def _load_checks(self, prefix: str, m: BenchMetrics, max_failed: int, timed_out: bool, deadline: float) -> None:
        total = m.completed + m.failed
        ok = m.failed <= max_failed
        why = f"; first error: {m.first_error}" if m.first_error else ""
        late = f" ({m.failed} not finished within the {deadline:g}s deadline or failed)" if timed_out else ""
        msg = f"{prefix}: {m.failed} of {total} requests failed{late} (allowed {max_failed})"
        if not ok:
            msg += why
        self._add(
            Check(
                f"{prefix}.failed_requests",
                ok,
                m.failed,
                max_failed,
                "requests",
                msg if ok else "FAILED " + msg,
                "<=",
            )
        )

    async def throughput(self, session: aiohttp.ClientSession) -> None:
        tc = self.c.throughput
        self.say(
            f"throughput: {tc.num_prompts} prompts x {tc.input_len} in / {tc.output_len} out tokens, "
            + ("all at once" if tc.request_rate == float("inf") else f"{tc.request_rate:g} req/s")
            + ", streaming /generate"
        )
        lr = await run_load(
            session,
            self.base + "/generate",
            random_ids(tc.num_prompts, tc.input_len, tc.vocab_size, tc.seed),
            tc.output_len,
            label="throughput",
            deadline_s=tc.timeout_s,
            request_rate=tc.request_rate,
            max_concurrency=tc.max_concurrency,
            warmup_requests=tc.warmup_requests,
            seed=tc.seed,
            progress=self.say,
            progress_interval_s=self.c.progress_interval_s,
            prewarm_url=self.base + "/v1/models",
        )
        m = lr.metrics
        self.all_results.extend(lr.results)
        self.phases["throughput"] = {**m.to_dict(), "timed_out": lr.timed_out, "deadline_s": tc.timeout_s}
        self.say(
            f"throughput: {m.completed} ok / {m.failed} failed in {m.duration_s:.1f}s: "
            f"total {m.total_throughput:,.0f} "
            f"tok/s, output {m.output_throughput:,.0f} tok/s, p99 TTFT {m.p99_ttft_ms:,.0f} ms, "
            f"mean E2E {m.mean_e2e_latency_ms:,.0f} ms"
        )
        self._load_checks("throughput", m, tc.max_failed, lr.timed_out, tc.timeout_s)
        self._add(
            _threshold(
                "throughput.total_tok_s",
                m.total_throughput,
                tc.min_total_tok_s,
                ">=",
                "tok/s",
                "total token throughput",
            )
        )
        self._add(
            _threshold(
                "throughput.output_tok_s",
                m.output_throughput,
                tc.min_output_tok_s,
                ">=",
                "tok/s",
                "output token throughput",
            )
        )
        lat = m.completed > 0  # latencies of zero requests are not measurements
        self._add(
            _threshold(
                "throughput.p99_ttft_ms", m.p99_ttft_ms if lat else None, tc.max_p99_ttft_ms, "<=", "ms", "p99 TTFT"
            )
        )
        self._add(
            _threshold(
                "throughput.p99_e2e_ms",
                m.p99_e2e_latency_ms if lat else None,
                tc.max_p99_e2e_ms,
                "<=",
                "ms",
                "p99 E2E latency",
            )
        )
        self._add(
            _threshold(
                "throughput.mean_e2e_ms",
                m.mean_e2e_latency_ms if lat else None,
                tc.max_mean_e2e_ms,
                "<=",
                "ms",
                "mean E2E latency",
            )
        )
        await self._health_after(session, "throughput", "after the throughput phase")

    async def _health_after(self, session: aiohttp.ClientSession, name: str, when: str) -> bool:
        to = self.c.stability.health_timeout_s
        st, err = await probe(session, self.base + "/health", to)
        healthy = st == 200
        self.phases.setdefault("health_checks", []).append({"when": when, "healthy": healthy, "error": err})
        if not healthy:
            self.server_down = True
            self._add(
                Check(
                    f"{name}.server_healthy_after",
                    False,
                    "unhealthy",
                    "healthy",
                    "",
                    f"FAILED /health {when}: {err} (stability.health_timeout_s = {to:g}s): "
                    "the server died or is wedged",
                )
            )
        return healthy

    async def stability(self, session: aiohttp.ClientSession) -> None:
        sc = self.c.stability
        steps: list[dict[str, Any]] = []
        self.phases["stability"] = {"steps": steps}
        n = len(sc.concurrency)
        for idx, conc in enumerate(sc.concurrency, start=1):
            label = f"step {idx}/{n} (concurrency {conc})"
            if self.server_down:
                steps.append({"step": idx, "concurrency": conc, "skipped": True})
                continue
            reqs = sc.requests_per_step or conc
            self.say(f"stability {label}: {reqs} requests, {sc.input_len}/{sc.output_len} tokens")
            lr: LoadResult = await run_load(
                session,
                self.base + "/generate",
                random_ids(reqs, sc.input_len, self.c.throughput.vocab_size, self.c.throughput.seed + idx),
                sc.output_len,
                label=f"stability {label}",
                deadline_s=sc.step_timeout_s,
                max_concurrency=conc,
                progress=self.say,
                progress_interval_s=self.c.progress_interval_s,
                prewarm_url=self.base + "/v1/models",
            )
            m = lr.metrics
            self.all_results.extend(lr.results)
            st, err = await probe(session, self.base + "/health", sc.health_timeout_s)
            healthy = st == 200
            ok = healthy and m.failed <= sc.max_failed
            steps.append(
                {
                    **m.to_dict(),
                    "measured_concurrency": m.concurrency,  # bench_serving's sum(E2E)/duration
                    "step": idx,
                    "concurrency": conc,
                    "requests": reqs,
                    "healthy_after": healthy,
                    "health_error": err,
                    "timed_out": lr.timed_out,
                    "passed": ok,
                }
            )
            facts = f"{m.failed} of {reqs} requests failed (allowed {sc.max_failed}), " + (
                f"total {m.total_throughput:,.0f} tok/s, p99 E2E {m.p99_e2e_latency_ms:,.0f} ms"
                if m.completed
                else "none completed"
            )
            if lr.timed_out:
                facts += f", {sc.step_timeout_s:g}s step deadline hit"
            if ok:
                msg = f"stability {label}: ok: {facts}; /health ok after the step"
            elif not healthy:
                msg = (
                    f"FAILED stability {label}: the server died or wedged at this step: "
                    f"/health after the step: {err}; {facts}"
                )
                if m.first_error:
                    msg += f"; first error: {m.first_error}"
            else:
                msg = f"FAILED stability {label}: {facts}; first error: {m.first_error}"
            self.say(msg)
            self.checks.append(
                Check(f"stability.concurrency_{conc}", ok, m.failed, sc.max_failed, "failed requests", msg, "<=")
            )
            if not healthy:
                self.server_down = True

    def _log_files(self) -> tuple[list[str], list[str]]:
        """Files to scan; ``docker:NAME`` entries are fetched now (after the load) into the report folder."""
        files: list[str] = []
        errors: list[str] = []
        for entry in self.o.logs:
            if not entry.startswith("docker:"):
                files.append(entry)
                continue
            name = entry[len("docker:") :]
            dest = Path(self.o.report_dir or ".") / f"container-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.log"
            try:
                proc = subprocess.run(
                    ["docker", "logs", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, check=False
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                errors.append(f"docker logs {name}: {exc}")
                continue
            if proc.returncode != 0:
                errors.append(f"docker logs {name}: {proc.stdout.decode(errors='replace').strip()[:300]}")
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(proc.stdout)
            files.append(str(dest))
        return files, errors

    def logs(self) -> None:
        lc = self.c.logs
        extra = {s.name: s.pattern for s in lc.extra_signatures}
        files, fetch_errors = self._log_files()
        res = scan_logs(files, extra, lc.context_lines)
        res.errors = fetch_errors + res.errors
        self.phases["logs"] = res.to_dict()
        first = res.first
        if first is None and not res.errors:
            self._add(
                Check(
                    "logs.crash_signatures",
                    True,
                    0,
                    0,
                    "matches",
                    f"no crash signature in {len(self.o.logs)} log file(s)",
                    "<=",
                )
            )
            return
        if first is None:
            self._add(
                Check(
                    "logs.crash_signatures",
                    False,
                    None,
                    0,
                    "matches",
                    "FAILED cannot read log: " + "; ".join(res.errors),
                    "<=",
                )
            )
            return
        counts = ", ".join(f"{k} x{v}" for k, v in res.counts.items())
        self._add(
            Check(
                "logs.crash_signatures",
                False,
                len(res.matches),
                0,
                "matches",
                f"FAILED crash signature '{first.signature}' in {first.file}:{first.line_no}: {first.line} "
                f"(all: {counts})",
                "<=",
            )
        )

    def output_check(self) -> None:
        ok_results = [r for r in self.all_results if r.success]
        bad = [r for r in ok_results if r.nan_output]
        if not ok_results:
            return
        example = ""
        if bad:
            fr = bad[0].finish_reason or {}
            example = f"; e.g. finish_reason {fr}" if fr else "; e.g. empty text"
        msg = f"{len(bad)} of {len(ok_results)} successful requests returned empty text or NaN{example}"
        self._add(
            Check(
                "output.empty_or_nan",
                not bad,
                len(bad),
                0,
                "requests",
                msg if not bad else "FAILED " + msg,
                "<=",
            )
        )

    def key_metrics(self) -> dict[str, float | None]:
        tp = self.phases.get("throughput") or {}
        ss = self.phases.get("single_stream") or {}
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

    def baseline_checks(self, engine: str) -> dict[str, Any]:
        b = self.o.baseline
        info: dict[str, Any] = {"path": self.o.baseline_path, "used": False, "note": self.o.baseline_note}
        if b is None:
            return info
        if b.get("engine") != engine:
            info["note"] = (
                f"baseline was measured on engine {b.get('engine')!r}, this server is {engine!r}: not compared"
            )
            return info
        mine = _workload(self.c.model_dump(mode="json"))
        theirs = _workload(b["config"]) if isinstance(b.get("config"), dict) else mine
        changed = [f"{k}: {theirs[k]!r} -> {v!r}" for k, v in mine.items() if theirs[k] != v]
        if changed:
            info["note"] = "baseline measured a different workload, not compared (" + "; ".join(changed) + ")"
            return info
        tol = self.c.baseline.tolerance
        base = b.get("key_metrics") or {}
        now = self.key_metrics()
        info.update(used=True, tolerance=tol, values={})
        for name in self.c.baseline.metrics:
            bv, mv = base.get(name), now.get(name)
            higher, unit = KEY_METRICS[name]
            if bv is None or mv is None:
                info["values"][name] = {"baseline": bv, "measured": mv, "note": "not measured in both runs"}
                continue
            required = bv * tol if higher else bv / tol
            op = ">=" if higher else "<="
            ok = mv >= required if higher else mv <= required
            info["values"][name] = {"baseline": bv, "measured": mv, "required": required}
            rel = f"{tol:.0%} of" if higher else f"1/{tol:g} x"
            msg = (
                f"{name}: {_fmt(mv)} {unit} vs baseline {_fmt(bv)} {unit} (required {op} {_fmt(required)}, "
                f"{rel} baseline)"
            )
            self._add(
                Check(
                    f"baseline.{name}",
                    ok,
                    round(mv, 3),
                    round(required, 3),
                    unit,
                    msg if ok else "FAILED regression: " + msg,
                    op,
                )
            )
        return info

    # ----- whole run -----
    async def run(self) -> dict[str, Any]:
        started = datetime.now(UTC)
        t0 = time.monotonic()
        summary: dict[str, Any] = {"engine": "unknown", "source": "unavailable"}
        async with make_session() as session:
            if await self.readiness(session):
                summary, model = await self.server_info(session)
                if summary["engine"] == "test-engine":
                    self.say("NOTE: " + TEST_ENGINE_NOTE)
                await self.sampler_warmup(session)
                phases = [
                    (
                        "single_stream",
                        self.c.single_stream.enabled,
                        lambda: self.single_stream(session, model),
                    ),
                    ("throughput", self.c.throughput.enabled, lambda: self.throughput(session)),
                    ("stability", self.c.stability.enabled, lambda: self.stability(session)),
                ]
                for name, enabled, fn in phases:
                    if not enabled:
                        self.skipped.append(f"{name}: disabled in config")
                    elif self.server_down:
                        self.skipped.append(f"{name}: skipped, the server was down or wedged")
                    else:
                        try:
                            await fn()
                        except Exception as exc:  # a gate bug in one phase: fail it, keep the report
                            self._add(
                                Check(
                                    f"{name}.error",
                                    False,
                                    None,
                                    None,
                                    "",
                                    f"FAILED {name}: gate error {exc.__class__.__name__}: {exc}",
                                )
                            )
        self.output_check()
        if self.c.logs.enabled and self.o.logs:
            self.logs()
        elif self.c.logs.enabled:
            self.skipped.append("logs: no --log file given")
        engine = summary.get("engine", "unknown")
        baseline = self.baseline_checks(engine)
        verdict = "pass" if self.checks and all(c.passed for c in self.checks) else "fail"
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": f"sglang-gate {GATE_VERSION}",
            "verdict": verdict,
            "engine": engine,
            "engine_note": TEST_ENGINE_NOTE if engine == "test-engine" else "",
            "url": self.base,
            "started_at": started.isoformat(timespec="seconds"),
            "duration_s": round(time.monotonic() - t0, 2),
            "labels": self.o.labels,
            "config_file": self.o.config_path,
            "config": self.c.model_dump(mode="json"),
            "server_info": summary,
            "patch_record": self.o.patch_record,
            "checks": [asdict(c) for c in self.checks],
            "failed_checks": [c.name for c in self.checks if not c.passed],
            "skipped": self.skipped,
            "key_metrics": self.key_metrics(),
            "baseline": baseline,
            "phases": self.phases,
            "metric_definitions": METRIC_DEFINITIONS,
        }
