"""The test engine's model of a continuous-batching server (not SGLang's scheduler).

One asyncio task runs steps like SGLang's scheduler loop: waiting requests are
admitted up to ``max_running_requests`` and prefilled (time = prompt tokens /
prefill speed; the prefill produces each request's first token), otherwise one
decode step runs for every running request (time = base + growth x running). So
throughput rises with concurrency up to the running limit and flattens after it,
and requests past the limit queue, as on a real server. The model is deliberately
simple: its figures are test-engine figures, never SGLang's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass, field

from .config import EngineConfig


@dataclass(eq=False)
class GenRequest:
    """One generation in flight; the HTTP handler waits on ``progress``."""

    rid: str
    input_len: int
    max_new_tokens: int
    health: bool = False
    stop_after: int | None = None  # nan fault: a broken decode stops early; a stop string ends the answer
    matched: str | None = None  # the stop string that ends it at stop_after
    tokens_done: int = 0
    arrival: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    finished_at: float | None = None
    _waiter: asyncio.Future[None] | None = None

    @property
    def target(self) -> int:
        return self.max_new_tokens if self.stop_after is None else min(self.stop_after, self.max_new_tokens)

    @property
    def finished(self) -> bool:
        return self.tokens_done >= self.target

    def notify(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def progress(self, seen: int) -> int:
        """Wait until more than ``seen`` tokens exist (or the request finished)."""
        while self.tokens_done <= seen and not self.finished:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self.tokens_done


@dataclass
class SchedulerStats:
    """Counters exported in /get_server_info and /metrics."""

    generation_tokens_total: int = 0
    prompt_tokens_total: int = 0
    requests_total: int = 0
    last_gen_throughput: float = 0.0
    steps: int = 0


class Scheduler:
    """Runs prefill/decode steps; see the module docstring for the speed model."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.knobs = config.knobs
        self.max_running = config.max_running_requests
        self.waiting: deque[GenRequest] = deque()
        self.running: list[GenRequest] = []
        self.prefilling: list[GenRequest] = []  # admitted, prefill step in progress
        self.stats = SchedulerStats()
        self.hung = False
        self._wake = asyncio.Event()
        self._tick: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._window: deque[tuple[float, int]] = deque()
        self._deadline = 0.0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def num_user_requests(self) -> int:
        """Generation requests admitted or queued, health probes excluded (fault triggers)."""
        return sum(1 for q in (self.running, self.prefilling, self.waiting) for r in q if not r.health)

    def submit(self, req: GenRequest) -> None:
        self.waiting.append(req)
        if not req.health:
            self.stats.requests_total += 1
            self.stats.prompt_tokens_total += req.input_len
        self._wake.set()

    async def wait_tick(self) -> None:
        """Wait for the end of the next step: proof the loop is alive (SGLang's /health idea)."""
        if self._tick is None or self._tick.done():
            self._tick = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._tick)

    def _decode_step_s(self) -> float:
        n = len(self.running)
        slow = self.config.faults.slow_single_tok_s
        if slow is not None and sum(1 for r in self.running if not r.health) <= 1:
            return 1.0 / slow
        step = (self.knobs.decode_base_ms + self.knobs.decode_per_req_ms * n) / 1000.0
        dip = self.config.faults.slow_first
        if dip is not None and self.stats.requests_total <= dip:  # a dip that passes (the gate's baseline.confirm)
            step *= 3
        return step

    def _emit(self, reqs: list[GenRequest]) -> None:
        now = time.monotonic()
        produced = 0
        for r in reqs:
            r.tokens_done += 1
            produced += 1
            if r.first_token_at is None:
                r.first_token_at = now
            if r.finished:
                r.finished_at = now
            r.notify()
        if produced:
            self.stats.generation_tokens_total += produced
            self._window.append((now, produced))
            while self._window and now - self._window[0][0] > 5.0:
                self._window.popleft()
            span = max(now - self._window[0][0], 0.5)
            self.stats.last_gen_throughput = sum(n for _, n in self._window) / span
        self.running = [r for r in self.running if not r.finished]
        self.stats.steps += 1
        if self._tick is not None and not self._tick.done():
            self._tick.set_result(None)

    async def _step(self, seconds: float) -> None:
        """Sleep until the step's end on a fixed timeline.

        Steps are laid end to end (deadline += step) instead of sleeping ``seconds``
        after the HTTP handlers' own CPU work, so the modelled speed does not drift
        with how busy this Python process is, as long as it keeps up.
        """
        loop = asyncio.get_running_loop()
        self._deadline = max(self._deadline + seconds, loop.time())
        await asyncio.sleep(max(0.0, self._deadline - loop.time()))

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        self._deadline = loop.time()
        while True:
            if self.hung:
                await asyncio.Event().wait()  # hang fault: never step again
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                self._deadline = loop.time()  # a new timeline after idling
                continue
            admitted: list[GenRequest] = []
            while self.waiting and len(self.running) + len(admitted) < self.max_running:
                admitted.append(self.waiting.popleft())
            if admitted:
                self.prefilling = admitted
                tokens = sum(r.input_len for r in admitted)
                await self._step(tokens / self.knobs.prefill_tok_s)
                if self.hung:
                    continue
                self.prefilling = []
                self.running.extend(admitted)
                self._emit(admitted)
            else:
                await self._step(self._decode_step_s())
                if self.hung:
                    continue
                self._emit(list(self.running))
