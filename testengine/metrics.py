"""Prometheus metrics with SGLang's names (only with --enable-metrics, as SGLang does)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

if TYPE_CHECKING:
    from .scheduler import GenRequest

_LABELS = ("model_name", "engine_type")


class EngineMetrics:
    """A private registry so the engine exports only SGLang-named series."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        self.labels = {"model_name": model_name, "engine_type": "test-engine"}
        r = self.registry
        self.running = Gauge("sglang:num_running_reqs", "Running requests.", _LABELS, registry=r)
        self.queued = Gauge("sglang:num_queue_reqs", "Queued requests.", _LABELS, registry=r)
        self.gen_tput = Gauge("sglang:gen_throughput", "Generation throughput (token/s).", _LABELS, registry=r)
        self.token_usage = Gauge("sglang:token_usage", "KV cache token usage (0..1).", _LABELS, registry=r)
        self.prompt_tokens = Counter("sglang:prompt_tokens", "Prefill tokens processed.", _LABELS, registry=r)
        self.gen_tokens = Counter("sglang:generation_tokens", "Generation tokens produced.", _LABELS, registry=r)
        self.requests = Counter("sglang:num_requests", "Requests finished.", _LABELS, registry=r)
        buckets = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds", "Time to first token.", _LABELS, buckets=buckets, registry=r
        )
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds",
            "Inter-token latency.",
            _LABELS,
            buckets=(0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.25, 0.5, 1),
            registry=r,
        )
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds", "End-to-end latency.", _LABELS, buckets=buckets, registry=r
        )

    def set_gauges(self, running: int, queued: int, gen_throughput: float) -> None:
        self.running.labels(**self.labels).set(running)
        self.queued.labels(**self.labels).set(queued)
        self.gen_tput.labels(**self.labels).set(gen_throughput)
        self.token_usage.labels(**self.labels).set(min(1.0, running / 256))

    def observe_request(self, req: GenRequest) -> None:
        end = req.finished_at or time.monotonic()
        self.prompt_tokens.labels(**self.labels).inc(req.input_len)
        self.gen_tokens.labels(**self.labels).inc(req.tokens_done)
        self.requests.labels(**self.labels).inc()
        if req.first_token_at is not None:
            self.ttft.labels(**self.labels).observe(req.first_token_at - req.arrival)
            if req.tokens_done > 1:
                self.itl.labels(**self.labels).observe((end - req.first_token_at) / (req.tokens_done - 1))
        self.e2e.labels(**self.labels).observe(end - req.arrival)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
