"""Measuring: each phase talks to the server and returns a typed result, never a verdict.

Judging those results (thresholds, spreads, the baseline) lives in validate/checks.py,
so each verdict rule can be read and tested on its own with hand-built results, and a
report can be judged again (for example with the server's log of the load window,
``python -m validate finalize``) without measuring again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from .client import chat_stream, get_json, probe
from .config import GateConfig
from .limits import FileLimit
from .load import LoadResult, random_ids, run_load
from .metrics import BenchMetrics, RequestResult, Spread, aggregate_runs, key_metric_spreads
from .serverinfo import model_name, redact, summarize

Say = Callable[[str], None]

# /get_server_info of a real SGLang is ~30 KB; a report must stay readable if a server answers megabytes.
SERVER_INFO_CAP = 256 * 1024


@dataclass
class Readiness:
    ready: bool
    seconds: float
    last_error: str = ""


@dataclass
class Health:
    when: str
    healthy: bool
    error: str
    timeout_s: float


@dataclass
class Warmup:
    ok: bool
    seconds: float
    note: str


@dataclass
class ServerInfo:
    summary: dict[str, Any]
    model: str
    raw: dict[str, Any] | None
    note: str = ""


@dataclass
class SingleStream:
    request: RequestResult
    timeout_s: float

    @property
    def decode_tok_s(self) -> float:
        """(completion_tokens - 1) / (E2E - TTFT): 1 / TPOT of the lone request."""
        r = self.request
        if r.success and r.output_len > 1 and r.latency > r.ttft:
            return (r.output_len - 1) / (r.latency - r.ttft)
        return 0.0

    def to_dict(self) -> dict[str, Any]:
        r = self.request
        return {
            "success": r.success,
            "error": r.error,
            "failure": r.failure,
            "output_tokens": r.output_len,
            "ttft_ms": round(r.ttft * 1000, 2),
            "e2e_s": round(r.latency, 3),
            "decode_tok_s": round(self.decode_tok_s, 3),
            "e2e_tok_s": round(r.output_len / r.latency, 3) if r.latency > 0 else 0.0,
            "finish_reason": r.finish_reason,
        }


@dataclass
class Throughput:
    """The saturation workload, run ``repeats`` times back to back."""

    runs: list[LoadResult]
    deadline_s: float
    refused: str = ""  # set when the open-file limit did not allow the phase

    @property
    def metrics(self) -> list[BenchMetrics]:
        return [r.metrics for r in self.runs]

    @property
    def median(self) -> dict[str, Any]:
        return aggregate_runs(self.metrics) if self.runs else {}

    @property
    def spreads(self) -> dict[str, Spread]:
        return key_metric_spreads(self.metrics) if self.runs else {}

    @property
    def timed_out(self) -> bool:
        return any(r.timed_out for r in self.runs)

    @property
    def results(self) -> list[RequestResult]:
        return [x for r in self.runs for x in r.results]

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.median,
            "repeats": len(self.runs),
            "spread": {k: asdict(v) for k, v in self.spreads.items()},
            "runs": [r.metrics.to_dict() for r in self.runs],
            "timed_out": self.timed_out,
            "deadline_s": self.deadline_s,
            "refused": self.refused,
        }


@dataclass
class StabilityStep:
    step: int
    of: int
    concurrency: int
    requests: int
    load: LoadResult | None = None
    health: Health | None = None
    refused: str = ""
    skipped: bool = False

    @property
    def label(self) -> str:
        return f"step {self.step}/{self.of} (concurrency {self.concurrency})"

    def to_dict(self) -> dict[str, Any]:
        base: dict[str, Any] = {
            "step": self.step,
            "of": self.of,
            "concurrency": self.concurrency,
            "requests": self.requests,
        }
        if self.skipped or self.load is None:
            return {**base, "skipped": self.skipped, "refused": self.refused}
        m = self.load.metrics
        return {
            **m.to_dict(),
            **base,
            "measured_concurrency": m.concurrency,  # bench_serving's sum(E2E)/duration
            "healthy_after": bool(self.health and self.health.healthy),
            "health_error": self.health.error if self.health else "",
            "timed_out": self.load.timed_out,
        }


@dataclass
class Measurements:
    """Everything the phases measured in one gate run (what the judges read)."""

    readiness: Readiness | None = None
    server: ServerInfo | None = None
    warmup: Warmup | None = None
    single_stream: SingleStream | None = None
    throughput: Throughput | None = None
    stability: list[StabilityStep] = field(default_factory=list)
    health: list[Health] = field(default_factory=list)
    file_limit: FileLimit | None = None

    @property
    def results(self) -> list[RequestResult]:
        """Every measured request (warm-ups excluded)."""
        out = [self.single_stream.request] if self.single_stream else []
        if self.throughput:
            out += self.throughput.results
        out += [x for s in self.stability if s.load for x in s.load.results]
        return out


class Measurer:
    """Runs the phases against one server through one shared aiohttp session."""

    def __init__(self, session: aiohttp.ClientSession, base: str, config: GateConfig, say: Say) -> None:
        self.s = session
        self.base = base
        self.c = config
        self.say = say

    async def _with_progress(self, aw: Any, what: str) -> Any:
        """Await ``aw``, printing ``what`` with the elapsed time every progress_interval_s."""
        task = asyncio.ensure_future(aw)
        start = time.monotonic()
        while True:
            done, _ = await asyncio.wait({task}, timeout=self.c.progress_interval_s)
            if done:
                return task.result()
            self.say(f"{what}: {time.monotonic() - start:.0f}s elapsed")

    async def readiness(self) -> Readiness:
        """Wait for /health then /health_generate to answer 200, with a deadline and progress."""
        rc = self.c.readiness
        start = time.monotonic()
        last = "no answer yet"
        next_note = 0.0
        while True:
            elapsed = time.monotonic() - start
            remaining = rc.timeout_s - elapsed
            if remaining <= 0:
                return Readiness(False, rc.timeout_s, last)
            per = min(rc.request_timeout_s, max(remaining, 0.5))
            st, err = await probe(self.s, self.base + "/health", per)
            if st == 200:
                st2, err2 = await probe(self.s, self.base + "/health_generate", per)
                if st2 == 200:
                    secs = time.monotonic() - start
                    self.say(f"ready after {secs:.1f}s (/health and /health_generate answered 200)")
                    return Readiness(True, round(secs, 2))
                last = f"/health_generate: {err2}"
            else:
                last = f"/health: {err}"
            if elapsed >= next_note:
                self.say(f"waiting for {self.base}/health: {elapsed:.0f}s of {rc.timeout_s:g}s (last: {last})")
                next_note = elapsed + rc.interval_s
            await asyncio.sleep(min(rc.interval_s, max(0.0, rc.timeout_s - (time.monotonic() - start))))

    async def health(self, when: str) -> Health:
        to = self.c.stability.health_timeout_s
        st, err = await probe(self.s, self.base + "/health", to)
        return Health(when, st == 200, err, to)

    async def server_info(self) -> ServerInfo:
        to = self.c.readiness.request_timeout_s
        si = mi = None
        for path in ("/get_server_info", "/server_info"):
            _, si, _ = await get_json(self.s, self.base + path, to)
            if isinstance(si, dict):
                break
        for path in ("/get_model_info", "/model_info"):
            _, mi, _ = await get_json(self.s, self.base + path, to)
            if isinstance(mi, dict):
                break
        _, models, _ = await get_json(self.s, self.base + "/v1/models", to)
        si = si if isinstance(si, dict) else None
        mi = mi if isinstance(mi, dict) else None
        summary = summarize(si, mi)
        summary["source"] = "/get_server_info" if si else "unavailable"
        raw = redact(si) if si else None
        note = ""
        size = len(json.dumps(raw, default=str)) if raw else 0
        if size > SERVER_INFO_CAP:
            note = f"raw server info was {size:,} bytes (cap {SERVER_INFO_CAP:,}): only its summary is kept"
            raw = {"truncated": True, "bytes": size, "keys": sorted(raw)[:200]}
        return ServerInfo(summary, model_name(si, models if isinstance(models, dict) else None), raw, note)

    async def sampler_warmup(self) -> Warmup:
        """One untimed sampled request (temperature/top_p set) before anything is measured.

        SGLang's start-up warm-up is greedy, so FlashInfer's sampling kernel is JIT-built
        by the first sampled request: minutes on a cold cache (docs/flashinfer-cache.md),
        which must not land in a measured TTFT. Its result is recorded, never gated on.
        """
        body = json.dumps(
            {"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 4, "temperature": 0.7, "top_p": 0.9}}
        ).encode()
        t0 = time.monotonic()
        try:
            async with self.s.post(
                self.base + "/generate",
                data=body,
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=self.c.single_stream.timeout_s),
            ) as resp:
                await resp.read()
                ok, note = resp.status == 200, f"HTTP {resp.status}"
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            ok, note = False, f"{exc.__class__.__name__}: {exc}"[:200]
        secs = time.monotonic() - t0
        if secs > 10 or not ok:
            self.say(f"sampler warm-up request: {note} after {secs:.1f}s (untimed)")
        return Warmup(ok, round(secs, 2), note)

    async def single_stream(self, model: str) -> SingleStream:
        sc = self.c.single_stream
        self.say(f"single stream: {sc.prompt!r}, max_tokens {sc.max_tokens} (/v1/chat/completions)")
        try:
            r = await self._with_progress(
                asyncio.wait_for(
                    chat_stream(self.s, self.base + "/v1/chat/completions", model, sc.prompt, sc.max_tokens),
                    timeout=sc.timeout_s,
                ),
                f"single stream: waiting for the answer (deadline {sc.timeout_s:g}s)",
            )
        except TimeoutError:
            r = RequestResult()
            r.fail("timeout", f"no complete answer within single_stream.timeout_s = {sc.timeout_s:g}s")
        ss = SingleStream(r, sc.timeout_s)
        if r.success:
            self.say(
                f"single stream: {r.output_len} tokens in {r.latency:.1f}s, TTFT {r.ttft * 1000:.0f} ms, "
                f"decode {ss.decode_tok_s:.1f} tok/s"
            )
        return ss

    async def throughput(self, limit: FileLimit | None) -> Throughput:
        tc = self.c.throughput
        conc = min(tc.num_prompts, tc.max_concurrency or tc.num_prompts)
        if limit is not None and not limit.allows(conc):
            return Throughput([], tc.timeout_s, refused=limit.refusal(conc))
        prompts = random_ids(tc.num_prompts, tc.input_len, tc.vocab_size, tc.seed)
        runs: list[LoadResult] = []
        for k in range(1, tc.repeats + 1):
            self.say(
                f"throughput run {k}/{tc.repeats}: {tc.num_prompts} prompts x {tc.input_len} in / "
                f"{tc.output_len} out tokens, "
                + ("all at once" if tc.request_rate == float("inf") else f"{tc.request_rate:g} req/s")
                + ", streaming /generate"
            )
            lr = await run_load(
                self.s,
                self.base + "/generate",
                prompts,
                tc.output_len,
                label=f"throughput run {k}/{tc.repeats}",
                deadline_s=tc.timeout_s,
                request_rate=tc.request_rate,
                max_concurrency=tc.max_concurrency,
                warmup_requests=tc.warmup_requests if k == 1 else 0,
                seed=tc.seed,
                progress=self.say,
                progress_interval_s=self.c.progress_interval_s,
                prewarm_url=self.base + "/v1/models",
            )
            runs.append(lr)
            m = lr.metrics
            self.say(
                f"throughput run {k}/{tc.repeats}: {m.completed} ok / {m.failed} failed in {m.duration_s:.1f}s: "
                f"total {m.total_throughput:,.0f} tok/s, output {m.output_throughput:,.0f} tok/s, "
                f"p99 TTFT {m.p99_ttft_ms:,.0f} ms, mean E2E {m.mean_e2e_latency_ms:,.0f} ms"
            )
            if m.completed == 0:  # nothing got through: more runs only repeat the failure
                break
        return Throughput(runs, tc.timeout_s)

    async def stability_step(self, step: int, of: int, conc: int, limit: FileLimit | None) -> StabilityStep:
        sc = self.c.stability
        reqs = sc.requests_per_step or conc
        st = StabilityStep(step, of, conc, reqs)
        if limit is not None and not limit.allows(conc):
            st.refused = limit.refusal(conc)
            return st
        self.say(f"stability {st.label}: {reqs} requests, {sc.input_len}/{sc.output_len} tokens")
        st.load = await run_load(
            self.s,
            self.base + "/generate",
            random_ids(reqs, sc.input_len, self.c.throughput.vocab_size, self.c.throughput.seed + step),
            sc.output_len,
            label=f"stability {st.label}",
            deadline_s=sc.step_timeout_s,
            max_concurrency=conc,
            progress=self.say,
            progress_interval_s=self.c.progress_interval_s,
            prewarm_url=self.base + "/v1/models",
        )
        st.health = await self.health(f"after stability {st.label}")
        return st
