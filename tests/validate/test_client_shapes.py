"""What counts as a successful request, on the bytes a real SGLang server streamed.

A replay server on loopback sends recorded SGLang 0.5.17 answers byte for byte
(tests/fixtures/sglang-0.5.17-h200) and a few hand-written streams in SGLang's
/generate shape (sglang/srt/entrypoints/http_server.py: cumulative ``text`` and
``meta_info.completion_tokens``, ``finish_reason`` on the last event, then
``data: [DONE]``) broken the ways real servers break: cut, short, aborted, CRLF.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from _gate_helpers import serve_app
from aiohttp import web

from validate.client import chat_stream, generate_body, generate_stream, make_session
from validate.sse import EventTooLarge, SSEDecoder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200"
# Whole transcripts recorded by benchmarks/gpu/real_sglang.py (requests.json: what was asked).
RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200-2026-12-03"


def _gen_event(n: int, finish: dict | None = None) -> bytes:
    meta = {"id": "r1", "finish_reason": finish, "prompt_tokens": 8, "completion_tokens": n, "cached_tokens": 0}
    return (
        b"data: " + json.dumps({"text": "tok " * n, "output_ids": list(range(n)), "meta_info": meta}).encode() + b"\n\n"
    )


def _gen_stream(n: int, finish: dict | None, done: bool = True) -> bytes:
    body = b"".join(_gen_event(k) for k in range(1, n)) + _gen_event(n, finish)
    return body + (b"data: [DONE]\n\n" if done else b"")


LENGTH = {"type": "length", "length": 4}
STREAMS: dict[str, bytes] = {
    "ok": _gen_stream(4, LENGTH),
    "ok_crlf": _gen_stream(4, LENGTH).replace(b"\n", b"\r\n"),
    "abort": (FIXTURES / "overflow_generate_abort.sse").read_bytes(),
    "short": _gen_stream(3, {"type": "length", "length": 3}),
    "stop_with_ignore_eos": _gen_stream(4, {"type": "stop", "matched": 2}),
    "nan": _gen_stream(1, {"type": "stop", "matched": "NaN happened"}),
    "no_done": _gen_stream(4, LENGTH, done=False),
    "error_event": _gen_event(1)
    + b'data: {"error": {"message": "CUDA error: an illegal memory access"}}\n\n'
    + b"data: [DONE]\n\n",
    "chat_error": (FIXTURES / "overflow_chat_error.sse").read_bytes(),
    "huge_event": b"data: " + b"x" * (9 * 1024 * 1024),
    "real_generate_ids": (RECORDED / "generate_input_ids.sse").read_bytes(),
    "real_generate_ids_cut": (RECORDED / "generate_input_ids.sse").read_bytes()[: -len(b"data: [DONE]\n\n")],
    "real_abort": (RECORDED / "overflow_generate.sse").read_bytes(),
    "real_chat": (RECORDED / "chat_completions.sse").read_bytes(),
    "real_chat_error": (RECORDED / "overflow_chat.sse").read_bytes(),
}


@pytest.fixture
def replay() -> Iterator[str]:
    """An aiohttp server on 127.0.0.1 that answers /s/<name> with STREAMS[name] (HTTP 200, SSE)."""
    loop = asyncio.new_event_loop()

    async def handler(request: web.Request) -> web.StreamResponse:
        body = STREAMS[request.match_info["name"]]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(0, len(body), 300):  # in pieces, as a network delivers them
            await resp.write(body[i : i + 300])
        if request.match_info["name"] == "cut":
            request.transport.close()
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/s/{name}", handler)
    runner, base = serve_app(loop, app)
    yield f"{base}/s/", loop
    loop.run_until_complete(runner.cleanup())
    loop.close()


def _generate(replay, name: str, want: int = 4):
    base, loop = replay

    async def go():
        async with make_session() as s:
            return await generate_stream(s, base + name, generate_body([1, 2, 3], want), 3, want)

    return loop.run_until_complete(go())


def test_normal_stream_succeeds_with_the_tokens_really_returned(replay):
    for name in ("ok", "ok_crlf"):
        r = _generate(replay, name)
        assert r.success and r.failure == "" and r.output_len == 4 and r.finish_reason == LENGTH
        assert r.ttft > 0 and r.latency >= r.ttft and len(r.itl) == 3


@pytest.mark.parametrize(
    ("name", "failure", "text"),
    [
        ("abort", "abort", "The request queue is full. (status 503)"),
        ("short", "short", "returned 3 of 4 tokens"),
        ("stop_with_ignore_eos", "bad_finish", "expected length"),
        ("nan", "nan", "NaN happened"),
        ("no_done", "no_done", "without data: [DONE]"),
        ("error_event", "error_event", "CUDA error: an illegal memory access"),
        ("huge_event", "event_too_large", "exceeded 8,388,608 bytes"),
    ],
)
def test_broken_streams_are_failures_with_a_reason(replay, name, failure, text):
    r = _generate(replay, name)
    assert not r.success and r.failure == failure and text in r.error


def test_real_generate_transcript_of_the_gates_request_succeeds_with_its_12_tokens(replay):
    """The gate's own request shape (input_ids, ignore_eos, 12 tokens) as SGLang 0.5.17 streamed it."""
    r = _generate(replay, "real_generate_ids", want=12)
    assert r.success and r.output_len == 12 and len(r.itl) == 11
    assert r.finish_reason == {"type": "length", "length": 12}
    assert not _generate(replay, "real_generate_ids", want=13).success  # 12 of 13: short
    cut = _generate(replay, "real_generate_ids_cut", want=12)
    assert not cut.success and cut.failure == "no_done"


def test_real_chat_transcript_counts_usage_tokens(replay):
    base, loop = replay

    async def go(name: str):
        async with make_session() as s:
            return await chat_stream(s, base + name, "random-llama-0.9b", "Count from 1 to 100", 12)

    ok = loop.run_until_complete(go("real_chat"))
    assert ok.success and ok.output_len == 12 and ok.prompt_len == 10 and ok.finish_reason["type"] == "length"
    bad = loop.run_until_complete(go("real_chat_error"))
    assert not bad.success and bad.failure == "error_event" and "The request queue is full." in bad.error


def test_real_abort_counts_zero_tokens(replay):
    for name in ("abort", "real_abort"):
        r = _generate(replay, name)
        assert r.output_len == 0 and r.finish_reason["type"] == "abort" and r.finish_reason["status_code"] == 503
        assert r.failure == "abort" and "The request queue is full." in r.error


def test_real_chat_overflow_is_an_error_event(replay):
    base, loop = replay

    async def go():
        async with make_session() as s:
            return await chat_stream(s, base + "chat_error", "m", "hi", 10)

    r = loop.run_until_complete(go())
    assert not r.success and r.failure == "error_event" and "The request queue is full. (code 503)" in r.error


def test_decoder_on_the_recorded_chat_transcript():
    """The recorded 30-line chat stream: 15 events, split anywhere, CRLF or LF, give the same payloads."""
    raw = (FIXTURES / "sse_chat.txt").read_bytes()
    whole = SSEDecoder().feed(raw)
    assert len(whole) == 15 and all(json.loads(p)["object"] == "chat.completion.chunk" for p in whole)
    for variant in (raw, raw.replace(b"\n", b"\r\n"), raw.replace(b"\n", b"\r")):
        d = SSEDecoder()
        got = [p for i in range(0, len(variant), 7) for p in d.feed(variant[i : i + 7])]
        # a lone CR at the very end may still become CRLF: that event is complete at close()
        assert got + d.close() == whole


def test_decoder_joins_multiline_data_and_skips_comments():
    d = SSEDecoder()
    assert d.feed(b": keep-alive\n\ndata: a\ndata: b\nid: 7\n\nevent: x\n\n") == [b"a\nb"]
    assert d.feed(b"data: tail") == [] and d.close() == [b"tail"]
    small = SSEDecoder(max_event_bytes=10)
    with pytest.raises(EventTooLarge):
        small.feed(b"data: 0123456789")


def test_a_crlf_split_across_two_reads_does_not_end_the_event():
    """A CR at the end of one read and its LF at the start of the next are one line end: a two-line
    event stays one event (a CR turned into LF too early would end it at the first line)."""
    d = SSEDecoder()
    assert d.feed(b"data: a\r") == []
    assert d.feed(b"\ndata: b\r\n\r\n") == [b"a\nb"]
    assert SSEDecoder().feed(b"data: a\r\ndata: b\r\n\r\n") == [b"a\nb"]  # CRLF in one read: the same


def test_data_without_the_optional_space_keeps_every_byte():
    """SSE's `data:x` (no space after the colon) is data `x`: the one-line path and the multi-line one."""
    assert SSEDecoder().feed(b"data:x\n\ndata:y1\ndata:y2\n\n") == [b"x", b"y1\ny2"]


def test_close_keeps_the_payloads_own_bytes_and_leaves_the_decoder_empty():
    """Only line ends are stripped from an unterminated last event; after close() the decoder starts
    clean (a stream's next request reuses nothing)."""
    d = SSEDecoder()
    assert d.feed(b"data: a \n") == [] and d.close() == [b"a "]
    assert d.feed(b"data: aX") == [] and d.close() == [b"aX"]
    assert d.feed(b"data: c\n\n") == [b"c"]


def test_the_size_cap_allows_exactly_the_cap_and_the_decoder_recovers_after_a_refusal():
    small = SSEDecoder(max_event_bytes=10)
    assert small.feed(b"data: 0123") == []  # 10 bytes without an end: at the cap, allowed
    with pytest.raises(EventTooLarge, match=r"one SSE event exceeded 10 bytes \(11 without an end\)"):
        small.feed(b"4")
    assert small.feed(b"data: ok\n\n") == [b"ok"]  # the runaway event was dropped, not kept


def test_server_info_over_the_cap_keeps_the_summary_not_megabytes():
    """The real 0.5.17 /get_server_info, padded past the cap: the report keeps its summary and key list."""
    from validate.config import parse_config
    from validate.phases import SERVER_INFO_CAP, Measurer

    real = json.loads((FIXTURES / "get_server_info.json").read_text())
    big = {**real, "api_key": "sk-live", "_padding": "x" * (SERVER_INFO_CAP + 1)}
    loop = asyncio.new_event_loop()

    async def info(request: web.Request) -> web.Response:
        return web.json_response(big if request.path == "/get_server_info" else real if "model" in request.path else {})

    async def go():
        app = web.Application()
        for path in ("/get_server_info", "/get_model_info", "/v1/models"):
            app.router.add_get(path, info)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            async with make_session() as s:
                return await Measurer(s, f"http://127.0.0.1:{port}", parse_config({}), lambda _m: None).server_info()
        finally:
            await runner.cleanup()

    si = loop.run_until_complete(go())
    loop.close()
    assert si.raw["truncated"] is True and si.raw["bytes"] > SERVER_INFO_CAP
    assert "_padding" in si.raw["keys"] and len(si.raw["keys"]) == 200
    assert "cap" in si.note and si.summary["version"] == real["version"] and si.summary["engine"] == "sglang"
    assert "sk-live" not in json.dumps(si.raw)
