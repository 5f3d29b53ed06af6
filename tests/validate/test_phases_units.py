"""Measurer's small requests against a stub server (the code under test is the client): what each
returns, values not names."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
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
        await asyncio.sleep(0.55)
        return 42

    got = _with(
        "http://127.0.0.1:9", lambda mm: mm._with_progress(slow(), "waiting"), {"progress_interval_s": 0.1}, said
    )
    # a note every 0.1 s: 5 (or 6) in 0.55 s; 3 or 4 when a busy machine wakes the loop late; a note
    # every other interval would make 2
    assert got == 42 and said[:3] == ["waiting: 0s elapsed"] * 3 and 3 <= len(said) <= 6


def test_decode_speed_is_one_over_the_time_per_output_token():
    ok = RequestResult(success=True, output_len=11, ttft=0.5, latency=2.5)
    assert decode_speed(ok) == 5.0  # 10 tokens after the first in 2 s
    assert decode_speed(RequestResult(success=True, output_len=1, ttft=0.5, latency=2.5)) == 0.0
    assert decode_speed(RequestResult(success=True, output_len=2, ttft=0.5, latency=1.5)) == 1.0
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
    stub_docker(tmp_path, monkeypatch, r"printf '1 \377\n'")  # not UTF-8: kept, replaced
    assert asyncio.run(docker_state("sglang")) == {"docker_restart_count": 1, "docker_started_at": "\ufffd"}
    stub_docker(tmp_path, monkeypatch, "printf 'e%.0s' $(seq 300); exit 1")
    long = asyncio.run(docker_state("sglang"))["docker_error"]
    assert long.startswith("docker inspect sglang: eee") and len(long) == 200
    stub_docker(tmp_path, monkeypatch, "sleep 5")
    slow = asyncio.run(docker_state("sglang", timeout_s=0.3))
    assert slow == {"docker_error": "docker inspect sglang: TimeoutError: "}
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    gone = asyncio.run(docker_state("x" * 300))
    assert gone["docker_error"].startswith("docker inspect " + "x" * 100) and len(gone["docker_error"]) == 200


RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200-2026-12-03"
CHAT = (RECORDED / "chat_completions.sse").read_bytes()  # real SGLang 0.5.17 bytes: 12 tokens of "Count from 1 to 100"
GENERATE = (RECORDED / "generate_text.sse").read_bytes()  # the same prompt on streamed /generate, with output_ids


@pytest.fixture
def chat():
    """/v1/chat/completions and /generate answering the recorded streams (or stalling, when told); records bodies."""
    state = {"bodies": [], "stall": False}

    async def answer(request, recorded):
        state["bodies"].append(await request.json())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        if state["stall"]:
            await asyncio.sleep(30)
        await resp.write(recorded)
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", lambda r: answer(r, CHAT))
    app.router.add_post("/generate", lambda r: answer(r, GENERATE))
    with app_in_thread(app) as base:
        yield base, state


def test_the_single_stream_sends_the_configured_prompt_to_streamed_generate(chat):
    url, state = chat
    said: list[str] = []
    cfg = {"single_stream": {"prompt": "Count from 1 to 100", "max_tokens": 12, "repeats": 2, "timeout_s": 5}}
    ss = _with(url, lambda mm: mm.single_stream(), cfg, said)
    # real SGLang's answer to this very request: its 12 streamed output_ids are the count
    assert [(r.success, r.output_len, r.claimed_tokens) for r in ss.requests] == [(True, 12, 12)] * 2
    assert ss.timeout_s == 5
    assert (
        state["bodies"]
        == [
            {
                "text": "Count from 1 to 100",
                "sampling_params": {"temperature": 0.0, "max_new_tokens": 12},
                "stream": True,
            }
        ]
        * 2
    )
    assert said[0] == "single stream: 'Count from 1 to 100', max_tokens 12 (streamed /generate) x 2"
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
    ss = _with(url, lambda mm: mm.single_stream(), cfg, said)
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


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200-2026-12-03"
SERVER_INFO = json.loads((FIXTURES / "get_server_info.json").read_text())  # real SGLang 0.5.17
MODEL_INFO = json.loads((FIXTURES / "get_model_info.json").read_text())
MODELS = json.loads((FIXTURES / "v1_models.json").read_text())


@pytest.fixture
def info():
    """SGLang's info endpoints answering the recorded bytes; each path's status and body settable,
    and how often and when each was asked recorded (readiness turns ready when ``ready_after`` is reached)."""
    state = {
        "status": {},
        "body": {
            "/get_server_info": SERVER_INFO,
            "/server_info": SERVER_INFO,
            "/get_model_info": MODEL_INFO,
            "/model_info": MODEL_INFO,
            "/v1/models": MODELS,
        },
        "asked": {},
        "at": [],  # (path, time.monotonic()) of each ask
        "ready_after": 0,
    }

    async def answer(request):
        path = request.path
        state["asked"][path] = state["asked"].get(path, 0) + 1
        state["at"].append((path, time.monotonic()))
        if path == "/health" and state["asked"][path] <= state["ready_after"]:
            return web.Response(status=503, text="starting")
        status = state["status"].get(path, 200)
        body = state["body"].get(path)
        if status != 200:
            return web.Response(status=status, text="nope")
        return web.json_response(body) if body is not None else web.Response(text="")

    app = web.Application()
    for path in ("/health", "/health_generate", *state["body"]):
        app.router.add_get(path, answer)
    with app_in_thread(app) as base:
        yield base, state


def test_readiness_waits_for_health_then_a_generation_and_says_so(info):
    url, state = info
    said: list[str] = []
    r = _with(url, lambda mm: mm.readiness(), {"readiness": {"timeout_s": 5, "interval_s": 0.05}}, said)
    assert r.ready and r.last_error == "" and 0 <= r.seconds < 1
    assert said == [f"ready after {r.seconds:.1f}s (/health and /health_generate answered 200)"]
    assert state["asked"] == {"/health": 1, "/health_generate": 1}

    state["asked"].clear()
    state["ready_after"] = 3  # three 503s first, then ready
    said.clear()
    r = _with(url, lambda mm: mm.readiness(), {"readiness": {"timeout_s": 5, "interval_s": 0.1}}, said)
    assert r.ready and 0.25 <= r.seconds < 2 and state["asked"] == {"/health": 4, "/health_generate": 1}
    assert said[0] == f"waiting for {url}/health: 0s of 5s (last: /health: HTTP 503)"
    assert said[-1].startswith("ready after ")


def test_readiness_gives_up_at_its_deadline_naming_what_failed_last(info):
    url, state = info
    state["status"]["/health_generate"] = 503  # /health answers, a generation does not
    said: list[str] = []
    r = _with(url, lambda mm: mm.readiness(), {"readiness": {"timeout_s": 0.6, "interval_s": 0.25}}, said)
    assert (r.ready, r.seconds, r.last_error) == (False, 0.6, "/health_generate: HTTP 503")
    assert said[0] == f"waiting for {url}/health: 0s of 0.6s (last: /health_generate: HTTP 503)"
    # asked every interval_s (the last sleep cut to the deadline), notes as often. A sleep is never
    # shorter than asked and a busy machine only wakes the loop later, so the first gap lies in
    # [interval, 1.5 x interval): asking every other interval would make it 0.5 s
    asks = [t for path, t in state["at"] if path == "/health"]
    gaps = [b - a for a, b in itertools.pairwise(asks)]
    assert 2 <= len(asks) <= 4 and 2 <= len(said) <= 3, (asks, said)
    assert 0.9 * 0.25 <= gaps[0] < 1.5 * 0.25 and all(g >= 0.9 * 0.25 for g in gaps[:-1]), gaps
    gone = _with("http://127.0.0.1:9", lambda mm: mm.readiness(), {"readiness": {"timeout_s": 0.3, "interval_s": 0.1}})
    assert not gone.ready and gone.last_error.startswith("/health: cannot connect: ClientConnectorError")


def test_server_info_summarizes_sglangs_real_answers(info):
    url, state = info
    state["body"]["/get_server_info"] = {**SERVER_INFO, "api_key": "sk-secret", "stream_interval": 4}
    mm_box = {}

    async def go(mm):
        mm_box["mm"] = mm
        return await mm.server_info()

    si = _with(url, go)
    assert si.summary["engine"] == "sglang" and si.summary["version"] == "0.5.17"
    assert si.summary["source"] == "/get_server_info" and si.summary["tp_size"] == 1
    assert si.model == "random-llama-0.9b" and si.note == ""
    assert si.names == ["random-llama-0.9b", "/models/random-llama-0.9b"]
    assert si.raw["api_key"] == "***redacted***" and si.raw["model_path"] == "/models/random-llama-0.9b"
    assert mm_box["mm"].stream_interval == 4
    assert state["asked"] == {"/get_server_info": 1, "/get_model_info": 1, "/v1/models": 1}

    for bad in (0, "2", None):
        state["body"]["/get_server_info"] = {**SERVER_INFO, "stream_interval": bad}
        _with(url, go)
        assert mm_box["mm"].stream_interval == 1


def test_server_info_falls_back_to_older_paths_and_says_what_it_could_not_read(info):
    url, state = info
    state["status"]["/get_server_info"] = 404  # releases before the get_ prefix
    state["status"]["/get_model_info"] = 404
    state["body"]["/model_info"] = {"model_path": "/models/glm-5", "served_model_name": "glm-5"}
    state["body"]["/server_info"] = {"version": "0.5.9", "tp_size": 8}
    state["body"]["/v1/models"] = {"data": [{"id": "glm-5"}, {"id": "glm-5-alias"}]}
    si = _with(url, lambda mm: mm.server_info())
    assert si.summary["version"] == "0.5.9" and si.summary["tp_size"] == 8
    assert si.summary["model_path"] == "/models/glm-5"  # from the model info
    assert si.model == "glm-5" and si.names == ["glm-5", "/models/glm-5", "glm-5-alias"]

    for path in ("/get_server_info", "/server_info", "/get_model_info", "/model_info", "/v1/models"):
        state["status"][path] = 500
    si = _with(url, lambda mm: mm.server_info())
    assert si.summary["source"] == "unavailable" and si.summary["engine"] == "unknown"
    assert (si.raw, si.model, si.names, si.note) == (None, "default", [], "")
    state["status"].clear()
    state["body"]["/get_server_info"] = state["body"]["/server_info"] = ["not", "an", "object"]
    state["body"]["/get_model_info"] = "text"  # not an object: the older path is asked
    si = _with(url, lambda mm: mm.server_info())
    assert si.summary["source"] == "unavailable" and si.names == ["glm-5", "/models/glm-5", "glm-5-alias"]
    assert state["asked"]["/model_info"] == 3


def test_a_huge_server_info_keeps_only_its_summary(info):
    url, state = info
    keys = {f"k{i:04d}": "x" * 200 for i in range(1500)}
    state["body"]["/get_server_info"] = {**SERVER_INFO, **keys}
    si = _with(url, lambda mm: mm.server_info())
    size = len(json.dumps({**SERVER_INFO, **keys}, default=str))
    assert size > 256 * 1024
    assert si.raw == {"truncated": True, "bytes": size, "keys": sorted({**SERVER_INFO, **keys})[:200]}
    assert si.note == f"raw server info was {size:,} bytes (cap 262,144): only its summary is kept"
    assert si.summary["version"] == "0.5.17"


def test_identity_is_the_start_dependent_facts_and_the_containers_state(info, tmp_path, monkeypatch):
    from _gate_helpers import stub_docker

    url, state = info
    ident = _with(url, lambda mm: mm.identity("before the load"))
    assert ident.when == "before the load" and ident.error == ""
    assert ident.facts == {"random_seed": 442534694, "startup_time": SERVER_INFO["startup_time"]}

    stub_docker(tmp_path, monkeypatch, 'echo "1 2026-12-06T03:00:00Z"')

    async def with_container():
        async with make_session() as s:
            return await Measurer(s, url, parse_config({}), [].append, container="sglang").identity("after")

    assert asyncio.run(with_container()).facts == {
        "random_seed": 442534694,
        "startup_time": SERVER_INFO["startup_time"],
        "docker_restart_count": 1,
        "docker_started_at": "2026-12-06T03:00:00Z",
    }
    state["status"]["/get_server_info"] = 502
    state["status"]["/server_info"] = 404
    ident = _with(url, lambda mm: mm.identity("after the sweep"))
    assert ident.facts == {} and ident.error == "server info: HTTP 404 Not Found: nope"
    state["status"].clear()
    state["body"]["/get_server_info"] = state["body"]["/server_info"] = [1, 2]
    assert _with(url, lambda mm: mm.identity("x")).error == "server info: not a JSON object"


FAST = ("--engine-decode-base-ms", "1", "--engine-decode-per-req-ms", "0")  # the TEST ENGINE, not SGLang


@pytest.fixture
def generate():
    """/generate that records each body and answers HTTP 500 or stalls, as the test says."""
    state = {"bodies": [], "stall": False}

    async def gen(request):
        state["bodies"].append(json.loads(await request.read()))
        if state["stall"]:
            await asyncio.sleep(5)
        return web.Response(status=500, text="no sampling kernel for sm_120")

    app = web.Application()
    app.router.add_post("/generate", gen)
    with app_in_thread(app) as base:
        yield base, state


def test_the_sampler_warm_up_sends_productions_sampling_and_keeps_a_failure(generate):
    url, state = generate
    said: list[str] = []
    w = _with(
        url,
        lambda mm: mm.sampler_warmup(300, "throughput.timeout_s"),
        {"sampling": {"temperature": 0.6, "top_p": 0.8, "top_k": 20}},
        said,
    )
    assert state["bodies"] == [
        {
            "input_ids": [1, 2, 3, 4],
            "sampling_params": {"temperature": 0.6, "top_p": 0.8, "top_k": 20, "max_new_tokens": 4, "ignore_eos": True},
            "stream": True,
        }
    ]
    assert (w.request.success, w.request.failure) == (False, "http_error")
    assert w.request.error == "HTTP 500 Internal Server Error: no sampling kernel for sm_120"
    assert said == [f"sampler warm-up request: http_error: {w.request.error} after {w.seconds:.1f}s"]
    # greedy production (temperature 0) still warms the sampler: it is the sampler's first request
    _with(url, lambda mm: mm.sampler_warmup(300, "throughput.timeout_s"), {"sampling": {"temperature": 0}})
    assert state["bodies"][-1]["sampling_params"]["temperature"] == 0.7
    state["stall"] = True
    said.clear()
    w = _with(
        url, lambda mm: mm.sampler_warmup(0.3, "stability.step_timeout_s"), {"single_stream": {"timeout_s": 9}}, said
    )
    assert (w.request.failure, w.request.error) == (
        "timeout",
        "no complete answer within stability.step_timeout_s = 0.3s (the phase it warms)",
    )
    assert 0.3 <= w.seconds < 2 and said == [
        f"sampler warm-up request: timeout: {w.request.error} after {w.seconds:.1f}s"
    ]


def test_an_answered_sampler_warm_up_is_quiet(engine_factory):
    eng = engine_factory(*FAST)
    said: list[str] = []
    w = _with(eng.url, lambda mm: mm.sampler_warmup(10, "throughput.timeout_s"), None, said)
    assert w.request.success and w.request.output_len == 4 and 0 < w.seconds < 10 and said == []
    assert w.request.prompt_len == 4 and w.seconds == round(w.seconds, 2)


def test_the_throughput_phase_repeats_until_the_runs_agree_and_says_each_run(engine_factory):
    eng = engine_factory(*FAST)
    cfg = {
        "throughput": {"num_prompts": 6, "input_len": 16, "output_len": 5, "repeats": 2, "max_repeats": 3},
        "progress_interval_s": 60,
    }
    said: list[str] = []
    asked: list[int] = []

    def never_stable(runs):
        asked.append(len(runs))
        return False

    tp = _with(eng.url, lambda mm: mm.throughput(None, never_stable), cfg, said)
    assert len(tp.runs) == 3 and asked == [
        2
    ]  # asked after the repeats; max_repeats ends it and tp.flushes == ["ok", "ok", "ok"]
    assert [len(r.warmup) for r in tp.runs] == [1, 0, 0]  # warm-ups before the first run only
    assert [r.metrics.completed for r in tp.runs] == [6, 6, 6]
    starts = [s for s in said if "prompts x" in s]
    assert starts == [
        "throughput run 1/2: 6 prompts x 16 in / 5 out tokens, all at once, streaming /generate",
        "throughput run 2/2: 6 prompts x 16 in / 5 out tokens, all at once, streaming /generate",
        "throughput run 3/3 (more runs: the first disagreed): 6 prompts x 16 in / 5 out tokens, "
        "all at once, streaming /generate",
    ]
    ends = [s for s in said if " ok / " in s]
    assert [e.split(" in ")[0] for e in ends] == [
        "throughput run 1/2: 6 ok / 0 failed",
        "throughput run 2/2: 6 ok / 0 failed",
        "throughput run 3/3: 6 ok / 0 failed",
    ]
    m = tp.runs[0].metrics
    assert ends[0] == (
        f"throughput run 1/2: 6 ok / 0 failed in {m.duration_s:.1f}s: total {m.total_throughput:,.0f} tok/s, "
        f"output {m.output_throughput:,.0f} tok/s, p99 TTFT {m.p99_ttft_ms:,.0f} ms, "
        f"mean E2E {m.mean_e2e_latency_ms:,.0f} ms"
    )

    said.clear()
    stable = _with(
        eng.url,
        lambda mm: mm.throughput(None, lambda runs: True),
        {**cfg, "throughput": {**cfg["throughput"], "request_rate": 50, "flush_cache": False}},
        said,
    )
    assert len(stable.runs) == 2 and stable.flushes == []
    assert said[0] == "throughput run 1/2: 6 prompts x 16 in / 5 out tokens, 50 req/s, streaming /generate"


def test_the_throughput_phase_stops_when_nothing_gets_through_or_files_run_short(engine_factory):
    from validate.limits import FileLimit

    eng = engine_factory(*FAST, "--engine-fault", "error_rate:1")
    cfg = {"throughput": {"num_prompts": 4, "input_len": 8, "output_len": 4, "repeats": 3, "warmup_requests": 0}}
    tp = _with(eng.url, lambda mm: mm.throughput(None, lambda runs: True), cfg)
    assert len(tp.runs) == 1 and tp.runs[0].metrics.completed == 0 and tp.runs[0].metrics.failed == 4

    short = FileLimit(soft=67, hard=67, wanted=68, note="")
    refused = _with(eng.url, lambda mm: mm.throughput(short, lambda runs: True), cfg)
    assert refused.runs == [] and refused.refused == short.refusal(4) and refused.deadline_s == 600
    assert _with(eng.url, lambda mm: mm.throughput(FileLimit(68, 68, 68, ""), lambda r: True), cfg).runs != []
    # concurrency is the prompts, or max_concurrency when lower
    capped = {"throughput": {**cfg["throughput"], "max_concurrency": 2}}
    assert _with(eng.url, lambda mm: mm.throughput(FileLimit(66, 66, 66, ""), lambda r: True), capped).runs != []


@pytest.fixture
def load_calls(monkeypatch):
    """What the phases hand to run_load (the real one still runs): each call's prompts and settings."""
    import validate.phases as phases

    calls: list[dict] = []
    real = phases.run_load

    async def spy(session, url, prompts, output_len, **kw):
        calls.append({"url": url, "prompts": prompts, "output_len": output_len, **kw})
        return await real(session, url, prompts, output_len, **kw)

    monkeypatch.setattr(phases, "run_load", spy)
    return calls


def test_the_throughput_runs_send_the_configured_workload_sampling_and_answer_rule(engine_factory, load_calls):
    from validate.checks import AnswerRule
    from validate.load import random_ids

    eng = engine_factory(*FAST)
    cfg = {
        "throughput": {
            "num_prompts": 4,
            "input_len": 8,
            "output_len": 20,
            "repeats": 2,
            "seed": 7,
            "vocab_size": 500,
            "request_rate": 40,
            "max_concurrency": 3,
            "warmup_requests": 2,
            "timeout_s": 50,
        },
        "sampling": {"temperature": 0.5, "top_p": 0.9, "top_k": 8},
        "answers": {"min_tokens": 17, "max_repeat_fraction": 0.4},
        "progress_interval_s": 12,
    }
    said: list[str] = []
    _with(eng.url, lambda mm: mm.throughput(None, lambda runs: True), cfg, said)
    assert len(load_calls) == 2
    for k, call in enumerate(load_calls, start=1):
        progress = call.pop("progress")
        assert call == {
            "url": eng.url + "/generate",
            "prompts": random_ids(4, 8, 500, 7),  # the same prompts in every run
            "output_len": 20,
            "label": f"throughput run {k}/2",
            "deadline_s": 50,
            "request_rate": 40,
            "max_concurrency": 3,
            "warmup_requests": 2 if k == 1 else 0,
            "seed": 7,
            "progress_interval_s": 12,
            "prewarm_url": eng.url + "/v1/models",
            "sampling": {"temperature": 0.5, "top_p": 0.9, "top_k": 8},
            "rule": AnswerRule(17, 0.4),
        }
        progress("a progress line")
        assert said[-1] == "a progress line"  # run_load's progress reaches the gate's output

    load_calls.clear()
    off = {**cfg, "answers": {"enabled": False}}
    _with(
        eng.url,
        lambda mm: mm.stability_step(2, 3, 5, None),
        {**off, "stability": {"input_len": 9, "output_len": 6, "step_timeout_s": 40}},
        said,
    )
    (call,) = load_calls
    progress = call.pop("progress")
    assert call == {
        "url": eng.url + "/generate",
        "prompts": random_ids(5, 9, 500, 7 + 2),  # another workload per step, reproducible
        "output_len": 6,
        "label": "stability step 2/3 (concurrency 5)",
        "deadline_s": 40,
        "max_concurrency": 5,
        "progress_interval_s": 12,
        "prewarm_url": eng.url + "/v1/models",
        "sampling": {"temperature": 0.5, "top_p": 0.9, "top_k": 8},
        "rule": None,  # answers.enabled: false
    }
    progress("step line")
    assert said[-1] == "step line"


def test_a_run_whose_flush_failed_is_measured_anyway_and_says_so(engine_factory):
    eng = engine_factory(*FAST)
    said: list[str] = []

    async def go(mm):
        async def refused() -> str:
            return "HTTP 404"  # an SGLang older than /flush_cache, or a proxy in front

        mm.flush_cache = refused
        return await mm.throughput(None, lambda runs: True)

    cfg = {"throughput": {"num_prompts": 2, "input_len": 8, "output_len": 4, "repeats": 1}}
    tp = _with(eng.url, go, cfg, said)
    assert tp.flushes == ["HTTP 404"] and tp.runs[0].metrics.completed == 2
    assert "throughput run 1/1: /flush_cache did not flush (HTTP 404); measuring anyway" in said


def test_the_measurer_takes_the_answer_rule_and_sampling_from_the_config():
    from validate.checks import AnswerRule

    async def build(cfg):
        async with make_session() as s:
            return Measurer(s, "http://x", parse_config(cfg), [].append)

    mm = asyncio.run(build({"answers": {"min_tokens": 17, "max_repeat_fraction": 0.4}}))
    assert mm.rule == AnswerRule(17, 0.4) and mm.stream_interval == 1 and mm.container is None
    assert mm.sampling == {"temperature": 1.0, "top_p": 0.95, "top_k": -1}
    assert asyncio.run(build({"answers": {"enabled": False}})).rule is None


@pytest.fixture
def stalls():
    """Every endpoint the small requests use, answering only after 10 s (a wedged server)."""

    async def late(request):
        await asyncio.sleep(10)
        return web.json_response({})

    app = web.Application()
    for path in ("/health", "/health_generate", "/get_server_info", "/server_info", "/get_model_info",
                 "/model_info", "/v1/models"):  # fmt: skip
        app.router.add_get(path, late)
    app.router.add_route("*", "/flush_cache", late)
    with app_in_thread(app) as base:
        yield base


def test_a_wedged_server_is_given_up_on_at_each_requests_timeout(stalls):
    import time

    cfg = {"readiness": {"timeout_s": 1.0, "interval_s": 0.2, "request_timeout_s": 0.3}}
    t0 = time.monotonic()
    r = _with(stalls, lambda mm: mm.readiness(), cfg)
    assert (r.ready, r.last_error) == (False, "/health: no answer within 0.3s") and time.monotonic() - t0 < 2
    t0 = time.monotonic()
    ident = _with(stalls, lambda mm: mm.identity("after"), cfg)
    assert (ident.facts, ident.error) == ({}, "server info: no answer within 0.3s")
    si = _with(stalls, lambda mm: mm.server_info(), cfg)
    assert si.summary["source"] == "unavailable" and si.model == "default"
    assert _with(stalls, lambda mm: mm.flush_cache(), cfg) == "TimeoutError: "
    assert time.monotonic() - t0 < 5  # 2 + 6 + 1 requests of 0.3 s, none of them 10 s


def test_readiness_stops_at_its_deadline_not_a_poll_interval_later(info):
    import time

    url, state = info
    state["status"]["/health"] = 503
    t0 = time.monotonic()
    r = _with(url, lambda mm: mm.readiness(), {"readiness": {"timeout_s": 0.6, "interval_s": 0.5}})
    took = time.monotonic() - t0
    assert not r.ready and 0.55 < took < 0.9, took  # polls at 0 and 0.5 s, then gives up at 0.6 s


def test_seconds_are_kept_to_the_report_precision(info):
    url, _ = info
    h = _with(url, lambda mm: mm.health("now"))
    assert 0 < h.seconds < 1 and h.seconds == round(h.seconds, 3)
    r = _with(url, lambda mm: mm.readiness())
    assert r.seconds == round(r.seconds, 2)


def test_server_info_without_model_endpoints_still_names_the_served_model(info):
    url, state = info
    state["body"]["/get_model_info"] = state["body"]["/model_info"] = ["not", "an", "object"]
    state["body"]["/v1/models"] = ["nor", "this"]
    si = _with(url, lambda mm: mm.server_info())
    assert si.model == "random-llama-0.9b"  # from the server info's served_model_name
    assert si.names == ["random-llama-0.9b", "/models/random-llama-0.9b"]
    assert si.summary["model_path"] == "/models/random-llama-0.9b"
