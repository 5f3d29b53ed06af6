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
    "empty": _chunk(content="") + _chunk(finish="stop") + DONE,
    "no_finish": _chunk(content="x") + DONE,
    "abort_no_message": b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"abort"}]}\n\n' + DONE,
    "bad_json": b"data: {not json\n\n" + DONE,
    "bad_shape": b'data: {"choices": 5}\n\n' + DONE,
}
JSONS = {
    "ok": (200, b'{"a": 1}'),
    "notjson": (200, b"<html>"),
    "missing": (404, b"Not Found"),
    "auth": (401, b'{"detail":"Unauthorized"}'),
    "long": (500, b"e" * 1000),
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

    app = web.Application()
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


def test_reasoning_content_counts_and_chunks_stand_in_for_usage(server):
    base, loop, _ = server
    r = _run(loop, lambda s: chat_stream(s, base + "/chat/reasoning", "m", "p", 50))
    assert r.success and r.output_len == 3 and r.text_chars == len("Let me count1 2 3") and len(r.itl) == 2
    assert r.finish_reason == {"type": "stop", "matched": 151336} and r.prompt_len == 0
    u = _run(loop, lambda s: chat_stream(s, base + "/chat/usage", "m", "p", 50))
    assert u.success and (u.output_len, u.prompt_len, u.text_chars) == (5, 7, 4)
    assert u.finish_reason == {"type": "length", "matched": None}


@pytest.mark.parametrize(
    ("name", "failure", "error"),
    [
        ("empty", "short", "returned 0 of at least 1 tokens (finish_reason stop)"),
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
