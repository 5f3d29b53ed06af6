"""HTTP client of the gate: one shared aiohttp session, streamed requests, SSE parsing.

Why it looks like this (docs/measurement.md, the client section): one session for the whole run (a new
session per request, as bench_serving does, costs a TCP connect per request at the
burst start), ``read_bufsize`` raised to 10 MB like bench_serving (the 64 KB default
stalls long streams), no total timeout on the session (each phase has its own
deadline), and SSE events read in whole buffers (``iter_any``) rather than one
``await`` per line, so the client stays far below the server's speed.

Workload path: the throughput and sweep phases use SGLang's native ``/generate``
with ``input_ids`` (what bench_serving's ``sglang`` backend sends), so the server
sees exactly ``input_len`` tokens without a tokenizer, with ``ignore_eos`` so it
generates exactly ``output_len``; the single stream sends the prompt text to the same
route, streamed, so its tokens are counted from the streamed ``output_ids`` too (the
OpenAI routes stream text pieces, which cannot be counted: a piece holds one token, or
several with ``--stream-interval`` or MTP). The probes use ``/v1/chat/completions`` and
read ``reasoning_content`` and ``content`` deltas (GLM-5 streams its thinking as
reasoning_content); no figure is taken from them. The reference answers and the accuracy
questions are non-streamed ``/generate`` requests (:func:`generate_json`).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from .checks import AnswerRule, degenerate
from .metrics import RequestResult
from .sse import EventTooLarge, SSEDecoder

READ_BUFSIZE = 10 * 1024**2
API_KEY_ENV = "SGLANG_API_KEY"
_DONE = b"[DONE]"
_JSON = {"Content-Type": "application/json"}


def auth_headers() -> dict[str, str]:
    """``Authorization: Bearer`` from SGLANG_API_KEY; the key is never logged or stored."""
    key = os.environ.get(API_KEY_ENV, "")
    return {"Authorization": f"Bearer {key}"} if key else {}


def make_session(connect_timeout_s: float = 30.0) -> aiohttp.ClientSession:
    """The run's single session: unlimited pool, no total timeout, big read buffer."""
    # keepalive 4 s: below uvicorn's 5 s default, so the client drops an idle connection
    # before SGLang's server does (reusing one the server just closed fails a request).
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=4.0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        read_bufsize=READ_BUFSIZE,
        headers=auth_headers(),
        cookie_jar=aiohttp.DummyCookieJar(),  # no cookies to keep: skip the per-request jar work
    )


def _short(exc: BaseException) -> str:
    """One line for a network error, saying in words what it usually means."""
    text = str(exc) or exc.__class__.__name__
    hint = ""
    if isinstance(exc, aiohttp.ClientPayloadError):
        hint = "server closed the stream mid-response: "
    elif isinstance(exc, aiohttp.ServerDisconnectedError):
        hint = "server disconnected: "
    elif isinstance(exc, aiohttp.ClientConnectorError):
        hint = "cannot connect: "
    return f"{hint}{exc.__class__.__name__}: {text}"[:300]


async def _http_error(resp: aiohttp.ClientResponse) -> str:
    try:
        body = (await resp.text())[:300]
    except (aiohttp.ClientError, UnicodeDecodeError):
        body = ""
    hint = " (check SGLANG_API_KEY)" if resp.status == 401 else ""
    status = f"HTTP {resp.status} {resp.reason}" if resp.reason else f"HTTP {resp.status}"
    return f"{status}{hint}: {body}".strip()


def _has_text(payload: bytes) -> bool:
    """Cheap pre-check of a /generate event: does it carry non-empty text?"""
    return b'"text":""' not in payload and b'"text": ""' not in payload


def _is_error_event(payload: bytes) -> bool:
    """SGLang streams errors as ``data: {"error": {...}}`` (native and OpenAI endpoints).

    A key can only start a JSON object this way; generated text never can (its quotes
    are escaped), so this byte check is exact and costs nothing per event.
    """
    return payload.startswith((b'{"error"', b'{ "error"'))


def _error_text(payload: bytes) -> str:
    try:
        err = json.loads(payload).get("error")
    except ValueError:
        return payload[:300].decode(errors="replace")
    if isinstance(err, dict):
        code = err.get("code") or err.get("status_code")
        return f"{err.get('message') or err}" + (f" (code {code})" if code else "")
    return str(err)[:300]


def _network_failure(exc: BaseException) -> str:
    """The FAILURE_REASONS key of a client-side exception."""
    if isinstance(exc, EventTooLarge):
        return "event_too_large"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connect"
    if isinstance(exc, ValueError) and not isinstance(exc, aiohttp.ClientError):
        return "bad_payload"
    return "cut_stream"


GREEDY: dict[str, float | int] = {"temperature": 0.0}
MAX_KEPT_TEXT = 16 * 1024  # an answer kept for the probes and the report (the rules read the whole stream)


def generate_body(input_ids: list[int], output_len: int, sampling: dict[str, float | int] | None = None) -> bytes:
    """The /generate request bench_serving's sglang backend sends, JSON-encoded once up front.

    ``sampling``: temperature/top_p/top_k (the config's ``sampling``: production samples, and a
    sampling kernel missing for the GPU's arch fails only sampled requests); greedy when None.
    """
    params = {**(sampling or GREEDY), "max_new_tokens": output_len, "ignore_eos": True}
    payload = {"input_ids": input_ids, "sampling_params": params, "stream": True}
    return json.dumps(payload, separators=(",", ":")).encode()


def text_body(prompt: str, max_new_tokens: int) -> bytes:
    """A streamed, greedy /generate of a prompt text that may stop early (the single stream)."""
    payload = {"text": prompt, "sampling_params": {**GREEDY, "max_new_tokens": max_new_tokens}, "stream": True}
    return json.dumps(payload).encode()


async def _post_stream(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    out: RequestResult,
    handle: Callable[[float, list[bytes]], None],
) -> bool:
    """POST ``body`` and feed each read's SSE payloads ([DONE] removed) to ``handle``.

    The one place that times a request and catches transport failures: sets
    ``out.start_time``, ``out.latency`` (send to the last read, [DONE] included) and,
    on failure, ``out.failure``/``out.error``. Returns True when the stream ended with
    ``data: [DONE]`` and carried no error event; the caller then judges the finish
    reason and token count. Stricter than bench_serving, which counts a stream cut
    short before [DONE] or one carrying an error object as a success.
    """
    st = time.perf_counter()
    out.start_time = st
    done = False
    decoder = SSEDecoder()
    try:
        async with session.post(url, data=body, headers=_JSON) as resp:
            if resp.status != 200:
                out.fail("http_error", await _http_error(resp))
                return False
            async for data in resp.content.iter_any():
                now = time.perf_counter()
                payloads = decoder.feed(data)
                if not payloads:
                    continue
                if _DONE in payloads:
                    done = True
                    payloads = [p for p in payloads if p != _DONE]
                for p in payloads:
                    if _is_error_event(p):
                        out.fail("error_event", "server error in stream: " + _error_text(p))
                        return False
                handle(now, payloads)
                out.latency = now - st
            tail = decoder.close()
            if tail == [_DONE]:
                done = True
                out.latency = time.perf_counter() - st
            elif tail:
                handle(time.perf_counter(), tail)
    except asyncio.CancelledError:
        raise
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
        out.fail(_network_failure(exc), _short(exc))
        return False
    except (AttributeError, TypeError, KeyError) as exc:  # JSON of an unexpected shape
        out.fail("bad_payload", f"unexpected event shape: {exc.__class__.__name__}: {exc}"[:300])
        return False
    if not done:
        out.fail("no_done", "stream ended without data: [DONE] (server closed the connection?)")
        return False
    return True


def _judge_finish(
    out: RequestResult,
    tokens: int,
    want: int | None,
    most: int,
    normal: tuple[str, ...],
    answer: str,
    plausible: tuple[int, int],
) -> None:
    """Set success, or the failure reason, of a stream that ended with [DONE].

    ``tokens``: the request's token count; ``want``: the exact count asked for (``ignore_eos``),
    or None when the model may stop early; ``most``: max_new_tokens / max_tokens. ``normal``:
    the finish_reason types that end a request normally. ``answer``: why the text is
    degenerate (validate/checks.py), or "". ``plausible``: the (low, high) token counts the
    stream itself allows; a server claim (meta_info / usage) outside it is a failure.
    """
    fr = out.finish_reason or {}
    kind = fr.get("type")
    out.output_len = tokens
    if kind == "abort":
        code = fr.get("status_code")
        out.fail(
            "abort",
            f"aborted by the server: {fr.get('message') or 'no message'}" + (f" (status {code})" if code else ""),
        )
    elif fr.get("matched") == "NaN happened":
        out.fail("nan", f"NaN in the logits: finish_reason {fr}")
    elif kind not in normal:
        out.fail("bad_finish", f"finish_reason {fr or 'missing'} (expected {' or '.join(normal)})")
    elif tokens > most:
        out.fail("overlong", f"streamed {tokens} tokens, more than the {most} asked for")
    elif tokens == 0 or (want is not None and tokens < want):
        out.fail(
            "short", f"returned {tokens} of {want if want is not None else 'at least 1'} tokens (finish_reason {kind})"
        )
    elif out.claimed_tokens is not None and not plausible[0] <= out.claimed_tokens <= plausible[1]:
        lo, hi = plausible
        seen = f"streamed {lo}" if lo == hi else f"streamed pieces allow {lo}-{hi}"
        out.fail("usage_mismatch", f"the server claims {out.claimed_tokens} tokens but {seen}")
    elif answer:
        out.fail("degenerate", "degenerate answer: " + answer)
    else:
        out.success = True


async def generate_stream(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    prompt_len: int,
    output_len: int,
    rule: AnswerRule | None = None,
    keep_text: bool = False,
    exact: bool = True,
) -> RequestResult:
    """One streamed ``/generate`` request (``body`` from :func:`generate_body` or :func:`text_body`).

    Timed as bench_serving's sglang backend times it: TTFT at the first chunk with
    text, then per chunk n = new tokens gaps of (chunk gap / n). Tokens are what was
    streamed: SGLang's events carry the cumulative ``output_ids`` (``incremental_streaming_output``
    off, its default), and ``meta_info.completion_tokens`` must agree with them; a stream without
    ``output_ids`` cannot be counted and fails (``uncounted``), whatever the server claims.
    ``exact`` (``ignore_eos``): succeeds only with finish_reason ``length`` and exactly
    ``output_len`` tokens; otherwise ``stop`` or ``length`` and 1 to ``output_len`` tokens. With
    ``rule``, the answer must not be degenerate (validate/checks.py).
    """
    out = RequestResult(prompt_len=prompt_len)
    ids: list[int] | None = None  # the streamed output_ids (cumulative), when the server sends them
    text = ""
    claimed: int | None = None
    events = 0
    last_len = 0
    recent = 0.0

    def handle(now: float, payloads: list[bytes]) -> None:
        nonlocal ids, text, claimed, events, last_len, recent
        events += len(payloads)
        # Until the first token every event is read (the first non-empty text sets
        # TTFT). After it only the newest event of each read is parsed: text, output_ids
        # and completion_tokens are cumulative and events that came in one read share
        # its arrival time, so the counts and the time gap are the same as event-by-event
        # parsing gives; this is what keeps the client cheap.
        todo = payloads[-1:]
        if out.ttft == 0.0:
            first = next((i for i, p in enumerate(payloads) if _has_text(p)), len(payloads) - 1)
            todo = payloads[first : first + 1] + payloads[first + 1 :][-1:]
        for p in todo:
            d = json.loads(p)
            meta = d.get("meta_info") or {}
            if meta.get("finish_reason"):
                out.finish_reason = meta["finish_reason"]
            if meta.get("completion_tokens") is not None:
                claimed = int(meta["completion_tokens"])
            if isinstance(d.get("output_ids"), list):
                ids = d["output_ids"]
            if d.get("text"):
                text = d["text"]
                out.text_chars = len(text)
                seen = len(ids) if ids is not None else events
                if out.ttft == 0.0:
                    out.ttft = now - out.start_time
                else:
                    n = seen - last_len
                    if n <= 0:
                        continue
                    gap = (now - recent) / n
                    out.itl.extend([gap] * n)
                recent = now
                last_len = seen

    if await _post_stream(session, url, body, out, handle):
        if keep_text:
            out.text = text[:MAX_KEPT_TEXT]
        if ids is None:
            out.fail("uncounted", f"the stream carried no output_ids ({events} events): its tokens cannot be counted")
            return out
        tokens = len(ids)
        out.claimed_tokens = claimed
        why = degenerate(rule, tokens, text, ids) if rule else ""
        normal = ("length",) if exact else ("stop", "length")
        _judge_finish(out, tokens, output_len if exact else None, output_len, normal, why, (tokens, tokens))
    return out


async def chat_stream(
    session: aiohttp.ClientSession,
    url: str,
    model: str,
    prompt: str,
    max_tokens: int,
    sampling: dict[str, float | int] | None = None,
    rule: AnswerRule | None = None,
    stream_interval: int = 1,
) -> RequestResult:
    """One streamed ``/v1/chat/completions`` request (the probes): its text, judged, and no figure.

    ``reasoning_content`` deltas count like ``content`` (GLM-5 streams its thinking
    there). The model may stop early (no ignore_eos): ``stop`` and ``length`` are both
    normal; zero pieces, an error event or an abort are failures. The chat route streams
    text pieces, not ids, so its tokens cannot be counted: ``output_len`` is the pieces
    streamed, never the server's ``usage`` (no speed is measured here). Each non-empty piece
    holds 1 to ``stream_interval`` tokens (SGLang's ``--stream-interval``, from the server
    info), plus a few tokens with no text of their own (special tokens, a UTF-8 sequence split
    over tokens), so a usage claim outside [pieces, 2 x pieces x stream_interval + 8] is a
    ``usage_mismatch`` (a 4x claim fails).
    """
    payload = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        **(sampling or GREEDY),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    out = RequestResult(prompt_len=0)
    pieces: list[str] = []
    usage_tokens: int | None = None
    recent = 0.0

    def handle(now: float, payloads: list[bytes]) -> None:
        nonlocal usage_tokens, recent
        for p in payloads:
            d = json.loads(p)
            usage = d.get("usage")
            if usage:
                usage_tokens = usage.get("completion_tokens", usage_tokens)
                out.prompt_len = usage.get("prompt_tokens", 0) or 0
            for ch in d.get("choices") or []:
                delta = ch.get("delta") or {}
                piece = (delta.get("reasoning_content") or "") + (delta.get("content") or "")
                if ch.get("finish_reason"):
                    out.finish_reason = {"type": ch["finish_reason"], "matched": ch.get("matched_stop")}
                if piece:
                    pieces.append(piece)
                    out.text_chars += len(piece)
                    if out.ttft == 0.0:
                        out.ttft = now - out.start_time
                    else:
                        out.itl.append(now - recent)
                    recent = now

    if await _post_stream(session, url, json.dumps(payload).encode(), out, handle):
        text = "".join(pieces)
        out.text = text[:MAX_KEPT_TEXT]
        out.claimed_tokens = usage_tokens
        n = len(pieces)
        plausible = (n, 2 * n * max(1, stream_interval) + 8)
        why = degenerate(rule, n, text, None, pieces) if rule else ""
        _judge_finish(out, n, None, max_tokens, ("stop", "length"), why, plausible)
    return out


class GenerateError(Exception):
    """A non-streamed /generate that returned no answer; ``failure`` is a FAILURE_REASONS key."""

    def __init__(self, failure: str, message: str) -> None:
        super().__init__(message[:300])
        self.failure = failure


async def generate_json(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """One non-streamed ``/generate`` (the reference answers, the accuracy questions): its JSON object.

    Raises :class:`GenerateError` for no answer within ``timeout_s`` (``timeout``), a status other
    than 200, a body that is not a /generate object, and SGLang's abort and NaN finish reasons: an
    answer the caller may judge is one the server finished normally.
    """
    try:
        async with session.post(
            url, data=json.dumps(body).encode(), headers=_JSON, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            if resp.status != 200:
                raise GenerateError("http_error", await _http_error(resp))
            text = await resp.text()
    except TimeoutError:
        raise GenerateError("timeout", f"no answer within {timeout_s:g}s") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise GenerateError(_network_failure(exc), _short(exc)) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise GenerateError("bad_payload", f"not JSON: {exc}: {text[:200]}") from None
    meta = data.get("meta_info") if isinstance(data, dict) else None
    if not isinstance(meta, dict):
        raise GenerateError("bad_payload", f"not a /generate answer: {text[:200]}")
    fr = meta.get("finish_reason") if isinstance(meta.get("finish_reason"), dict) else {}
    if fr.get("type") == "abort":
        raise GenerateError("abort", f"aborted by the server: {fr.get('message') or 'no message'}")
    if fr.get("matched") == "NaN happened":
        raise GenerateError("nan", f"NaN in the logits: finish_reason {fr}")
    return data


async def prewarm(session: aiohttp.ClientSession, url: str, n: int, timeout_s: float = 10.0) -> int:
    """Open ``n`` keep-alive connections with cheap concurrent GETs; returns how many answered 200.

    With request_rate = inf the burst should reach the server at once; without this,
    each of the first wave's requests also pays a TCP connect inside the single client
    thread, which spreads the burst out (and adds the connect to TTFT).
    """
    results = await asyncio.gather(*(probe(session, url, timeout_s) for _ in range(n)))
    return sum(1 for st, _ in results if st == 200)


async def get_json(session: aiohttp.ClientSession, url: str, timeout_s: float) -> tuple[int | None, Any, str]:
    """GET a JSON document: (status or None, body or None, error text)."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                return resp.status, None, await _http_error(resp)
            try:
                return resp.status, await resp.json(content_type=None), ""
            except ValueError as exc:
                return resp.status, None, f"not JSON: {exc}"
    except TimeoutError:
        return None, None, f"no answer within {timeout_s:g}s"
    except (aiohttp.ClientError, OSError) as exc:
        return None, None, _short(exc)


async def probe(session: aiohttp.ClientSession, url: str, timeout_s: float) -> tuple[int | None, str]:
    """GET a health URL: (status or None, error text); never raises for network trouble."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            await resp.read()
            return resp.status, "" if resp.status == 200 else f"HTTP {resp.status}"
    except TimeoutError:
        return None, f"no answer within {timeout_s:g}s"
    except (aiohttp.ClientError, OSError) as exc:
        return None, _short(exc)
