"""Benchmark metric math, defined as ``sglang.bench_serving`` defines it (0.5.23).

Source read: ``sglang/benchmark/serving.py`` (``calculate_metrics``,
``async_request_sglang_generate``). Definitions, per successful request:

* TTFT: time from sending the request to the first chunk with non-empty text.
* ITL: for each later chunk carrying n new tokens (the streamed ``output_ids`` delta;
  bench_serving reads the server-reported ``completion_tokens``), n gaps of (chunk gap / n).
* TPOT: (E2E - TTFT) / (output_len - 1), only for output_len > 1.
* E2E latency: time from sending to the last chunk (``[DONE]``).
* output_len: the tokens really streamed (``output_ids`` of /generate; a stream without
  them is a failed request, ``uncounted``). bench_serving takes the server's claim, or
  the requested length; the gate never does: a claim that differs from the stream is a
  failed request (``usage_mismatch``), and so is a short one.
* Throughputs: totals over *successful* requests divided by the wall duration of
  the run (first send to last completion, warmup excluded).
* concurrency: sum of E2E latencies / duration.
* Peak output throughput: max over 1-second buckets (from the first start) of
  token timestamps (first token at TTFT, then cumulative ITLs).
* Peak concurrent requests: max over 1-second buckets of requests whose
  [start second, end second] range covers the bucket.
* Percentiles: numpy linear interpolation (``np.percentile``), as bench_serving.

Where this differs, and why: bench_serving also reports "retokenized" output
counts (it needs the model's tokenizer; the gate has none in CI) - omitted. When
nothing succeeded, bench_serving still computes E2E stats over an empty list
(numpy warnings, NaN); here they are reported as 0 and the failed count says why.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

# Why a request failed: the keys of the report's failure histogram.
FAILURE_REASONS = {
    "abort": "SGLang aborted the request (finish_reason abort: queue full, out of memory, scheduler)",
    "error_event": "the stream carried an error object",
    "http_error": "the server answered a status other than 200",
    "short": "fewer tokens than asked with ignore_eos, or none at all",
    "nan": "SGLang's NaN detector stopped the request (matched 'NaN happened')",
    "bad_finish": "the stream ended without a normal finish_reason (length, or stop where EOS is allowed)",
    "no_done": "the stream ended without data: [DONE]",
    "cut_stream": "the connection broke mid-response",
    "connect": "the client could not connect",
    "event_too_large": "one SSE event exceeded the size cap",
    "bad_payload": "an event was not valid JSON",
    "timeout": "no complete answer before the phase deadline",
    "degenerate": "the answer was one token or character repeated, empty, or not decodable (validate/checks.py)",
    "uncounted": "a /generate stream without output_ids: its tokens cannot be counted from what it streamed",
    "usage_mismatch": "the server's token count (meta_info / usage) differs from what it streamed",
    "overlong": "more tokens than max_new_tokens / max_tokens",
}


@dataclass
class RequestResult:
    """What the client saw for one request (times from ``time.perf_counter``).

    ``success`` is set only for a stream that ended normally (see validate/client.py);
    otherwise ``failure`` is one of :data:`FAILURE_REASONS` and ``error`` says more.
    """

    success: bool = False
    prompt_len: int = 0
    output_len: int = 0
    start_time: float = 0.0
    latency: float = 0.0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    error: str = ""
    failure: str = ""
    text_chars: int = 0
    finish_reason: dict[str, Any] | None = None
    claimed_tokens: int | None = None  # what the server said it generated (meta_info / usage)
    text: str = ""  # the answer (kept only where a phase reads it: probes, the single stream)

    def fail(self, reason: str, error: str) -> None:
        """Mark this request failed for ``reason`` (a FAILURE_REASONS key)."""
        assert reason in FAILURE_REASONS, reason
        self.success = False
        self.failure = reason
        self.error = error[:500]

    @property
    def nan_output(self) -> bool:
        """A broken decode: SGLang's NaN detector, or a success without any text."""
        fr = self.finish_reason or {}
        return fr.get("matched") == "NaN happened" or (self.success and self.text_chars == 0)


@dataclass
class BenchMetrics:
    """bench_serving's BenchmarkMetrics fields that the gate reports (ms for latencies)."""

    completed: int
    failed: int
    empty_or_nan_outputs: int
    duration_s: float
    total_input: int
    total_output: int
    request_throughput: float
    input_throughput: float
    output_throughput: float
    total_throughput: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int
    concurrency: float
    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_itl_ms: float
    median_itl_ms: float
    p99_itl_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    p99_tpot_ms: float
    mean_e2e_latency_ms: float
    median_e2e_latency_ms: float
    p99_e2e_latency_ms: float
    first_error: str = ""
    failure_reasons: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _stat(values: list[float], kind: str) -> float:
    """mean/median/p99 in ms; 0 for an empty list (bench_serving: ``np.mean(x or 0)``)."""
    arr = values or [0.0]
    if kind == "mean":
        v = float(np.mean(arr))
    elif kind == "median":
        v = float(np.median(arr))
    else:
        v = float(np.percentile(arr, 99))
    return v * 1000.0


def peak_buckets(results: list[RequestResult]) -> tuple[float, int]:
    """Peak output tokens/s and peak concurrent requests in 1-second buckets (bench_serving)."""
    ok = [r for r in results if r.success]
    if not ok:
        return 0.0, 0
    t0 = min(r.start_time for r in ok)
    t_end = max(r.start_time + r.latency for r in ok)
    n = math.ceil(t_end - t0) + 1
    tokens = np.zeros(n)
    conc = np.zeros(n)
    for r in ok:
        times = [r.start_time + r.ttft]
        cur = times[0]
        for gap in r.itl:
            cur += gap
            times.append(cur)
        for t in times:
            b = int(t - t0)
            if 0 <= b < n:
                tokens[b] += 1
        s = int(r.start_time - t0)
        e = int(r.start_time + r.latency - t0)
        for sec in range(s, min(e + 1, n)):
            conc[sec] += 1
    return float(tokens.max()), int(conc.max())


def compute_metrics(results: list[RequestResult], duration_s: float) -> BenchMetrics:
    """Aggregate per-request results exactly as bench_serving's calculate_metrics does."""
    ttfts: list[float] = []
    itls: list[float] = []
    tpots: list[float] = []
    e2es: list[float] = []
    total_in = total_out = completed = 0
    for r in results:
        if not r.success:
            continue
        completed += 1
        total_in += r.prompt_len
        total_out += r.output_len
        if r.output_len > 1:
            tpots.append((r.latency - r.ttft) / (r.output_len - 1))
        itls.extend(r.itl)
        ttfts.append(r.ttft)
        e2es.append(r.latency)
    dur = duration_s if duration_s > 0 else float("inf")
    peak_tok, peak_conc = peak_buckets(results)
    failed = [r for r in results if not r.success]
    return BenchMetrics(
        completed=completed,
        failed=len(failed),
        empty_or_nan_outputs=sum(1 for r in results if r.nan_output),
        duration_s=duration_s,
        total_input=total_in,
        total_output=total_out,
        request_throughput=completed / dur,
        input_throughput=total_in / dur,
        output_throughput=total_out / dur,
        total_throughput=(total_in + total_out) / dur,
        max_output_tokens_per_s=peak_tok,
        max_concurrent_requests=peak_conc,
        concurrency=sum(e2es) / dur,
        mean_ttft_ms=_stat(ttfts, "mean"),
        median_ttft_ms=_stat(ttfts, "median"),
        p99_ttft_ms=_stat(ttfts, "p99"),
        mean_itl_ms=_stat(itls, "mean"),
        median_itl_ms=_stat(itls, "median"),
        p99_itl_ms=_stat(itls, "p99"),
        mean_tpot_ms=_stat(tpots, "mean"),
        median_tpot_ms=_stat(tpots, "median"),
        p99_tpot_ms=_stat(tpots, "p99"),
        mean_e2e_latency_ms=_stat(e2es, "mean"),
        median_e2e_latency_ms=_stat(e2es, "median"),
        p99_e2e_latency_ms=_stat(e2es, "p99"),
        first_error=failed[0].error[:500] if failed else "",
        failure_reasons=failure_histogram(results),
    )


def failure_histogram(results: list[RequestResult]) -> dict[str, int]:
    """How many requests failed for each reason, most frequent first."""
    counts = Counter(r.failure or "unknown" for r in results if not r.success)
    return dict(counts.most_common())


METRIC_DEFINITIONS = {
    "source": "sglang.bench_serving (sglang/benchmark/serving.py, 0.5.23), see validate/metrics.py",
    "ttft": "send -> first chunk with non-empty text (includes time queued in the client)",
    "itl": "gap between chunks, split evenly over the chunk's new tokens (streamed output_ids delta)",
    "tpot": "(e2e - ttft) / (output_len - 1), requests with output_len > 1",
    "e2e": "send -> [DONE]",
    "success": "the stream ended with data: [DONE] and finish_reason length (or stop where EOS is allowed), "
    "no error event, and with ignore_eos exactly the requested number of tokens; everything else is a failure, "
    "counted by reason in failure_reasons",
    "output_tokens": "tokens streamed (output_ids) by successful requests; never the server's claim alone, never "
    "the requested length",
    "throughput": "tokens of successful requests / wall duration of the phase (warmup excluded)",
    "repeats": "the throughput phase runs `repeats` times; floors and the baseline compare the median of each "
    "metric; spread = (max - min) / median",
    "peak_output_tok_s": "max 1-second bucket of token arrival times",
    "peak_concurrency": "max 1-second bucket of requests in flight",
    "concurrency": "sum(e2e) / duration",
    "single_stream_decode_tok_s": "(streamed output tokens - 1) / (e2e - ttft), i.e. 1 / TPOT, of a lone greedy "
    "/generate",
}


# Key metrics (what floors and the baseline compare): name -> (higher is better?, unit, BenchMetrics field).
# single_stream_decode_tok_s comes from the single-stream phase, not from a load run.
KEY_METRICS: dict[str, tuple[bool, str, str | None]] = {
    "total_token_throughput": (True, "tok/s", "total_throughput"),
    "output_token_throughput": (True, "tok/s", "output_throughput"),
    "request_throughput": (True, "req/s", "request_throughput"),
    "single_stream_decode_tok_s": (True, "tok/s", None),
    "p99_ttft_ms": (False, "ms", "p99_ttft_ms"),
    "p99_e2e_latency_ms": (False, "ms", "p99_e2e_latency_ms"),
    "mean_e2e_latency_ms": (False, "ms", "mean_e2e_latency_ms"),
}

_SUMMED = ("completed", "failed", "empty_or_nan_outputs", "total_input", "total_output")


# From this many runs on, the spread that is judged is the middle half's (see Spread.judged).
ROBUST_RUNS = 4


@dataclass
class Spread:
    """One metric over the repeats of a phase."""

    median: float
    min: float
    max: float
    spread: float | None  # (max - min) / median; None when the median is 0
    n: int = 1
    middle: float | None = None  # (75th - 25th percentile) / median: the spread of the middle half
    noise: float | None = None  # relative standard error of the median (None for one value)

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        med = float(np.median(values))
        lo, hi = float(min(values)), float(max(values))
        q1, q3 = (float(q) for q in np.percentile(values, [25, 75]))
        n = len(values)
        # standard error of a median: sqrt(pi/2) x sd / sqrt(n), relative to the median
        noise = 1.2533 * float(np.std(values, ddof=1)) / med / n**0.5 if med and n > 1 else None
        return cls(med, lo, hi, (hi - lo) / med if med else None, n, (q3 - q1) / med if med else None, noise)

    @property
    def judged(self) -> float | None:
        """The spread the stability rule reads: the full range for up to 3 runs, the middle half's from 4.

        On a real server one run in a handful is disturbed (docs/measurement.md: back-to-back runs on one
        idle server differ by 15-60 %); once the gate has run more repeats because the first
        disagreed, one outlier must not make the host "unstable", while a server whose runs
        really scatter still does (its middle half scatters too).
        """
        return self.middle if self.n >= ROBUST_RUNS else self.spread


def aggregate_runs(runs: list[BenchMetrics]) -> dict[str, Any]:
    """One BenchMetrics-shaped dict for repeated runs: counts summed, every figure the median of the runs.

    Medians, not means: one disturbed run among three must not move the verdict.
    """
    out: dict[str, Any] = {}
    for name in BenchMetrics.__dataclass_fields__:
        values = [getattr(r, name) for r in runs]
        if name in _SUMMED:
            out[name] = sum(values)
        elif name == "failure_reasons":
            total: Counter[str] = Counter()
            for v in values:
                total.update(v)
            out[name] = dict(total.most_common())
        elif name == "first_error":
            out[name] = next((v for v in values if v), "")
        else:
            out[name] = float(np.median(values))
    return out


def key_metric_spreads(runs: list[BenchMetrics]) -> dict[str, Spread]:
    """Median, min, max and relative spread of each load key metric over the runs."""
    return {
        key: Spread.of([float(getattr(r, fld)) for r in runs])
        for key, (_, _, fld) in KEY_METRICS.items()
        if fld is not None
    }
