"""The gate's HTTP client, part by part, with exact values: request bytes, session settings,
error texts, failure reasons, chat and health calls against a loopback aiohttp server.

Recorded SGLang 0.5.17 answers come from tests/fixtures/sglang-0.5.17-h200-2026-12-03; the
hand-written chat streams follow its chunk shape (choices[].delta.reasoning_content/content,
finish_reason and matched_stop, then a usage chunk) to reach the branches it has no example of.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from validate import client
from validate.client import (
    READ_BUFSIZE,
    auth_headers,
    chat_stream,
    generate_body,
    get_json,
    make_session,
    prewarm,
    probe,
)
from validate.sse import EventTooLarge

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200-2026-12-03"


def _chunk(content=None, reasoning=None, finish=None, matched=None, usage=None) -> bytes:
    d = {
        "object": "chat.completion.chunk",
        "choices": [
            {
                "index": 0,
                "delta": {"reasoning_content": reasoning, "content": content},
                "finish_reason": finish,
                "matched_stop": matched,
            }
        ],
    }
    if usage is not None:
        d = {"object": "chat.completion.chunk", "choices": [], "usage": usage}
    return b"data: " + json.dumps(d).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
CHATS = {
    "real": (RECORDED / "chat_completions.sse").read_bytes(),
    # thinking first (GLM-5), then content; no usage chunk: tokens = non-empty chunks
    "reasoning": _chunk(reasoning="Let me")
    + _chunk(reasoning=" count")
    + _chunk(content="1 2 3")
    + _chunk(finish="stop", matched=151336)
    + DONE,
    "usage": _chunk(content="ab")
    + _chunk(content="cd", finish="length")
    + _chunk(usage={"prompt_tokens": 7, "completion_tokens": 5})
    + DONE,
    "usage_prompt_only": _chunk(content="ab")
    + _chunk(content="cd", finish="length")
    + _chunk(usage={"prompt_tokens": 7})
    + DONE,
    "usage_zero_prompt": _chunk(content="ab", finish="stop")
    + _chunk(usage={"prompt_tokens": 0, "completion_tokens": 3})
    + DONE,
    "empty": _chunk(content="") + _chunk(finish="stop") + DONE,
    "no_finish": _chunk(content="x") + DONE,
    "abort_no_message": b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"abort"}]}\n\n' + DONE,
    "bad_json": b"data: {not json\n\n" + DONE,
    "bad_shape": b'data: {"choices": 5}\n\n' + DONE,
    "overflow": (RECORDED / "overflow_chat.sse").read_bytes(),
    # a usage chunk without prompt_tokens, then one without completion_tokens: the last claim stands
    "usage_claims": _chunk(content="ab")
    + _chunk(content="cd", finish="stop")
    + _chunk(usage={"completion_tokens": 13})
    + _chunk(usage={"prompt_tokens": 7})
    + DONE,
    # two pieces streamed, n tokens claimed in usage
    **{
        f"claim_{n}": _chunk(content="ab")
        + _chunk(content="cd", finish="stop")
        + _chunk(usage={"completion_tokens": n})
        + DONE
        for n in (16, 17, 12, 1)
    },
    # a loop: the same piece again and again (what a broken kernel streams)
    "looping": b"".join(_chunk(content=c) for c in ("ab", "ab", "ab", "cd")) + _chunk(finish="length") + DONE,
}


def _gen(n: int, finish: dict | None = None, tokens: bool = True, ids: bool = True) -> bytes:
    """One /generate event in SGLang's shape: cumulative text and output_ids, meta_info.completion_tokens."""
    meta = {"id": "r", "finish_reason": finish, "prompt_tokens": 3}
    if tokens:
        meta["completion_tokens"] = n
    event = {"text": "t" * n, "meta_info": meta} | ({"output_ids": list(range(10, 10 + n))} if ids else {})
    return b"data: " + json.dumps(event).encode() + b"\n\n"


LEN5 = {"type": "length", "length": 5}
# token 1, then tokens 2-4 in one read 0.3 s later, then token 5 and [DONE] 0.3 s after that
TIMED = {
    "gen": [(0, _gen(1)), (0.3, _gen(2) + _gen(3) + _gen(4)), (0.3, _gen(5, LEN5) + DONE)],
    "gen_no_counts": [
        (0, _gen(1, tokens=False)),
        (0.3, _gen(2, tokens=False) + _gen(3, tokens=False)),
        (0.3, _gen(4, tokens=False) + _gen(5, LEN5, tokens=False) + DONE),
    ],
    # what a server that leaves out output_ids streams: text and a claim, nothing to count
    "gen_no_ids": [(0, _gen(1, ids=False)), (0.3, _gen(2, ids=False) + _gen(5, LEN5, ids=False) + DONE)],
    # an empty first event (SGLang's role/prefill event) before the first text
    "gen_empty_first": [
        (0, b'data: {"text": "", "meta_info": {"completion_tokens": 0}}\n\n' + _gen(1)),
        (0.3, _gen(2) + _gen(3) + _gen(4) + _gen(5, LEN5)),
        (0, DONE),
    ],
    "unterminated_done": [(0, _gen(1) + _gen(2) + _gen(3) + _gen(4) + _gen(5, LEN5) + b"data: [DONE]")],
    "unterminated_event": [(0, _gen(1).rstrip(b"\n"))],
    # the first token and the last in one read: both events are read
    "two_in_one_read": [(0, _gen(1) + _gen(2, {"type": "length", "length": 2}) + DONE)],
    # a later event with new text but no new token (the detokenizer finished a character): no gap to add
    "text_without_token": [
        (0, _gen(1)),
        (0.5, b'data: {"text": "tX", "output_ids": [10], "meta_info": {"completion_tokens": 1}}\n\n'),
        (0.5, _gen(2, {"type": "length", "length": 2}) + DONE),
    ],
    # tokens that carry no text (special tokens only): counted, nothing kept
    "no_text": [
        (0, b'data: {"text": "", "output_ids": [1, 2], "meta_info": {"finish_reason": {"type": "length"}}}\n\n' + DONE)
    ],
    # the model stopped early (no ignore_eos): 3 tokens of the 5 allowed
    "stopped_early": [(0, _gen(1) + _gen(2)), (0, _gen(3, {"type": "stop", "matched": 2}) + DONE)],
    # the server claims more tokens than it streamed ids for
    "overclaimed": [
        (0, _gen(1)),
        (
            0,
            b'data: {"text": "tt", "output_ids": [10, 11], "meta_info": {"finish_reason": '
            b'{"type": "length", "length": 2}, "completion_tokens": 7}}\n\n' + DONE,
        ),
    ],
    # one token id over and over, decoded to varied text
    "one_id": [
        (
            0,
            b'data: {"text": "abcde", "output_ids": [7, 7, 7, 7, 7], "meta_info": {"finish_reason": '
            b'{"type": "length", "length": 5}}}\n\n' + DONE,
        )
    ],
}
# non-streamed /generate answers (generate_json): recorded shape {"text", "output_ids", "meta_info"}
GENS = {
    "ok": (200, b'{"text": "4", "output_ids": [19], "meta_info": {"finish_reason": {"type": "stop", "matched": 2}}}'),
    "abort_no_message": (200, b'{"text": "", "meta_info": {"finish_reason": {"type": "abort"}}}'),
    "not_json": (200, b"<html>" + b"x" * 400),
    "no_meta": (200, b'{"text": "4"}'),
    "refused": (503, b"queue full"),
}
JSONS = {
    "ok": (200, b'{"a": 1}'),
    "notjson": (200, b"<html>"),
    "missing": (404, b"Not Found"),
    "auth": (401, b'{"detail":"Unauthorized"}'),
    "long": (500, b"e" * 1000),
    "odd": (599, b"odd"),  # a status with no reason phrase
}


@pytest.fixture
def server() -> Iterator[tuple[str, asyncio.AbstractEventLoop]]:
    loop = asyncio.new_event_loop()
    seen: dict[str, object] = {}

    async def chat(request: web.Request) -> web.StreamResponse:
        seen["body"] = await request.read()
        seen["headers"] = dict(request.headers)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(CHATS[request.match_info["name"]])
        await resp.write_eof()
        return resp

    async def doc(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name == "slow":
            await asyncio.sleep(2)
            return web.Response(text="late")
        status, body = JSONS[name]
        return web.Response(status=status, body=body, reason="Nope" if status == 500 else None)

    async def timed(request: web.Request) -> web.StreamResponse:
        """A /generate stream written in timed pieces: (pause before, bytes) from TIMED[name]."""
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for pause, piece in TIMED[request.match_info["name"]]:
            await asyncio.sleep(pause)
            await resp.write(piece)
        await resp.write_eof()
        return resp

    async def refuse(request: web.Request) -> web.Response:
        body = b"\xff\xfe not utf-8" if request.match_info["name"] == "binary" else b"queue full"
        return web.Response(status=503, body=body, headers={"Content-Type": "text/plain; charset=utf-8"})

    async def gen(request: web.Request) -> web.Response:
        if request.match_info["name"] == "slow":
            await asyncio.sleep(2)
        status, body = GENS.get(request.match_info["name"], (200, b"late"))
        return web.Response(status=status, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/gen/{name}", gen)
    app.router.add_post("/timed/{name}", timed)
    app.router.add_post("/refuse/{name}", refuse)
    app.router.add_post("/chat/{name}", chat)
    app.router.add_get("/doc/{name}", doc)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", loop, seen
    loop.run_until_complete(runner.cleanup())
    loop.close()


def _run(loop, coro_fn):
    async def go():
        async with make_session() as s:
            return await coro_fn(s)

    return loop.run_until_complete(go())


def test_generate_body_is_bench_servings_sglang_request_byte_for_byte():
    assert generate_body([5, 6], 3) == (
        b'{"input_ids":[5,6],"sampling_params":{"temperature":0.0,"max_new_tokens":3,"ignore_eos":true},"stream":true}'
    )


def test_api_key_goes_into_a_bearer_header_only_when_set(monkeypatch):
    monkeypatch.delenv("SGLANG_API_KEY", raising=False)
    assert auth_headers() == {}
    monkeypatch.setenv("SGLANG_API_KEY", "")
    assert auth_headers() == {}
    monkeypatch.setenv("SGLANG_API_KEY", "sk-1")
    assert auth_headers() == {"Authorization": "Bearer sk-1"}


def test_session_settings(monkeypatch):
    monkeypatch.setenv("SGLANG_API_KEY", "sk-2")

    async def go():
        async with make_session(7.5) as s:
            return (
                s.connector.limit,
                s.connector._keepalive_timeout,
                s.timeout.total,
                s.timeout.sock_connect,
                s._read_bufsize,
                dict(s.headers),
                type(s.cookie_jar),
            )

    loop = asyncio.new_event_loop()
    try:
        got = loop.run_until_complete(go())
    finally:
        loop.close()
    assert got == (0, 4.0, None, 7.5, READ_BUFSIZE, {"Authorization": "Bearer sk-2"}, aiohttp.DummyCookieJar)
    assert READ_BUFSIZE == 10 * 1024 * 1024


def test_the_key_reaches_the_server_and_the_chat_request_is_the_documented_one(server, monkeypatch):
    base, loop, seen = server
    monkeypatch.setenv("SGLANG_API_KEY", "sk-3")
    r = _run(loop, lambda s: chat_stream(s, base + "/chat/real", "glm-5", "Count", 12))
    assert r.success
    assert seen["headers"]["Authorization"] == "Bearer sk-3" and seen["headers"]["Content-Type"] == "application/json"
    assert json.loads(seen["body"]) == {
        "model": "glm-5",
        "messages": [{"role": "user", "content": "Count"}],
        "max_tokens": 12,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_recorded_chat_stream_gives_exact_counts(server):
    base, loop, _ = server
    r = _run(loop, lambda s: chat_stream(s, base + "/chat/real", "m", "p", 12))
    assert (r.success, r.failure, r.error) == (True, "", "")
    assert (r.output_len, r.prompt_len, r.text_chars) == (12, 10, 82)
    assert r.finish_reason == {"type": "length", "matched": None}
    assert len(r.itl) == 11 and all(g >= 0 for g in r.itl) and 0 < r.ttft <= r.latency


def test_reasoning_content_counts_and_the_usage_claim_is_checked_never_taken(server):
    base, loop, _ = server
    r = _run(loop, lambda s: chat_stream(s, base + "/chat/reasoning", "m", "p", 50))
    assert r.success and r.output_len == 3 and r.text_chars == len("Let me count1 2 3") and len(r.itl) == 2
    assert r.finish_reason == {"type": "stop", "matched": 151336} and r.prompt_len == 0
    u = _run(loop, lambda s: chat_stream(s, base + "/chat/usage", "m", "p", 50))
    # usage claims 5 for 2 pieces: plausible, so no failure; the count is what was streamed, never the claim
    assert u.success and (u.output_len, u.prompt_len, u.text_chars) == (2, 7, 4) and len(u.itl) == 1
    assert u.claimed_tokens == 5
    assert 0 <= u.itl[0] < 1  # a gap between two chunks, not a sum of clock readings
    p = _run(loop, lambda s: chat_stream(s, base + "/chat/usage_prompt_only", "m", "p", 50))
    assert p.success and (p.output_len, p.prompt_len) == (2, 7)  # no completion_tokens: chunks count
    z = _run(loop, lambda s: chat_stream(s, base + "/chat/usage_zero_prompt", "m", "p", 50))
    assert z.success and (z.output_len, z.prompt_len, z.claimed_tokens) == (1, 0, 3)
    assert u.finish_reason == {"type": "length", "matched": None}


@pytest.mark.parametrize(
    ("name", "failure", "error"),
    [
        ("empty", "short", "returned 0 of at least 1 tokens (finish_reason stop)"),
        ("overflow", "error_event", "server error in stream: The request queue is full. (code 503)"),
        ("no_finish", "bad_finish", "finish_reason missing (expected stop or length)"),
        ("abort_no_message", "abort", "aborted by the server: no message"),
        # json.JSONDecodeError is a ValueError: a payload that is not JSON
        (
            "bad_json",
            "bad_payload",
            "JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        ("bad_shape", "bad_payload", "unexpected event shape: TypeError: 'int' object is not iterable"),
    ],
)
def test_chat_failures_are_named_exactly(server, name, failure, error):
    base, loop, _ = server
    r = _run(loop, lambda s: chat_stream(s, base + f"/chat/{name}", "m", "p", 5))
    assert (r.success, r.failure) == (False, failure)
    assert r.error == error


def test_get_json_and_probe_answers(server):
    base, loop, _ = server
    assert _run(loop, lambda s: get_json(s, base + "/doc/ok", 5)) == (200, {"a": 1}, "")
    status, body, err = _run(loop, lambda s: get_json(s, base + "/doc/notjson", 5))
    assert (status, body) == (200, None) and err.startswith("not JSON: ")
    assert _run(loop, lambda s: get_json(s, base + "/doc/missing", 5)) == (404, None, "HTTP 404 Not Found: Not Found")
    assert _run(loop, lambda s: get_json(s, base + "/doc/auth", 5)) == (
        401,
        None,
        'HTTP 401 Unauthorized (check SGLANG_API_KEY): {"detail":"Unauthorized"}',
    )
    assert _run(loop, lambda s: get_json(s, base + "/doc/long", 5)) == (500, None, "HTTP 500 Nope: " + "e" * 300)
    assert _run(loop, lambda s: get_json(s, base + "/doc/slow", 0.2)) == (None, None, "no answer within 0.2s")
    assert _run(loop, lambda s: probe(s, base + "/doc/ok", 5)) == (200, "")
    assert _run(loop, lambda s: probe(s, base + "/doc/missing", 5)) == (404, "HTTP 404")
    assert _run(loop, lambda s: probe(s, base + "/doc/slow", 0.25)) == (None, "no answer within 0.25s")
    assert _run(loop, lambda s: prewarm(s, base + "/doc/ok", 3)) == 3
    assert _run(loop, lambda s: prewarm(s, base + "/doc/missing", 2)) == 0


def test_nobody_listening_is_a_connect_failure_in_words(server):
    _, loop, _ = server
    status, err = _run(loop, lambda s: probe(s, "http://127.0.0.1:9/health", 2))
    assert status is None and err.startswith("cannot connect: ClientConnectorError: ")
    status, body, err = _run(loop, lambda s: get_json(s, "http://127.0.0.1:9/x", 2))
    assert (status, body) == (None, None) and err.startswith("cannot connect: ClientConnectorError: ")
    r = _run(loop, lambda s: chat_stream(s, "http://127.0.0.1:9/v1/chat/completions", "m", "p", 5))
    assert r.failure == "connect" and r.error.startswith("cannot connect: ")


def test_error_texts_and_failure_reasons():
    assert client._error_text(b'{"error": {"message": "queue full", "code": 503}}') == "queue full (code 503)"
    assert client._error_text(b'{"error": {"message": "m", "status_code": 400}}') == "m (code 400)"
    assert client._error_text(b'{"error": {"message": "m"}}') == "m"
    assert client._error_text(b'{"error": {"type": "x"}}') == "{'type': 'x'}"
    assert client._error_text(b'{"error": "plain"}') == "plain"
    assert client._error_text(b"{bad" + b"x" * 400) == "{bad" + "x" * 296
    assert client._is_error_event(b'{"error": 1}') and client._is_error_event(b'{ "error": 1}')
    assert not client._is_error_event(b'{"text": "{\\"error\\""}')
    assert client._has_text(b'{"text":"a"}') and not client._has_text(b'{"text":""}')
    assert not client._has_text(b'{"text": ""}')
    assert client._network_failure(EventTooLarge("big")) == "event_too_large"
    assert client._network_failure(TimeoutError()) == "timeout"
    assert client._network_failure(ValueError("x")) == "bad_payload"
    assert client._network_failure(aiohttp.ClientPayloadError("x")) == "cut_stream"
    assert client._network_failure(aiohttp.ServerDisconnectedError()) == "cut_stream"
    assert client._network_failure(ConnectionResetError()) == "cut_stream"


def test_short_names_the_kind_of_network_error():
    assert client._short(aiohttp.ClientPayloadError("Response payload is not completed")) == (
        "server closed the stream mid-response: ClientPayloadError: Response payload is not completed"
    )
    assert client._short(aiohttp.ServerDisconnectedError()).startswith("server disconnected: ServerDisconnectedError: ")
    assert client._short(OSError()) == "OSError: OSError"
    assert client._short(RuntimeError("x" * 400)) == ("RuntimeError: " + "x" * 400)[:300]


def _gen_run(loop, base: str, name: str, want: int = 5):
    from validate.client import generate_stream

    return _run(loop, lambda s: generate_stream(s, base + f"/timed/{name}", generate_body([1, 2, 3], want), 3, want))


def test_itl_splits_a_read_evenly_over_its_new_tokens(server):
    base, loop, _ = server
    r = _gen_run(loop, base, "gen")
    assert r.success and r.output_len == 5 and r.text_chars == 5 and r.finish_reason == LEN5
    assert len(r.itl) == 4 and r.ttft < 0.25
    # tokens 2-4 arrived together 0.3 s after token 1: three gaps of 0.1 s; token 5 0.3 s later
    assert r.itl[0] == r.itl[1] == r.itl[2] and 0.08 <= r.itl[0] <= 0.2, r.itl
    assert 0.25 <= r.itl[3] <= 0.6 and 0.55 <= r.latency <= 1.5, (r.itl, r.latency)


def test_the_streamed_ids_count_the_tokens_and_a_stream_without_them_fails(server):
    base, loop, _ = server
    r = _gen_run(loop, base, "gen_no_counts")  # no completion_tokens claimed: the ids count
    assert r.success and r.output_len == 5 and len(r.itl) == 4 and r.claimed_tokens is None
    assert r.itl[0] == r.itl[1] and 0.1 <= r.itl[0] <= 0.3 and r.itl[2] == r.itl[3] and 0.1 <= r.itl[2] <= 0.3, r.itl
    short = _gen_run(loop, base, "gen_no_counts", want=6)
    assert short.failure == "short" and short.error == "returned 5 of 6 tokens (finish_reason length)"
    blind = _gen_run(loop, base, "gen_no_ids")  # claims 5 tokens, streams no ids: never taken on its word
    assert (blind.success, blind.failure, blind.output_len) == (False, "uncounted", 0)
    assert blind.error == "the stream carried no output_ids (3 events): its tokens cannot be counted"


def test_ttft_waits_for_the_first_text_not_the_first_event(server):
    base, loop, _ = server
    r = _gen_run(loop, base, "gen_empty_first")
    assert r.success and r.output_len == 5 and len(r.itl) == 4 and r.ttft < 0.25
    assert r.itl[1] == r.itl[2] == r.itl[3] and 0.2 <= r.itl[1] * 4 <= 0.8, r.itl


def test_a_final_done_without_a_blank_line_still_ends_the_stream(server):
    base, loop, _ = server
    r = _gen_run(loop, base, "unterminated_done")
    assert r.success and r.output_len == 5 and 0 < r.latency < 2
    cut = _gen_run(loop, base, "unterminated_event", want=1)
    assert cut.failure == "no_done" and cut.text_chars == 1 and cut.ttft > 0  # its one event was still read
    assert cut.error == "stream ended without data: [DONE] (server closed the connection?)"


def test_a_refused_request_is_an_http_failure_with_the_answer(server):
    from validate.client import generate_stream

    base, loop, _ = server
    r = _run(loop, lambda s: generate_stream(s, base + "/refuse/text", generate_body([1], 4), 1, 4))
    assert (r.success, r.failure, r.error) == (False, "http_error", "HTTP 503 Service Unavailable: queue full")
    b = _run(loop, lambda s: generate_stream(s, base + "/refuse/binary", generate_body([1], 4), 1, 4))
    assert b.error == "HTTP 503 Service Unavailable:"  # a body that is not text is left out


def test_error_text_edges():
    assert client._error_text(b"\xff{bad") == "\ufffd{bad"
    assert client._error_text(b'{"error": "' + b"x" * 400 + b'"}') == "x" * 300


def _gen_kw(loop, base: str, name: str, want: int = 5, **kw):
    from validate.client import generate_stream

    url = base + f"/timed/{name}"
    return _run(loop, lambda s: generate_stream(s, url, generate_body([1, 2, 3], want), 3, want, **kw))


def test_two_events_in_one_read_are_both_read(server):
    base, loop, _ = server
    r = _gen_kw(loop, base, "two_in_one_read", want=2)
    assert (r.success, r.output_len, r.finish_reason, len(r.itl)) == (True, 2, {"type": "length", "length": 2}, 1)


def test_new_text_without_a_new_token_adds_no_gap(server):
    base, loop, _ = server
    r = _gen_kw(loop, base, "text_without_token", want=2)
    assert (r.success, r.output_len, len(r.itl)) == (True, 2, 1)
    # the second token's gap runs from the first token (1.0 s), not from the text-only event (0.5 s)
    assert 0.75 <= r.itl[0] <= 2.5, r.itl


def test_the_answer_text_is_kept_only_when_asked(server):
    base, loop, _ = server
    assert _gen_kw(loop, base, "gen").text == ""
    assert _gen_kw(loop, base, "gen", keep_text=True).text == "ttttt"
    r = _gen_kw(loop, base, "no_text", want=2, keep_text=True)
    assert (r.success, r.output_len, r.text, r.text_chars) == (True, 2, "", 0)


def test_a_stream_that_may_stop_early_accepts_stop_and_fewer_tokens(server):
    base, loop, _ = server
    r = _gen_kw(loop, base, "stopped_early", exact=False)
    assert (r.success, r.failure, r.output_len) == (True, "", 3)
    exact = _gen_kw(loop, base, "stopped_early")
    assert (exact.failure, exact.error) == (
        "bad_finish",
        "finish_reason {'type': 'stop', 'matched': 2} (expected length)",
    )
    cut = _gen_kw(loop, base, "stopped_early", want=2, exact=False)  # more tokens than asked for: overlong
    assert (cut.failure, cut.error) == ("overlong", "streamed 3 tokens, more than the 2 asked for")


def test_a_token_claim_the_streamed_ids_do_not_back_fails(server):
    base, loop, _ = server
    r = _gen_kw(loop, base, "overclaimed", want=2)
    assert (r.success, r.failure, r.claimed_tokens) == (False, "usage_mismatch", 7)
    assert r.error == "the server claims 7 tokens but streamed 2"


def test_the_answer_rule_reads_the_streamed_ids(server):
    from validate.checks import AnswerRule

    base, loop, _ = server
    rule = AnswerRule(min_tokens=4, max_repeat_fraction=0.5)
    loop_ids = _gen_kw(loop, base, "one_id", rule=rule)
    assert (loop_ids.success, loop_ids.failure) == (False, "degenerate")
    assert loop_ids.error == "degenerate answer: token id 7 repeated 5 times in a row (5 of 5 tokens): 'abcde'"
    # "ttttt" from five different ids: the ids decide, not the text
    assert _gen_kw(loop, base, "gen", rule=rule).success


@pytest.mark.parametrize(
    ("name", "interval", "ok", "error"),
    [
        ("claim_12", 1, True, ""),  # 2 pieces of 1 token, plus a few textless ones: up to 2 x 2 x 1 + 8
        ("claim_1", 1, False, "the server claims 1 tokens but streamed pieces allow 2-12"),
        ("claim_16", 1, False, "the server claims 16 tokens but streamed pieces allow 2-12"),
        ("claim_16", None, False, "the server claims 16 tokens but streamed pieces allow 2-12"),  # default: 1
        ("claim_16", 2, True, ""),  # --stream-interval 2: a piece may hold 2 tokens
        ("claim_17", 2, False, "the server claims 17 tokens but streamed pieces allow 2-16"),
        ("usage_claims", 1, False, "the server claims 13 tokens but streamed pieces allow 2-12"),
    ],
)
def test_a_chat_usage_claim_must_fit_the_pieces_streamed(server, name, interval, ok, error):
    base, loop, _ = server
    url = base + f"/chat/{name}"
    kw = {} if interval is None else {"stream_interval": interval}
    r = _run(loop, lambda s: chat_stream(s, url, "m", "p", 50, **kw))
    assert (r.success, r.failure if not ok else "", r.error) == (ok, "usage_mismatch" if not ok else "", error)
    assert (r.output_len, r.text) == (2, "abcd")


def test_a_chat_usage_without_prompt_tokens_counts_none(server):
    base, loop, _ = server
    r = _run(loop, lambda s: chat_stream(s, base + "/chat/claim_12", "m", "p", 50))
    assert (r.prompt_len, r.claimed_tokens) == (0, 12)
    assert _run(loop, lambda s: chat_stream(s, base + "/chat/usage_claims", "m", "p", 50)).prompt_len == 7


def test_the_answer_rule_reads_the_chat_pieces(server):
    from validate.checks import AnswerRule

    base, loop, _ = server
    rule = AnswerRule(min_tokens=2, max_repeat_fraction=0.5)
    r = _run(loop, lambda s: chat_stream(s, base + "/chat/looping", "m", "p", 50, rule=rule))
    assert (r.success, r.failure, r.text) == (False, "degenerate", "abababcd")
    assert r.error == "degenerate answer: the piece 'ab' repeated 3 times in a row (3 of 4 pieces)"
    assert _run(loop, lambda s: chat_stream(s, base + "/chat/looping", "m", "p", 50)).success  # no rule, no judging
    fine = _run(loop, lambda s: chat_stream(s, base + "/chat/reasoning", "m", "p", 50, rule=rule))
    assert fine.success and fine.text == "Let me count1 2 3"


def test_generate_json_returns_the_answer_or_a_named_failure(server):
    from validate.client import GenerateError, generate_json

    base, loop, _ = server

    def ask(url: str, timeout_s: float = 5):
        return _run(loop, lambda s: generate_json(s, url, {"text": "2+2="}, timeout_s))

    assert ask(base + "/gen/ok")["output_ids"] == [19]
    cases = [
        ("/gen/abort_no_message", "abort", "aborted by the server: no message"),
        ("/gen/no_meta", "bad_payload", 'not a /generate answer: {"text": "4"}'),
        ("/gen/refused", "http_error", "HTTP 503 Service Unavailable: queue full"),
        ("/gen/slow", "timeout", "no answer within 0.2s"),
    ]
    for path, failure, message in cases:
        with pytest.raises(GenerateError) as exc:
            ask(base + path, 0.2 if "slow" in path else 5)
        assert (exc.value.failure, str(exc.value)) == (failure, message)
    with pytest.raises(GenerateError) as exc:
        ask(base + "/gen/not_json")
    assert exc.value.failure == "bad_payload"
    assert str(exc.value) == "not JSON: Expecting value: line 1 column 1 (char 0): <html>" + "x" * 194
    with pytest.raises(GenerateError) as exc:
        ask("http://127.0.0.1:9/generate")
    assert exc.value.failure == "connect" and str(exc.value).startswith("cannot connect: ClientConnectorError: ")


def test_an_http_error_without_a_reason_phrase(server):
    base, loop, _ = server
    assert _run(loop, lambda s: get_json(s, base + "/doc/odd", 5)) == (599, None, "HTTP 599: odd")


def test_prewarm_gives_up_on_a_slow_server_after_its_timeout(server):
    base, loop, _ = server
    assert _run(loop, lambda s: prewarm(s, base + "/doc/slow", 2, timeout_s=0.2)) == 0


def test_the_session_waits_30_s_for_a_connection_by_default():
    async def go():
        async with make_session() as s:
            return s.timeout.sock_connect, s.timeout.total

    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(go()) == (30.0, None)
    finally:
        loop.close()
