"""Load generation: bench_serving's random-ids workload, launched all at once.

Prompts are bench_serving's ``random-ids`` rows with ``--random-range-ratio 1``:
for prompt i, token j = (offset_i + i + j) % vocab_size with random offsets, so
every prompt has exactly ``input_len`` tokens and prompts share no prefix (the
radix cache cannot shortcut them). With request_rate = inf every request is created
at once (a semaphore caps them when max_concurrency is set), so latencies include
time spent queued in the client, as in bench_serving.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import numpy as np

from .checks import AnswerRule
from .client import generate_body, generate_stream, prewarm
from .metrics import BenchMetrics, RequestResult, compute_metrics

Progress = Callable[[str], None]


@dataclass
class LoadResult:
    """One load phase: per-request results, its metrics and whether the deadline hit."""

    results: list[RequestResult]
    metrics: BenchMetrics
    timed_out: bool
    deadline_s: float
    warmup: list[RequestResult] = field(default_factory=list)  # untimed, but judged: a failure is a failure

    @property
    def stalled(self) -> int:
        """Requests still open at the deadline: the server stopped streaming (or is far too slow)."""
        return sum(1 for r in self.results if r.failure == "timeout") if self.timed_out else 0


def random_ids(num_prompts: int, input_len: int, vocab_size: int, seed: int) -> list[list[int]]:
    """bench_serving's random-ids prompts with fixed length (range ratio 1.0)."""
    rng = np.random.default_rng(seed)
    offsets = rng.integers(0, vocab_size, size=num_prompts)
    return [[int((int(offsets[i]) + i + j) % vocab_size) for j in range(input_len)] for i in range(num_prompts)]


async def run_load(
    session: aiohttp.ClientSession,
    url: str,
    prompts: list[list[int]],
    output_len: int,
    *,
    label: str,
    deadline_s: float,
    request_rate: float = float("inf"),
    max_concurrency: int | None = None,
    warmup_requests: int = 0,
    seed: int = 0,
    progress: Progress | None = None,
    progress_interval_s: float = 10.0,
    prewarm_url: str | None = None,
    sampling: dict[str, float | int] | None = None,
    rule: AnswerRule | None = None,
) -> LoadResult:
    """Send ``prompts`` to ``url`` (/generate) and measure; never raises on server trouble.

    ``prewarm_url`` (a cheap GET such as /v1/models) opens the connections of the first
    wave before the clock starts, so an infinite-rate burst really leaves at once. The
    warm-up requests share ``deadline_s`` with the run: a server that stalls in the warm-up
    is reported after one deadline, with every measured request counted as not finished.
    """
    num_prompts = len(prompts)
    bodies = [generate_body(ids, output_len, sampling) for ids in prompts]
    t_begin = time.perf_counter()
    warm_results: list[RequestResult] = []
    if warmup_requests:
        warm_len = min(output_len, 32)
        warm_body = generate_body(prompts[0], warm_len, sampling)
        warm = [
            asyncio.ensure_future(generate_stream(session, url, warm_body, len(prompts[0]), warm_len, rule))
            for _ in range(warmup_requests)
        ]
        _, pending = await asyncio.wait(warm, timeout=deadline_s)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for t in warm:
            if t in pending:
                late = RequestResult(prompt_len=len(prompts[0]))
                late.fail("timeout", f"warm-up: no complete answer within the {deadline_s:g}s deadline")
                warm_results.append(late)
            else:
                warm_results.append(t.result())
        if pending:  # stalled before anything was measured: the run would only wait again
            results = []
            for ids in prompts:
                r = RequestResult(prompt_len=len(ids))
                r.fail("timeout", "not sent: the warm-up requests did not finish within the deadline")
                results.append(r)
            return LoadResult(results, compute_metrics(results, 0.0), True, deadline_s, warm_results)
    budget = max(0.001, deadline_s - (time.perf_counter() - t_begin))  # what the warm-up left of the deadline
    if prewarm_url:
        await prewarm(session, prewarm_url, min(num_prompts, max_concurrency or num_prompts))
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    done_count = 0
    failed_count = 0

    async def one(i: int) -> RequestResult:
        nonlocal done_count, failed_count
        if sem is None:
            r = await generate_stream(session, url, bodies[i], len(prompts[i]), output_len, rule)
        else:
            async with sem:
                r = await generate_stream(session, url, bodies[i], len(prompts[i]), output_len, rule)
        done_count += 1
        failed_count += 0 if r.success else 1
        return r

    start = time.perf_counter()
    rng = random.Random(seed)
    tasks: list[asyncio.Task[RequestResult]] = []

    async def launch() -> None:
        for i in range(num_prompts):
            tasks.append(asyncio.ensure_future(one(i)))
            if request_rate != float("inf"):
                await asyncio.sleep(rng.expovariate(request_rate))

    async def ticker() -> None:
        while True:
            await asyncio.sleep(progress_interval_s)
            if progress:
                progress(
                    f"{label}: {done_count}/{num_prompts} done, {failed_count} failed, "
                    f"{time.perf_counter() - start:.0f}s of {deadline_s:g}s"
                )

    tick = asyncio.ensure_future(ticker())
    timed_out = False
    try:
        await asyncio.wait_for(launch(), timeout=budget)
        remaining = max(0.001, budget - (time.perf_counter() - start))
        _, pending = await asyncio.wait(tasks, timeout=remaining)
        if pending:
            timed_out = True
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    except TimeoutError:
        timed_out = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        tick.cancel()
    duration = time.perf_counter() - start
    results: list[RequestResult] = []
    for i, _ in enumerate(prompts):
        t = tasks[i] if i < len(tasks) else None
        if t is not None and t.done() and not t.cancelled() and t.exception() is None:
            results.append(t.result())
        else:
            late = RequestResult(prompt_len=len(prompts[i]))
            late.fail("timeout", f"no complete answer within the {deadline_s:g}s deadline")
            results.append(late)
    return LoadResult(
        results=results,
        metrics=compute_metrics(results, duration),
        timed_out=timed_out,
        deadline_s=deadline_s,
        warmup=warm_results,
    )
