"""HTTP side of the test engine: SGLang's routes and JSON/SSE shapes over aiohttp.

Shapes follow SGLang 0.5.x (read from the 0.5.23 wheel: http_server.py,
openai/serving_completions.py, serving_chat.py, protocol.py): ``/generate`` streams
cumulative ``text`` with ``meta_info.completion_tokens`` (SGLang's default,
``incremental_streaming_output`` off), the OpenAI routes stream deltas, an optional
usage chunk (``stream_options.include_usage``) and ``data: [DONE]``. Everything this
server reports is marked as coming from the test engine.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from . import arithmetic, signatures
from .config import VERSION_STRING, EngineConfig
from .flashinfer_cache import CacheState
from .metrics import EngineMetrics
from .scheduler import GenRequest, Scheduler

log = logging.getLogger("testengine")

_WORDS = ("the ", "test ", "engine ", "answers ", "with ", "made ", "up ", "words ", "for ", "ci ")
_UNAUTH_PATHS = ("/health", "/health_generate", "/metrics")
_RID = "__TEST_ENGINE_RID__"


def token_text(i: int, counting: bool) -> str:
    """Text of output token ``i``: numbers when asked to count, filler words otherwise."""
    return f"{i + 1}, " if counting else _WORDS[i % len(_WORDS)]


def token_id(i: int, weights_seed: int = 0) -> int:
    """Id of output token ``i`` in ``output_ids`` (made up, below any vocabulary size)."""
    return 1000 + (i + 7 * weights_seed) % 1000


def text_ids(text: str) -> list[int]:
    """No tokenizer here: one made-up id per four characters (as _approx_tokens counts them)."""
    return [sum(map(ord, text[i : i + 4])) % 32000 for i in range(0, max(len(text) - len(text) % 4, 4), 4)]


def logprob(prev: int, tok: int, weights_seed: int) -> float:
    """The made-up model's log-probability of ``tok`` after ``prev``; other weights give every
    token 0.3 nats less per seed step (what the reference-answers check must notice)."""
    return -0.05 - ((prev * 31 + tok * 17) % 997) / 400.0 - 0.3 * weights_seed


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


class EngineServer:
    """Owns the scheduler, the fault state and the aiohttp application."""

    def __init__(self, config: EngineConfig, cache: CacheState) -> None:
        self.config = config
        self.cache = cache
        self.scheduler: Scheduler | None = None
        self.ready = False
        self.started_at = time.time()
        # like SGLang: a random seed drawn at every start unless --random-seed is given
        self.random_seed = config.server_args.get("random_seed") or random.randint(0, 1 << 30)
        self._user_requests = 0
        self.faults = config.faults
        self._rng = random.Random(config.knobs.seed)
        self._active = 0  # user generation requests in flight (instant mode has no scheduler)
        self._signature_written = False
        self._instant_cache: dict[tuple[Any, ...], bytes] = {}
        self.metrics = EngineMetrics(config.model_name) if config.server_args.get("enable_metrics") else None

    # ----- app -----
    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth_middleware], client_max_size=64 * 1024**2)
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/health_generate", self.health)
        r.add_get("/ready", self.health)
        r.add_get("/get_server_info", self.server_info)
        r.add_get("/server_info", self.server_info)
        r.add_get("/get_model_info", self.model_info)
        r.add_get("/model_info", self.model_info)
        r.add_get("/v1/models", self.models)
        r.add_get("/metrics", self.prom_metrics)
        r.add_route("POST", "/generate", self.generate)
        r.add_route("PUT", "/generate", self.generate)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/v1/chat/completions", self.chat_completions)
        r.add_route("*", "/flush_cache", self.flush_cache)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        # uvicorn's words at every start of SGLang's HTTP server (tests/fixtures/sglang-0.5.17-h200)
        log.info("INFO:     Started server process [%d] (test engine, not SGLang)", os.getpid())
        self.scheduler = Scheduler(self.config)
        self.scheduler.start()
        asyncio.get_running_loop().create_task(self._warm_up())

    async def _on_cleanup(self, app: web.Application) -> None:
        if self.scheduler is not None:
            await self.scheduler.stop()

    async def _warm_up(self) -> None:
        """Startup time: the configured delay plus the cold-cache cost (like a JIT compile)."""
        delay = self.config.knobs.startup_delay_s + (self.config.knobs.cold_start_s if self.cache.cold else 0.0)
        if delay:
            log.info("test engine: starting up for %.1fs (flashinfer cache: %s)", delay, self.cache.state)
            await asyncio.sleep(delay)
        if self.cache.cold:
            self.cache.populate()
        if self.faults.log_signature:
            self._write_signature()
        self.ready = True
        log.info("The server is fired up and ready to roll! (test engine, not SGLang)")

    def _write_signature(self) -> None:
        if self._signature_written or not self.faults.log_signature:
            return
        self._signature_written = True
        sys.stderr.write(signatures.SIGNATURES[self.faults.log_signature]())
        sys.stderr.flush()

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        key = self.config.server_args.get("api_key")
        given = request.headers.get("Authorization", "")
        if key and request.path not in _UNAUTH_PATHS and not hmac.compare_digest(given, f"Bearer {key}"):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    # ----- fault gates -----
    async def _hang_forever(self) -> None:
        await asyncio.Event().wait()

    async def _restart(self) -> None:
        """restart_after: what a container restarted by Docker looks like from outside: a new start
        banner in the log, a new seed and start time, a second of 503s."""
        self.ready = False
        self.started_at = time.time()
        self.random_seed = random.randint(0, 1 << 30)
        log.warning("test engine: restart_after:%s reached: simulating a restart", self.faults.restart_after)
        log.info("INFO:     Started server process [%d] (test engine, simulated restart)", os.getpid())
        await asyncio.sleep(1.0)
        self.ready = True

    async def _admit_user_request(self, sampled: bool = False) -> web.Response | None:
        """Apply crash/hang/error faults at arrival; returns an error response or None."""
        if self.scheduler is not None and self.scheduler.hung:
            await self._hang_forever()
        if not self.ready:
            return web.json_response({"error": "server is starting up (test engine)"}, status=503)
        self._user_requests += 1
        if self.faults.restart_after is not None and self._user_requests == self.faults.restart_after + 1:
            asyncio.get_running_loop().create_task(self._restart())
        if self.faults.sampled_error and sampled:
            return web.json_response(
                {
                    "object": "error",
                    "message": "sampling kernel not available for this GPU (test engine fault sampled_error)",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                },
                status=500,
            )
        active = (self.scheduler.num_user_requests if self.scheduler else 0) + self._active + 1
        f = self.faults
        if f.crash_above is not None and active > f.crash_above:
            sys.stderr.write(signatures.page_table_traceback())
            sys.stderr.write(
                f"[test-engine] crash_above:{f.crash_above} reached ({active} concurrent requests); exiting\n"
            )
            sys.stderr.flush()
            os._exit(1)
        if f.hang_above is not None and active > f.hang_above:
            log.warning(
                "test engine: hang_above:%d reached (%d concurrent); no longer answering",
                f.hang_above,
                active,
            )
            assert self.scheduler is not None
            self.scheduler.hung = True
            await self._hang_forever()
        if self.faults.log_signature:
            self._write_signature()
        if f.error_rate and self._rng.random() < f.error_rate:
            return web.json_response(
                {
                    "object": "error",
                    "message": "Internal server error (test engine fault error_rate)",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                },
                status=500,
            )
        return None

    def _queue_full(self) -> bool:
        """SGLang's --max-queued-requests: past it a new request is aborted, not queued."""
        limit = self.config.server_args.get("max_queued_requests")
        return limit is not None and self.scheduler is not None and len(self.scheduler.waiting) >= limit

    async def _stream_bytes(self, request: web.Request, body: bytes) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await resp.write(body)
        await resp.write_eof()
        return resp

    # ----- info routes -----
    async def health(self, request: web.Request) -> web.Response:
        if self.scheduler is None or self.scheduler.hung:
            await self._hang_forever()
        if self.faults.slow_health_s and self.ready:
            await asyncio.sleep(self.faults.slow_health_s)
        if not self.ready:
            return web.Response(status=503)
        assert self.scheduler is not None
        probe = GenRequest(rid=f"HEALTH_CHECK_{uuid.uuid4().hex}", input_len=1, max_new_tokens=1, health=True)
        tick = asyncio.ensure_future(self.scheduler.wait_tick())
        self.scheduler.submit(probe)
        try:
            await asyncio.wait_for(tick, timeout=20.0)  # SGLang's HEALTH_CHECK_TIMEOUT
        except TimeoutError:
            return web.Response(status=503)
        return web.Response(status=200)

    async def server_info(self, request: web.Request) -> web.Response:
        s = self.scheduler
        stats = s.stats if s else None
        info: dict[str, Any] = {
            **self.config.server_args,
            "test_engine": True,
            "engine": "test-engine",
            "version": VERSION_STRING,
            "startup_time": self.started_at,
            "random_seed": self.random_seed,
            "frontend": "python",
            "internal_states": [
                {
                    "last_gen_throughput": stats.last_gen_throughput if stats else 0.0,
                    "num_running_reqs": len(s.running) if s else 0,
                    "num_queue_reqs": len(s.waiting) if s else 0,
                    "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": 0},
                    "avg_spec_accept_length": None,
                }
            ],
            "test_engine_info": {
                "note": "figures from this server are test-engine figures, not SGLang's",
                "flashinfer_cache": self.cache.state,
                "flashinfer_cache_dir": self.cache.root,
                "knobs": {k: v for k, v in vars(self.config.knobs).items()},
                "faults": self.faults.describe(),
                "unrecognized_args": self.config.unknown_args,
                "max_running_requests": self.config.max_running_requests,
            },
        }
        return web.json_response(info)

    async def model_info(self, request: web.Request) -> web.Response:
        a = self.config.server_args
        return web.json_response(
            {
                "model_path": a["model_path"],
                "served_model_name": self.config.model_name,
                "tokenizer_path": a.get("tokenizer_path") or a["model_path"],
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": a.get("weight_version", "default"),
                "load_format": a.get("load_format"),
                "reasoning_parser": a.get("reasoning_parser"),
                "tool_call_parser": a.get("tool_call_parser"),
                "disaggregation_mode": "null",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": "test_engine",
                "architectures": ["TestEngineForCausalLM"],
                "test_engine": True,
            }
        )

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.config.model_name,
                        "object": "model",
                        "created": int(self.started_at),
                        "owned_by": "sglang",
                        "root": self.config.model_name,
                        "parent": None,
                        "max_model_len": self.config.server_args.get("context_length") or 202752,
                    }
                ],
            }
        )

    async def prom_metrics(self, request: web.Request) -> web.Response:
        if self.metrics is None:
            return web.Response(status=404, text="metrics not enabled (start with --enable-metrics)\n")
        s = self.scheduler
        if s is not None:
            self.metrics.set_gauges(len(s.running), len(s.waiting), s.stats.last_gen_throughput)
        body, content_type = self.metrics.render()
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = content_type
        return resp

    async def flush_cache(self, request: web.Request) -> web.Response:
        return web.Response(text="Cache flushed.\n")

    # ----- generation core -----
    def _new_request(self, input_len: int, max_new: int, rid: str, stop: tuple[int, str] | None = None) -> GenRequest:
        """``stop``: (tokens, the stop string) where a stop string ends the answer."""
        max_new += self.faults.overlong or 0
        req = GenRequest(rid=rid, input_len=max(1, input_len), max_new_tokens=max(1, max_new))
        if stop is not None:
            req.stop_after, req.matched = stop
        if self.faults.nan:
            req.stop_after = 1  # SGLang's NaN detector ends the request at the bad token
        return req

    def _finish_reason(self, req: GenRequest) -> dict[str, Any]:
        if self.faults.nan:
            return {"type": "stop", "matched": "NaN happened"}
        if req.matched is not None and req.stop_after is not None and req.stop_after <= req.max_new_tokens:
            return {"type": "stop", "matched": req.matched}
        return {"type": "length", "length": req.target}

    def _text(self, i: int, counting: bool, said: list[str] | None = None) -> str:
        """Text of output token ``i``: the reply's (``said``: an arithmetic answer), else filler or numbers."""
        if self.faults.degenerate:
            return "!"  # a broken kernel: token 0 over and over
        if self.faults.nan:
            return ""
        text = said[i] if said is not None and i < len(said) else token_text(i, counting)
        return arithmetic.shift_digits(text) if self.faults.shifted_digits else text

    def _id(self, i: int) -> int:
        return 0 if self.faults.degenerate else token_id(i, self.config.knobs.weights_seed)

    def _claim(self, n: int) -> int:
        """The token count the server reports (usage_inflate: more than it streamed)."""
        return round(n * self.faults.usage_inflate) if self.faults.usage_inflate else n

    async def _token_batches(self, req: GenRequest) -> Any:
        """Yield (first, last) token index ranges as the scheduler produces them."""
        seen = 0
        while seen < req.target:
            done = await req.progress(seen)
            yield seen, done
            seen = done
            if self.faults.stall_after is not None and seen >= self.faults.stall_after and not req.finished:
                await self._hang_forever()  # tokens stop, the connection stays open, /health still answers
        if self.metrics is not None:
            self.metrics.observe_request(req)

    async def _serve(
        self,
        request: web.Request,
        key: tuple[Any, ...],
        stream: bool,
        input_len: int,
        max_new: int,
        rid: str,
        build: Callable[[GenRequest], _Shape],
        stop: tuple[int, str] | None = None,
    ) -> web.StreamResponse:
        """The one response path of every generation route: instant, non-streamed or SSE.

        ``build`` gives the route's shapes for a request; the instant mode (benchmarks)
        renders the same shapes once, caches the bytes and only swaps the request id in.
        """
        if self.config.knobs.instant:
            cached = self._instant_cache.get(key)
            if cached is None:
                req = self._new_request(input_len, max_new, _RID, stop)
                req.tokens_done = req.target
                shape = build(req)
                if stream:
                    events = b"".join(shape.event(k) for k in range(req.target))
                    cached = shape.head + events + shape.tail()
                else:
                    cached = _dumps(shape.whole()).encode()
                self._instant_cache[key] = cached
            body = cached.replace(_RID.encode(), rid.encode())
            self._active += 1
            try:
                if not stream:
                    return web.Response(body=body, content_type="application/json")
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                await resp.write(body)
                await resp.write_eof()
                return resp
            finally:
                self._active -= 1
        assert self.scheduler is not None
        req = self._new_request(input_len, max_new, rid, stop)
        self.scheduler.submit(req)
        shape = build(req)
        if not stream:
            async for _ in self._token_batches(req):
                pass
            return web.json_response(shape.whole())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        first = shape.head
        async for lo, hi in self._token_batches(req):
            await resp.write(first + b"".join(shape.event(k) for k in range(lo, hi)))
            first = b""
        await resp.write(shape.tail())
        await resp.write_eof()
        return resp

    # ----- /generate -----
    async def generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": {"message": "body must be an object"}}, status=400)
        said: list[str] | None = None
        if "input_ids" in body and body["input_ids"] is not None:
            ids = body["input_ids"]
            if not isinstance(ids, list) or any(not isinstance(t, int) for t in ids):
                return web.json_response({"error": {"message": "input_ids must be a list of ints"}}, status=400)
            input_len, counting = len(ids), False
        elif isinstance(body.get("text"), str):
            ids = text_ids(body["text"])
            input_len, counting = len(ids), "count" in body["text"].lower()
            reply = arithmetic.reply(body["text"])  # the stand-in's answer to a few-shot arithmetic question
            said = arithmetic.pieces(reply) if reply is not None else None
        else:
            return web.json_response({"error": {"message": "Either text or input_ids should be provided."}}, status=400)
        sp = body.get("sampling_params") or {}
        max_new = int(sp.get("max_new_tokens") or 128)
        stops = sp.get("stop") or []
        stop: tuple[int, str] | None = None
        if said is not None and stops:  # SGLang ends the answer at a stop string and leaves it out
            said, matched = arithmetic.stop_cut(said, [stops] if isinstance(stops, str) else list(stops))
            stop = (len(said), matched) if matched is not None else None
        stream = bool(body.get("stream"))
        logprobs = bool(body.get("return_logprob"))
        start = int(body.get("logprob_start_len") or 0)
        seed = self.config.knobs.weights_seed
        err = await self._admit_user_request(sampled=float(sp.get("temperature") or 0) > 0)
        if err is not None:
            return err
        if stream and self._queue_full():
            return await self._stream_bytes(request, _generate_abort(body.get("rid") or uuid.uuid4().hex))
        weight_version = self.config.server_args.get("weight_version", "default")

        def obj(req: GenRequest, n: int) -> dict[str, Any]:
            """SGLang's /generate object after ``n`` tokens: cumulative text and output_ids plus meta_info.

            Field for field as 0.5.17 streamed it (tests/fixtures/sglang-0.5.17-h200-2026-12-03):
            the first event also carries ``response_sent_to_client_ts``, the last one the request's
            end-to-end timestamps and ``decode_throughput``.
            """
            done = n >= req.target
            wall = time.time() - time.monotonic()  # monotonic -> wall clock, for SGLang's *_ts fields
            entry = wall + req.arrival + 0.0002
            meta: dict[str, Any] = {
                "id": req.rid,
                "finish_reason": self._finish_reason(req) if done else None,
                "prompt_tokens": input_len,
                "weight_version": weight_version,
                "num_retractions": 0,
                "forward_entry_time": entry,
                "prefill_finished_time": wall + (req.first_token_at or req.arrival),
                "queue_time": 0.0002,
                "reasoning_tokens": 0,
                "completion_tokens": self._claim(n),
                "cached_tokens": 0,
                "cached_tokens_details": None,
                "dp_rank": None,
            }
            if done:
                e2e = time.monotonic() - req.arrival
                first = req.first_token_at or req.arrival
                meta.update(
                    e2e_latency=e2e,
                    request_received_ts=wall + req.arrival,
                    api_server_dispatch_finish_ts=entry,
                    response_sent_to_client_ts=wall + first,
                    request_finished_ts=time.time(),
                    decode_throughput=(n - 1) / (time.monotonic() - first)
                    if n > 1 and time.monotonic() > first
                    else 0.0,
                )
            elif n == 1:
                meta["response_sent_to_client_ts"] = time.time()
            out_ids = [self._id(i) for i in range(n)]
            if logprobs:  # SGLang's [logprob, token id, text] entries; the sequence's first token has none
                meta["input_token_logprobs"] = [
                    [None if j == 0 else logprob(ids[j - 1], ids[j], seed), ids[j], None]
                    for j in range(start, len(ids))
                ]
                prev = [ids[-1], *out_ids]
                meta["output_token_logprobs"] = [[logprob(prev[k], t, seed), t, None] for k, t in enumerate(out_ids)]
            return {
                "text": "".join(self._text(i, counting, said) for i in range(n)),
                "output_ids": out_ids,
                "meta_info": meta,
            }

        def build(req: GenRequest) -> _Shape:
            return _Shape(
                event=lambda k: _sse(obj(req, k + 1)),
                tail=lambda: _DONE,
                whole=lambda: obj(req, req.target),
            )

        key = ("generate", input_len, max_new, stream, counting, logprobs, "".join(said or []), stop)
        rid = body.get("rid") or uuid.uuid4().hex
        return await self._serve(request, key, stream, input_len, max_new, rid, build, stop)

    # ----- OpenAI routes -----
    def _openai_error(self, message: str, status: int = 400) -> web.Response:
        return web.json_response(
            {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status},
            status=status,
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return self._openai_error("body is not JSON")
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if isinstance(prompt, str):
            input_len, counting = _approx_tokens(prompt), "count" in prompt.lower()
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            input_len, counting = len(prompt), False
        else:
            return self._openai_error("prompt must be a string or a list of token ids")
        max_new = int(body.get("max_tokens") or 16)
        stream = bool(body.get("stream"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        model = body.get("model") or self.config.model_name
        err = await self._admit_user_request(sampled=float(body.get("temperature") or 0) > 0)
        if err is not None:
            return err
        if stream and self._queue_full():
            return await self._stream_bytes(request, _chat_queue_full(model))
        created = int(time.time())

        def build(req: GenRequest) -> _Shape:
            def base(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
                return {
                    "id": req.rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": choices,
                    **extra,
                }

            def choice(text: str, fr: dict[str, Any] | None) -> dict[str, Any]:
                return {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": fr["type"] if fr else None,
                    "matched_stop": fr.get("matched") if fr else None,
                }

            def event(k: int) -> bytes:
                fr = self._finish_reason(req) if k + 1 >= req.target else None
                return _sse(base([choice(self._text(k, counting), fr)], usage=None))

            def tail() -> bytes:
                # SGLang dumps the usage chunk with exclude_none.
                usage = _sse(base([], usage=_usage(input_len, self._claim(req.target), exclude_none=True)))
                return (usage if include_usage else b"") + _DONE

            def whole() -> dict[str, Any]:
                text = "".join(self._text(i, counting) for i in range(req.target))
                return base(
                    [choice(text, self._finish_reason(req))],
                    usage=_usage(input_len, req.target),
                    metadata={"weight_version": self.config.server_args.get("weight_version", "default")},
                )

            return _Shape(event=event, tail=tail, whole=whole)

        key = ("completions", input_len, max_new, stream, counting, include_usage, model)
        return await self._serve(request, key, stream, input_len, max_new, uuid.uuid4().hex, build)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return self._openai_error("body is not JSON")
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages:
            return self._openai_error("messages must be a non-empty list")
        text = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        input_len, counting = _approx_tokens(text) + 8, "count" in text.lower()
        max_new = int(body.get("max_completion_tokens") or body.get("max_tokens") or 128)
        stream = bool(body.get("stream"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        model = body.get("model") or self.config.model_name
        err = await self._admit_user_request(sampled=float(body.get("temperature") or 0) > 0)
        if err is not None:
            return err
        if stream and self._queue_full():
            return await self._stream_bytes(request, _chat_queue_full(model))
        created = int(time.time())
        # With a reasoning parser (GLM-5: glm45) the first tokens stream as reasoning_content.
        n_reason = min(8, max_new // 4) if self.config.server_args.get("reasoning_parser") else 0

        def piece(i: int) -> tuple[str, bool]:
            """Text of token i and whether it is reasoning."""
            if i < n_reason:
                return ("" if self.faults.nan else "thinking "), True
            return self._text(i - n_reason, counting), False

        def build(req: GenRequest) -> _Shape:
            def base(obj: str, choices: list[dict[str, Any]], usage: Any = None) -> dict[str, Any]:
                # 0.5.17's streamed chat chunks have no "usage" key at all (completions chunks have null).
                out = {"id": req.rid, "object": obj, "created": created, "model": model, "choices": choices}
                if usage is not None:
                    out["usage"] = usage
                return out

            def chunk(delta: dict[str, Any], fr: dict[str, Any] | None = None) -> bytes:
                choice = {
                    "index": 0,
                    "delta": delta,
                    "logprobs": None,
                    "finish_reason": fr["type"] if fr else None,
                    "matched_stop": fr.get("matched") if fr else None,
                }
                return _sse(base("chat.completion.chunk", [choice]))

            def event(k: int) -> bytes:
                t, is_reason = piece(k)
                return chunk({"reasoning_content": t} if is_reason else {"reasoning_content": None, "content": t})

            def tail() -> bytes:
                finish = chunk({"reasoning_content": None}, self._finish_reason(req))
                claim = self._claim(req.target)
                usage = _sse(
                    base("chat.completion.chunk", [], _usage(input_len, claim, n_reason, completion_details=False))
                )
                return finish + (usage if include_usage else b"") + _DONE

            def whole() -> dict[str, Any]:
                parts = [piece(i) for i in range(req.target)]
                fr = self._finish_reason(req)
                message = {
                    "role": "assistant",
                    "content": "".join(t for t, r in parts if not r),
                    "reasoning_content": "".join(t for t, r in parts if r) or None,
                }
                choice = {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": fr["type"],
                    "matched_stop": fr.get("matched"),
                }
                out = base("chat.completion", [choice], _usage(input_len, req.target, n_reason))
                out["metadata"] = {"weight_version": self.config.server_args.get("weight_version", "default")}
                return out

            head = chunk({"reasoning_content": None, "role": "assistant", "content": ""})
            return _Shape(event=event, tail=tail, whole=whole, head=head)

        key = ("chat", input_len, max_new, stream, counting, include_usage, model, n_reason)
        return await self._serve(request, key, stream, input_len, max_new, uuid.uuid4().hex, build)


@dataclass
class _Shape:
    """A route's response shapes for one request (SGLang's, see the module docstring)."""

    event: Callable[[int], bytes]  # the SSE event for output token k
    tail: Callable[[], bytes]  # after the last token: finish/usage chunks and [DONE]
    whole: Callable[[], dict[str, Any]]  # the non-streamed response
    head: bytes = b""  # before the first token (chat: the role chunk)


_DONE = b"data: [DONE]\n\n"

# What SGLang 0.5.17 streamed (HTTP 200) when its request queue was full, field for field
# (tests/fixtures/sglang-0.5.17-h200/overflow_*.sse, recorded on an H200).
_QUEUE_FULL = {"type": "abort", "status_code": 503, "message": "The request queue is full."}


def _generate_abort(rid: str) -> bytes:
    meta = {
        "id": rid,
        "finish_reason": _QUEUE_FULL,
        "weight_version": "default",
        "e2e_latency": 0.001,
        "completion_tokens": 0,
        "response_sent_to_client_ts": time.time(),
    }
    return _sse({"text": "", "output_ids": [], "meta_info": meta}) + _DONE


def _chat_queue_full(model: str) -> bytes:
    error = {
        "object": "error",
        "message": _QUEUE_FULL["message"],
        "type": "SERVICE_UNAVAILABLE",
        "param": None,
        "code": 503,
    }
    usage_chunk = {
        "id": uuid.uuid4().hex,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [],
        "usage": {
            "prompt_tokens": 0,
            "total_tokens": 0,
            "completion_tokens": 0,
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
        },
    }
    return _sse({"error": error}) + _sse(usage_chunk) + _DONE


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + _dumps(obj).encode() + b"\n\n"


def _usage(
    prompt: int, completion: int, reasoning: int = 0, exclude_none: bool = False, completion_details: bool = True
) -> dict[str, Any]:
    """OpenAI usage as SGLang fills it; the streamed chat usage chunk has no completion_tokens_details."""
    u: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
        "reasoning_tokens": reasoning,
    }
    if completion_details:
        u["completion_tokens_details"] = None
    return {k: v for k, v in u.items() if v is not None} if exclude_none else u


def _approx_tokens(text: str) -> int:
    """No tokenizer here: about four characters a token, at least one."""
    return max(1, len(text) // 4)
