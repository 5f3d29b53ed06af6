"""Measurer's small requests against a stub server (the code under test is the client): what each
returns, values not names."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _gate_helpers import app_in_thread
from aiohttp import web

from validate.client import make_session
from validate.config import parse_config
from validate.metrics import RequestResult
from validate.phases import Measurer, decode_speed


@pytest.fixture
def stub():
    """/flush_cache and /health answer the status the test sets."""
    state = {"flush": 200, "health": 200}

    async def flush(request):
        return web.Response(status=state["flush"], text="")

    async def health(request):
        return web.Response(status=state["health"], text="")

    app = web.Application()
    app.router.add_route("*", "/flush_cache", flush)
    app.router.add_get("/health", health)
    with app_in_thread(app) as base:
        yield base, state


def _with(url: str, fn, cfg: dict | None = None, said: list[str] | None = None):
    async def go():
        async with make_session() as s:
            mm = Measurer(s, url, parse_config(cfg or {}), (said if said is not None else []).append)
            return await fn(mm)

    return asyncio.run(go())


def test_flush_cache_says_ok_or_why_not(stub):
    url, state = stub
    assert _with(url, lambda mm: mm.flush_cache()) == ""
    state["flush"] = 404  # an SGLang older than /flush_cache, or a proxy in front
    assert _with(url, lambda mm: mm.flush_cache()) == "HTTP 404"
    gone = _with("http://127.0.0.1:9", lambda mm: mm.flush_cache())
    assert gone.startswith("ClientConnectorError: Cannot connect to host 127.0.0.1:9") and len(gone) <= 200


def test_health_is_the_status_and_how_long_it_took(stub):
    url, state = stub
    h = _with(url, lambda mm: mm.health("after the load"), {"stability": {"health_timeout_s": 7}})
    assert (h.when, h.healthy, h.error, h.timeout_s) == ("after the load", True, "", 7)
    assert 0 <= h.seconds < 5
    state["health"] = 503
    h = _with(url, lambda mm: mm.health("after"))
    assert not h.healthy and h.error == "HTTP 503"


def test_a_long_wait_says_how_long_it_has_waited():
    said: list[str] = []

    async def slow():
        await asyncio.sleep(0.35)
        return 42

    got = _with(
        "http://127.0.0.1:9", lambda mm: mm._with_progress(slow(), "waiting"), {"progress_interval_s": 0.1}, said
    )
    assert got == 42 and said[:3] == ["waiting: 0s elapsed"] * 3 and len(said) in (3, 4)


def test_decode_speed_is_one_over_the_time_per_output_token():
    ok = RequestResult(success=True, output_len=11, ttft=0.5, latency=2.5)
    assert decode_speed(ok) == 5.0  # 10 tokens after the first in 2 s
    assert decode_speed(RequestResult(success=True, output_len=1, ttft=0.5, latency=2.5)) == 0.0
    assert decode_speed(RequestResult(success=True, output_len=11, ttft=0.5, latency=0.5)) == 0.0
    failed = RequestResult(output_len=11, ttft=0.5, latency=2.5)
    assert decode_speed(failed) == 0.0


def test_docker_state_reads_the_restart_count_and_start_time(tmp_path, monkeypatch):
    from _gate_helpers import stub_docker

    from validate.phases import docker_state

    argv = stub_docker(tmp_path, monkeypatch, 'echo "2 2026-12-05T22:40:01.123456789Z"')
    got = asyncio.run(docker_state("sglang"))
    assert got == {"docker_restart_count": 2, "docker_started_at": "2026-12-05T22:40:01.123456789Z"}
    assert argv.read_text().splitlines() == ["inspect", "--format", "{{.RestartCount}} {{.State.StartedAt}}", "sglang"]
    stub_docker(tmp_path, monkeypatch, 'echo "Error: No such object: sglang" >&2; exit 1')
    assert asyncio.run(docker_state("sglang")) == {
        "docker_error": "docker inspect sglang: Error: No such object: sglang"
    }
    stub_docker(tmp_path, monkeypatch, 'echo "<no value> "')
    assert asyncio.run(docker_state("sglang")) == {"docker_restart_count": "<no", "docker_started_at": "value>"}
    stub_docker(tmp_path, monkeypatch, "sleep 5")
    slow = asyncio.run(docker_state("sglang", timeout_s=0.3))
    assert slow == {"docker_error": "docker inspect sglang: TimeoutError: "}
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    gone = asyncio.run(docker_state("x" * 300))
    assert gone["docker_error"].startswith("docker inspect " + "x" * 100) and len(gone["docker_error"]) == 200


CHAT = (
    Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200-2026-12-03" / "chat_completions.sse"
).read_bytes()  # real SGLang 0.5.17 bytes: 12 tokens of "Count from 1 to 100"


@pytest.fixture
def chat():
    """/v1/chat/completions answering the recorded stream (or stalling, when told); records bodies."""
    state = {"bodies": [], "stall": False}

    async def completions(request):
        state["bodies"].append(await request.json())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        if state["stall"]:
            await asyncio.sleep(30)
        await resp.write(CHAT)
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    with app_in_thread(app) as base:
        yield base, state


def test_the_single_stream_asks_the_deployed_model_the_configured_prompt(chat):
    url, state = chat
    said: list[str] = []
    cfg = {"single_stream": {"prompt": "Count from 1 to 100", "max_tokens": 12, "repeats": 2, "timeout_s": 5}}
    ss = _with(url, lambda mm: mm.single_stream("random-llama-0.9b"), cfg, said)
    assert [r.output_len for r in ss.requests] == [12, 12] and ss.timeout_s == 5
    assert [(b["model"], b["messages"], b["max_tokens"], b["stream"]) for b in state["bodies"]] == [
        ("random-llama-0.9b", [{"role": "user", "content": "Count from 1 to 100"}], 12, True)
    ] * 2
    assert said[0] == "single stream: 'Count from 1 to 100', max_tokens 12 (/v1/chat/completions) x 2"
    r = ss.request
    assert said[-1] == (
        f"single stream: 12 tokens in {r.latency:.1f}s, TTFT {r.ttft * 1000:.0f} ms, "
        f"decode {ss.decode_tok_s:.1f} tok/s (median of 2)"
    )


def test_a_single_stream_that_stalls_is_a_timeout_and_ends_the_repeats(chat):
    url, state = chat
    state["stall"] = True
    said: list[str] = []
    cfg = {"single_stream": {"repeats": 3, "timeout_s": 0.5}, "progress_interval_s": 0.2}
    ss = _with(url, lambda mm: mm.single_stream("m"), cfg, said)
    assert len(ss.requests) == 1  # a failed repeat ends the repeats
    assert (ss.request.failure, ss.request.error) == (
        "timeout",
        "no complete answer within single_stream.timeout_s = 0.5s",
    )
    assert "single stream: waiting for the answer (deadline 0.5s): 0s elapsed" in said
    assert not any(line.startswith("single stream: 0 tokens") for line in said)


PROBES = {
    "answers": {
        "probes": [
            {"prompt": "Count from 1 to 100", "expect": "1", "max_tokens": 12},
            {"prompt": "Say hi", "expect_regex": "hi", "max_tokens": 5},
        ]
    }
}


def test_probes_ask_each_prompt_of_the_deployed_model_and_stop_on_a_stall(chat):
    url, state = chat
    got = _with(url, lambda mm: mm.probes("random-llama-0.9b"), {**PROBES, "single_stream": {"timeout_s": 5}})
    assert [(p.index, p.prompt, p.request.success, p.request.failure) for p in got] == [
        (1, "Count from 1 to 100", True, ""),
        (2, "Say hi", False, "overlong"),  # the stub streams its 12 recorded tokens whatever was asked
    ]
    assert [(b["model"], b["messages"][0]["content"], b["max_tokens"]) for b in state["bodies"]] == [
        ("random-llama-0.9b", "Count from 1 to 100", 12),
        ("random-llama-0.9b", "Say hi", 5),
    ]
    state["stall"] = True
    stalled = _with(url, lambda mm: mm.probes("m"), {**PROBES, "single_stream": {"timeout_s": 0.3}})
    assert [(p.index, p.request.failure) for p in stalled] == [(1, "timeout")]  # the second would only wait again
