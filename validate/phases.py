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
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from . import arithmetic
from .checks import AnswerRule
from .client import (
    GenerateError,
    chat_stream,
    generate_body,
    generate_json,
    generate_stream,
    get_json,
    probe,
    text_body,
)
from .config import AccuracyConfig, GateConfig
from .limits import FileLimit
from .load import LoadResult, random_ids, run_load
from .metrics import BenchMetrics, RequestResult, Spread, aggregate_runs, key_metric_spreads
from .serverinfo import identity, model_name, redact, served_names, summarize

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
    seconds: float = 0.0  # how long /health took to answer


@dataclass
class Warmup:
    """The untimed sampled request before anything is measured (judged like any request)."""

    request: RequestResult
    seconds: float

    @property
    def ok(self) -> bool:
        return self.request.success

    def to_dict(self) -> dict[str, Any]:
        r = self.request
        return {"ok": r.success, "seconds": self.seconds, "failure": r.failure, "error": r.error}


@dataclass
class ServerInfo:
    summary: dict[str, Any]
    model: str
    raw: dict[str, Any] | None
    note: str = ""
    names: list[str] = field(default_factory=list)  # every name the server answers to (served name, path, /v1/models)


@dataclass
class Identity:
    """Who the server is right now: changes only when the server process (or container) restarted."""

    when: str
    facts: dict[str, Any]
    error: str = ""


def decode_speed(r: RequestResult) -> float:
    """(completion_tokens - 1) / (E2E - TTFT): 1 / TPOT of a lone request."""
    if r.success and r.output_len > 1 and r.latency > r.ttft:
        return (r.output_len - 1) / (r.latency - r.ttft)
    return 0.0


@dataclass
class SingleStream:
    """The lone request, ``single_stream.repeats`` times: one request's speed swings with the GPU's
    clocks (617-745 tok/s on one idle H200, docs/real-sglang-h200.md), the median of a few does less."""

    requests: list[RequestResult]
    timeout_s: float

    @property
    def request(self) -> RequestResult:
        """The one the report shows: the first that failed, else the one at the median speed."""
        bad = [r for r in self.requests if not r.success]
        if bad:
            return bad[0]
        ranked = sorted(self.requests, key=decode_speed)
        return ranked[(len(ranked) - 1) // 2]

    @property
    def decode_tok_s(self) -> float:
        """The median decode speed of the repeats (0 when one failed)."""
        return decode_speed(self.request)

    @property
    def spread(self) -> Spread | None:
        speeds = [decode_speed(r) for r in self.requests]
        return Spread.of(speeds) if all(speeds) else None

    def to_dict(self) -> dict[str, Any]:
        r = self.request
        sp = self.spread
        return {
            "repeats": len(self.requests),
            "decode_tok_s_runs": [round(decode_speed(x), 3) for x in self.requests],
            "noise": sp.noise if sp else None,
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
    flushes: list[str] = field(default_factory=list)  # /flush_cache before each run: "ok" or why not

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
    def warmup(self) -> list[RequestResult]:
        return [x for r in self.runs for x in r.warmup]

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
            "warmup_failed": sum(1 for r in self.warmup if not r.success),
            "flush_cache": self.flushes,
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
class ProbeResult:
    """A user probe (config ``answers.probes``): the answer, judged later against what it must contain."""

    index: int
    prompt: str
    request: RequestResult


# ----- the group's reference answers -----
#
# A server can stream fluent, varied text and still compute the wrong thing (a quantized
# GEMM off by a scale, a wrong attention backend, another checkpoint). The reference phase
# compares what the model *believes*: every gate with --baseline answers a fixed prompt set
# greedily and scores its own answers (per-token log-probabilities with teacher forcing:
# SGLang's ``return_logprob`` with ``logprob_start_len``, one prefill each); those are stored
# when the gate becomes its group's reference. When the group has comparable answers, this
# server also scores theirs: the same weights and kernels give the same log-likelihood to
# within numerical noise, other weights or a broken kernel do not. Both sides are scored on
# the same path (prefill), never decode against prefill. The verdict: checks.reference.

REFERENCE_PROMPTS = Path(__file__).with_name("data") / "reference_prompts.yml"


def reference_prompts() -> list[str]:
    data = yaml.safe_load(REFERENCE_PROMPTS.read_text(encoding="utf-8"))
    assert isinstance(data, list) and all(isinstance(p, str) and p for p in data), REFERENCE_PROMPTS
    return data


@dataclass
class ScoredAnswer:
    prompt: str
    prompt_ids: list[int]
    answer_ids: list[int]
    logprobs: list[float]

    @property
    def mean(self) -> float:
        return sum(self.logprobs) / len(self.logprobs) if self.logprobs else 0.0


@dataclass
class ReferenceResult:
    """This server's own scored greedy answers and, when the group has comparable ones, how far its
    scores of those moved. ``mode``: "recorded" (none compared), "compared" or "error"."""

    mode: str
    error: str = ""
    recorded: dict[str, Any] | None = None  # this gate's answers: stored when it becomes the group's reference
    deltas: list[float] = field(default_factory=list)  # |mean log-likelihood now - reference|, per answer
    divergence: list[int | None] = field(default_factory=list)  # first token where the greedy answer differs
    reference_from: str = ""
    not_compared: str = ""  # why the group's answers could not be compared (set by the gate)
    timed_out: bool = False

    @property
    def worst(self) -> float:
        return max(self.deltas) if self.deltas else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "error": self.error,
            "answers": len((self.recorded or {}).get("answers", [])),
            "deltas": [round(d, 4) for d in self.deltas],
            "worst_delta": round(self.worst, 4),
            "first_divergence": self.divergence,
            "reference_from": self.reference_from,
            "not_compared": self.not_compared,
            "timed_out": self.timed_out,
        }


def _logprob_entries(meta: dict[str, Any], key: str) -> list[tuple[float | None, int]]:
    entries = meta.get(key)
    if not isinstance(entries, list):
        raise GenerateError("bad_payload", f"the server returned no {key} (return_logprob unsupported?)")
    out = []
    for e in entries:
        if not isinstance(e, list | tuple) or len(e) < 2:
            raise GenerateError("bad_payload", f"{key}: unexpected entry {e!r}"[:200])
        out.append((None if e[0] is None else float(e[0]), int(e[1])))
    return out


# ----- accuracy on known answers -----


@dataclass
class AccuracyAnswer:
    """What the server answered to one question (graded by checks.grade)."""

    index: int
    expected: int
    text: str = ""
    output_tokens: int | None = None  # len(output_ids), when the server returned them
    finish: str = ""  # SGLang's finish_reason type: stop | length
    failure: str = ""  # a FAILURE_REASONS key when no answer came
    error: str = ""


@dataclass
class AccuracyResult:
    """The accuracy phase: every question's answer, how long it took, and (set by the gate) the
    group's reference accuracy when it is comparable."""

    settings: dict[str, Any]
    answers: list[AccuracyAnswer]
    seconds: float
    deadline_s: float
    timed_out: bool = False
    reference: dict[str, Any] | None = None  # the group's stored accuracy (same settings)
    reference_from: str = ""
    not_compared: str = ""  # why the group's accuracy could not be compared (set by the gate)

    def to_dict(self) -> dict[str, Any]:
        counted = [a.output_tokens for a in self.answers if a.output_tokens is not None]
        return {
            "settings": self.settings,
            "seconds": self.seconds,
            "deadline_s": self.deadline_s,
            "timed_out": self.timed_out,
            "output_tokens": sum(counted),
            "reference_from": self.reference_from,
            "not_compared": self.not_compared,
        }


def accuracy_settings(ac: AccuracyConfig) -> dict[str, Any]:
    """What makes two accuracy figures comparable: the exact question set and how it is asked."""
    return {
        "set": arithmetic.NAME,
        "version": arithmetic.VERSION,
        "seed": ac.seed,
        "questions": ac.questions,
        "shots": ac.shots,
        "max_new_tokens": ac.max_new_tokens,
        "fingerprint": arithmetic.fingerprint(ac.seed, ac.questions, ac.shots),
    }


@dataclass
class Measurements:
    """Everything the phases measured in one gate run (what the judges read)."""

    readiness: Readiness | None = None
    server: ServerInfo | None = None
    identities: list[Identity] = field(default_factory=list)
    warmup: Warmup | None = None
    probes: list[ProbeResult] = field(default_factory=list)
    reference: ReferenceResult | None = None
    accuracy: AccuracyResult | None = None
    single_stream: SingleStream | None = None
    throughput: Throughput | None = None
    stability: list[StabilityStep] = field(default_factory=list)
    health: list[Health] = field(default_factory=list)
    file_limit: FileLimit | None = None
    # a baseline regression is measured again (Gate._confirm): the first measurements are kept here
    first_single_stream: SingleStream | None = None
    first_throughput: Throughput | None = None

    @property
    def results(self) -> list[RequestResult]:
        """Every measured request (warm-ups excluded)."""
        out = list(self.single_stream.requests) if self.single_stream else []
        out += list(self.first_single_stream.requests) if self.first_single_stream else []
        out += [p.request for p in self.probes]
        for tp in (self.throughput, self.first_throughput):
            if tp:
                out += tp.results
        out += [x for s in self.stability if s.load for x in s.load.results]
        return out


class Measurer:
    """Runs the phases against one server through one shared aiohttp session."""

    def __init__(
        self, session: aiohttp.ClientSession, base: str, config: GateConfig, say: Say, container: str | None = None
    ) -> None:
        self.s = session
        self.base = base
        self.c = config
        self.say = say
        self.container = container  # docker container of the server (--log docker:NAME), for its restart count
        a = config.answers
        self.rule = AnswerRule(a.min_tokens, a.max_repeat_fraction) if a.enabled else None
        self.sampling = config.sampling.model_dump()
        self.stream_interval = 1

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
        t0 = time.monotonic()
        st, err = await probe(self.s, self.base + "/health", to)
        return Health(when, st == 200, err, to, round(time.monotonic() - t0, 3))

    async def _server_info_json(self) -> tuple[dict[str, Any] | None, str]:
        to = self.c.readiness.request_timeout_s
        err = ""
        for path in ("/get_server_info", "/server_info"):
            _, si, err = await get_json(self.s, self.base + path, to)
            if isinstance(si, dict):
                return si, ""
        return None, err or "not a JSON object"

    async def server_info(self) -> ServerInfo:
        to = self.c.readiness.request_timeout_s
        si, _ = await self._server_info_json()
        mi = None
        for path in ("/get_model_info", "/model_info"):
            _, mi, _ = await get_json(self.s, self.base + path, to)
            if isinstance(mi, dict):
                break
        _, models, _ = await get_json(self.s, self.base + "/v1/models", to)
        mi = mi if isinstance(mi, dict) else None
        models = models if isinstance(models, dict) else None
        summary = summarize(si, mi)
        summary["source"] = "/get_server_info" if si else "unavailable"
        raw = redact(si) if si else None
        note = ""
        size = len(json.dumps(raw, default=str)) if raw else 0
        if size > SERVER_INFO_CAP:
            note = f"raw server info was {size:,} bytes (cap {SERVER_INFO_CAP:,}): only its summary is kept"
            raw = {"truncated": True, "bytes": size, "keys": sorted(raw)[:200]}
        interval = (si or {}).get("stream_interval")
        self.stream_interval = interval if isinstance(interval, int) and interval > 0 else 1
        return ServerInfo(summary, model_name(si, models), raw, note, served_names(si, mi, models))

    async def identity(self, when: str) -> Identity:
        """The server's identity now: SGLang picks a random seed at every start unless told one, and
        reports its start-up timings; a container's restart count and start time say the same
        from outside. Any change between two reads is a restart."""
        si, err = await self._server_info_json()
        facts = identity(si) if si else {}
        if self.container:
            facts.update(await docker_state(self.container))
        return Identity(when, facts, "" if si else f"server info: {err}")

    async def sampler_warmup(self, timeout_s: float, of: str) -> Warmup:
        """One untimed sampled request (the config's sampling) before anything is measured.

        SGLang's start-up warm-up is greedy, so FlashInfer's sampling kernel is JIT-built
        by the first sampled request: minutes on a cold cache (docs/flashinfer-cache.md),
        which must not land in a measured TTFT. It is judged like any request: on a GPU
        whose sampling kernel is missing every sampled request fails, and so does this one.
        It waits no longer than the phase it warms (``of``, ``timeout_s``) would wait.
        """
        body = generate_body([1, 2, 3, 4], 4, {**self.sampling, "temperature": self.sampling["temperature"] or 0.7})
        t0 = time.monotonic()
        try:
            r = await asyncio.wait_for(generate_stream(self.s, self.base + "/generate", body, 4, 4), timeout=timeout_s)
        except TimeoutError:
            r = RequestResult(prompt_len=4)
            r.fail("timeout", f"no complete answer within {of} = {timeout_s:g}s (the phase it warms)")
        secs = round(time.monotonic() - t0, 2)
        if secs > 10 or not r.success:
            self.say(f"sampler warm-up request: {'ok' if r.success else r.failure + ': ' + r.error} after {secs:.1f}s")
        return Warmup(r, secs)

    async def single_stream(self) -> SingleStream:
        """``repeats`` lone greedy requests of the prompt text on streamed /generate: its ids count the tokens."""
        sc = self.c.single_stream
        self.say(f"single stream: {sc.prompt!r}, max_tokens {sc.max_tokens} (streamed /generate) x {sc.repeats}")
        done: list[RequestResult] = []
        for _ in range(sc.repeats):
            r = await self._one_stream()
            done.append(r)
            if not r.success:
                break
        ss = SingleStream(done, sc.timeout_s)
        if ss.request.success:
            r = ss.request
            self.say(
                f"single stream: {r.output_len} tokens in {r.latency:.1f}s, TTFT {r.ttft * 1000:.0f} ms, "
                f"decode {ss.decode_tok_s:.1f} tok/s (median of {len(done)})"
            )
        return ss

    async def _one_stream(self) -> RequestResult:
        sc = self.c.single_stream
        to = sc.timeout_s
        call = asyncio.wait_for(
            generate_stream(
                self.s,
                self.base + "/generate",
                text_body(sc.prompt, sc.max_tokens),
                0,
                sc.max_tokens,
                rule=self.rule,
                exact=False,
            ),
            timeout=to,
        )
        try:
            return await self._with_progress(call, f"single stream: waiting for the answer (deadline {to:g}s)")
        except TimeoutError:
            r = RequestResult()
            r.fail("timeout", f"no complete answer within single_stream.timeout_s = {to:g}s")
            return r

    async def _chat(self, model: str, prompt: str, max_tokens: int) -> RequestResult:
        """One greedy streamed chat request (a probe) within single_stream.timeout_s (a timeout is a failure)."""
        to = self.c.single_stream.timeout_s
        call = chat_stream(
            self.s,
            self.base + "/v1/chat/completions",
            model,
            prompt,
            max_tokens,
            rule=self.rule,
            stream_interval=self.stream_interval,
        )
        try:
            return await asyncio.wait_for(call, timeout=to)
        except TimeoutError:
            r = RequestResult()
            r.fail("timeout", f"no complete answer within single_stream.timeout_s = {to:g}s")
            return r

    async def flush_cache(self) -> str:
        """POST /flush_cache (SGLang: the radix cache emptied, only when no request runs): each run
        starts from the same server state, not from the prompts the run before left cached."""
        try:
            async with self.s.post(
                self.base + "/flush_cache", timeout=aiohttp.ClientTimeout(total=self.c.readiness.request_timeout_s)
            ) as resp:
                await resp.read()
                return "" if resp.status == 200 else f"HTTP {resp.status}"
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return f"{exc.__class__.__name__}: {exc}"[:200]

    async def probes(self, model: str) -> list[ProbeResult]:
        """The config's answer probes, one greedy chat request each (judged in checks.probes)."""
        out = []
        for i, p in enumerate(self.c.answers.probes, start=1):
            r = await self._chat(model, p.prompt, p.max_tokens)
            out.append(ProbeResult(i, p.prompt, r))
            if r.failure == "timeout":
                break  # a stalled server: the next probe would only wait again
        return out

    async def _generate(self, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        return await generate_json(self.s, self.base + "/generate", body, timeout_s)

    async def greedy_answer(self, prompt: str, max_new: int) -> tuple[list[int], list[int]]:
        """(prompt ids, greedy answer ids): the prompt's ids come back as input_token_logprobs' ids."""
        body = {
            "text": prompt,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new},
            "return_logprob": True,
            "logprob_start_len": 0,
        }
        data = await self._generate(body, self.c.answers.reference.timeout_s)
        prompt_ids = [t for _, t in _logprob_entries(data["meta_info"], "input_token_logprobs")]
        answer = data.get("output_ids")
        if not isinstance(answer, list) or not answer:
            raise GenerateError("bad_payload", "the greedy answer has no output_ids")
        return prompt_ids, [int(t) for t in answer]

    async def score(self, prompt_ids: list[int], answer_ids: list[int]) -> list[float]:
        """Teacher forcing: the log-probability of each answer token after the prompt and the answer before it."""
        body = {
            "input_ids": prompt_ids + answer_ids,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": 1},
            "return_logprob": True,
            "logprob_start_len": max(0, len(prompt_ids) - 1),
        }
        data = await self._generate(body, self.c.answers.reference.timeout_s)
        entries = _logprob_entries(data["meta_info"], "input_token_logprobs")
        tail = entries[-len(answer_ids) :]
        if len(tail) != len(answer_ids) or [t for _, t in tail] != answer_ids or any(lp is None for lp, _ in tail):
            raise GenerateError(
                "bad_payload",
                f"input_token_logprobs do not line up with the {len(answer_ids)} answer tokens "
                f"(got {len(entries)} entries)",
            )
        return [float(lp) for lp, _ in tail if lp is not None]

    async def reference(self, stored: list[ScoredAnswer] | None, reference_from: str = "") -> ReferenceResult:
        """Answer and score the reference prompts; with ``stored`` (the group's comparable answers),
        score those too and say how far each moved."""
        rc = self.c.answers.reference
        prompts = reference_prompts()
        res = ReferenceResult("compared" if stored else "recorded", reference_from=reference_from)
        what = f"and scoring the group's {len(stored)}" if stored else "(recorded with the report)"
        self.say(f"reference answers: {len(prompts)} greedy answers of {rc.max_new_tokens} tokens, scored, {what}")
        try:
            own: dict[str, ScoredAnswer] = {}
            for prompt in prompts:
                pids, aids = await self.greedy_answer(prompt, rc.max_new_tokens)
                own[prompt] = ScoredAnswer(prompt, pids, aids, await self.score(pids, aids))
            res.recorded = {"max_new_tokens": rc.max_new_tokens, "answers": [asdict(a) for a in own.values()]}
            for ref in stored or []:
                now = await self.score(ref.prompt_ids, ref.answer_ids)
                res.deltas.append(abs(sum(now) / len(now) - ref.mean))
                greedy = own[ref.prompt].answer_ids if ref.prompt in own else []
                res.divergence.append(
                    next((i for i, (x, y) in enumerate(zip(greedy, ref.answer_ids, strict=False)) if x != y), None)
                )
        except GenerateError as exc:
            res.mode, res.error, res.timed_out = "error", str(exc), exc.failure == "timeout"
        return res

    async def accuracy(self) -> AccuracyResult:
        """Ask the known-answer questions (validate/arithmetic.py) as SGLang's few_shot_gsm8k does:
        raw few-shot prompts on /generate, greedy, its stop strings, ``concurrency`` at a time; the
        whole phase within ``accuracy.timeout_s`` (unanswered questions then fail as ``timeout``)."""
        ac = self.c.accuracy
        items = arithmetic.prompts(ac.seed, ac.questions, ac.shots)
        answers = [AccuracyAnswer(i, expected) for i, (_, expected) in enumerate(items)]
        params = {"temperature": 0.0, "max_new_tokens": ac.max_new_tokens, "stop": list(arithmetic.STOP)}
        gate = asyncio.Semaphore(ac.concurrency)
        self.say(
            f"accuracy: {len(items)} questions ({arithmetic.NAME} v{arithmetic.VERSION}, seed {ac.seed}, "
            f"{ac.shots}-shot), {ac.concurrency} at a time, greedy /generate, deadline {ac.timeout_s:g}s"
        )

        async def ask(a: AccuracyAnswer, prompt: str) -> None:
            try:
                async with gate:  # the phase's deadline (below) ends a request before its own timeout would
                    data = await self._generate({"text": prompt, "sampling_params": params}, ac.timeout_s + 1)
            except GenerateError as exc:
                a.failure, a.error = exc.failure, str(exc)
                return
            except asyncio.CancelledError:
                a.failure, a.error = "timeout", f"no answer within accuracy.timeout_s = {ac.timeout_s:g}s"
                raise
            a.text = str(data.get("text") or "")[:2000]
            ids = data.get("output_ids")
            a.output_tokens = len(ids) if isinstance(ids, list) else None
            fr = data["meta_info"].get("finish_reason")
            a.finish = str(fr.get("type") or "") if isinstance(fr, dict) else ""

        t0 = time.monotonic()
        pending = {asyncio.ensure_future(ask(a, prompt)) for a, (prompt, _) in zip(answers, items, strict=True)}
        try:
            while pending:
                left = t0 + ac.timeout_s - time.monotonic()
                if left <= 0:
                    break
                _, pending = await asyncio.wait(pending, timeout=min(left, self.c.progress_interval_s))
                if pending:
                    self.say(
                        f"accuracy: {len(items) - len(pending)} of {len(items)} answered after "
                        f"{time.monotonic() - t0:.0f}s"
                    )
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        secs = round(time.monotonic() - t0, 2)
        return AccuracyResult(accuracy_settings(ac), answers, secs, ac.timeout_s, timed_out=bool(pending))

    async def throughput(self, limit: FileLimit | None, stable: Callable[[list[LoadResult]], bool]) -> Throughput:
        """``repeats`` runs; while ``stable`` says the runs disagree, more, up to ``max_repeats``."""
        tc = self.c.throughput
        conc = min(tc.num_prompts, tc.max_concurrency or tc.num_prompts)
        if limit is not None and not limit.allows(conc):
            return Throughput([], tc.timeout_s, refused=limit.refusal(conc))
        prompts = random_ids(tc.num_prompts, tc.input_len, tc.vocab_size, tc.seed)
        runs: list[LoadResult] = []
        flushes: list[str] = []
        k = 0
        while k < tc.repeats or (k < tc.max_repeats and not stable(runs)):
            k += 1
            of = tc.repeats if k <= tc.repeats else tc.max_repeats
            extra = "" if k <= tc.repeats else " (more runs: the first disagreed)"
            self.say(
                f"throughput run {k}/{of}{extra}: {tc.num_prompts} prompts x {tc.input_len} in / "
                f"{tc.output_len} out tokens, "
                + ("all at once" if tc.request_rate == float("inf") else f"{tc.request_rate:g} req/s")
                + ", streaming /generate"
            )
            if tc.flush_cache:
                err = await self.flush_cache()
                flushes.append(err or "ok")
                if err:
                    self.say(f"throughput run {k}/{of}: /flush_cache did not flush ({err}); measuring anyway")
            lr = await run_load(
                self.s,
                self.base + "/generate",
                prompts,
                tc.output_len,
                label=f"throughput run {k}/{of}",
                deadline_s=tc.timeout_s,
                request_rate=tc.request_rate,
                max_concurrency=tc.max_concurrency,
                warmup_requests=tc.warmup_requests if k == 1 else 0,
                seed=tc.seed,
                progress=self.say,
                progress_interval_s=self.c.progress_interval_s,
                prewarm_url=self.base + "/v1/models",
                sampling=self.sampling,
                rule=self.rule,
            )
            runs.append(lr)
            m = lr.metrics
            self.say(
                f"throughput run {k}/{of}: {m.completed} ok / {m.failed} failed in {m.duration_s:.1f}s: "
                f"total {m.total_throughput:,.0f} tok/s, output {m.output_throughput:,.0f} tok/s, "
                f"p99 TTFT {m.p99_ttft_ms:,.0f} ms, mean E2E {m.mean_e2e_latency_ms:,.0f} ms"
            )
            if m.completed == 0 or lr.timed_out:  # nothing got through, or it stalled: more runs only wait again
                break
        return Throughput(runs, tc.timeout_s, flushes=flushes)

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
            sampling=self.sampling,
            rule=self.rule,
        )
        st.health = await self.health(f"after stability {st.label}")
        return st


async def docker_state(container: str, timeout_s: float = 20.0) -> dict[str, Any]:
    """``docker inspect``: the container's restart count and start time (both change on a restart)."""
    fmt = "{{.RestartCount}} {{.State.StartedAt}}"
    try:
        proc = await asyncio.create_subprocess_exec(
            "docker",
            "inspect",
            "--format",
            fmt,
            container,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=timeout_s)
    except (OSError, TimeoutError) as exc:
        return {"docker_error": f"docker inspect {container}: {exc.__class__.__name__}: {exc}"[:200]}
    text = out.decode(errors="replace").strip()
    if proc.returncode != 0:
        return {"docker_error": f"docker inspect {container}: {text}"[:200]}
    count, _, started = text.partition(" ")
    return {"docker_restart_count": int(count) if count.isdigit() else count, "docker_started_at": started}
