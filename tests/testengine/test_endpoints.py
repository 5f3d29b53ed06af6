"""The test engine over real loopback HTTP: SGLang's shapes, auth, metrics, cache, speed model."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from testengine.harness import start_engine


def _req(
    url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None, timeout: float = 20
) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _sse(raw: bytes) -> list[str]:
    events = [e.strip() for e in raw.decode().split("\n\n") if e.strip()]
    assert all(e.startswith("data: ") for e in events), events[:3]
    return [e[len("data: ") :] for e in events]


def test_generate_stream_is_cumulative_with_meta_info(engine_factory):
    eng = engine_factory()
    st, raw = _req(
        eng.url + "/generate",
        {"input_ids": [5] * 17, "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}, "stream": True},
    )
    assert st == 200
    ev = _sse(raw)
    assert ev[-1] == "[DONE]"
    chunks = [json.loads(e) for e in ev[:-1]]
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4]
    assert all(c["meta_info"]["prompt_tokens"] == 17 for c in chunks)
    # SGLang's default: each chunk carries the whole text so far.
    assert all(chunks[i + 1]["text"].startswith(chunks[i]["text"]) for i in range(3))
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
    assert chunks[0]["meta_info"]["finish_reason"] is None


def test_generate_non_stream(engine_factory):
    eng = engine_factory()
    st, raw = _req(eng.url + "/generate", {"text": "hello there", "sampling_params": {"max_new_tokens": 3}})
    body = json.loads(raw)
    assert st == 200 and body["meta_info"]["completion_tokens"] == 3 and body["text"]


def test_completions_stream_shapes_usage_and_done(engine_factory):
    eng = engine_factory()
    st, raw = _req(
        eng.url + "/v1/completions",
        {
            "model": "m",
            "prompt": [1, 2, 3],
            "max_tokens": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    ev = _sse(raw)
    assert st == 200 and ev[-1] == "[DONE]"
    chunks = [json.loads(e) for e in ev[:-1]]
    assert {c["object"] for c in chunks} == {"text_completion"}
    text_chunks = [c for c in chunks if c["choices"]]
    assert len(text_chunks) == 3 and text_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert set(text_chunks[0]["choices"][0]) == {"index", "text", "logprobs", "finish_reason", "matched_stop"}
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3
    assert usage["usage"]["prompt_tokens"] == 3 and usage["usage"]["total_tokens"] == 6


def test_chat_stream_role_first_reasoning_then_content(engine_factory):
    eng = engine_factory("--reasoning-parser", "glm45")
    st, raw = _req(
        eng.url + "/v1/chat/completions",
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Count from 1 to 100"}],
            "max_tokens": 16,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    ev = _sse(raw)
    assert st == 200 and ev[-1] == "[DONE]"
    chunks = [json.loads(e) for e in ev[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    assert reasoning and content.startswith("1, 2, 3")
    assert [c for c in chunks if c["choices"]][-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 16


def test_server_info_reports_flags_unknown_args_and_test_engine(engine_factory):
    eng = engine_factory(
        "--tp",
        "8",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--disable-radix-cache",
        "--trust-remote-code",
        "--dsa-prefill-backend",
        "flashmla_sparse",
        "--some-future-flag",
        "7",
    )
    st, raw = _req(eng.url + "/get_server_info")
    info = json.loads(raw)
    assert st == 200
    assert info["tp_size"] == 8 and info["kv_cache_dtype"] == "fp8_e4m3" and info["disable_radix_cache"] is True
    assert info["dsa_prefill_backend"] == "flashmla_sparse"
    assert info["test_engine"] is True and "test-engine" in info["version"]
    assert "last_gen_throughput" in info["internal_states"][0]
    assert info["test_engine_info"]["unrecognized_args"] == ["--some-future-flag", "7"]
    st, raw = _req(eng.url + "/get_model_info")
    assert st == 200 and json.loads(raw)["model_path"]
    st, raw = _req(eng.url + "/v1/models")
    assert json.loads(raw)["data"][0]["id"]


def test_api_key_enforced_except_health_and_metrics(engine_factory):
    eng = engine_factory("--api-key", "s3cret", "--enable-metrics")
    body = {"input_ids": [1], "sampling_params": {"max_new_tokens": 1}}
    assert _req(eng.url + "/generate", body)[0] == 401
    assert _req(eng.url + "/generate", body, {"Authorization": "Bearer wrong"})[0] == 401
    assert _req(eng.url + "/generate", body, {"Authorization": "Bearer s3cret"})[0] == 200
    assert _req(eng.url + "/health")[0] == 200
    assert _req(eng.url + "/metrics")[0] == 200
    assert _req(eng.url + "/get_server_info")[0] == 401


def test_metrics_prometheus_only_with_enable_metrics(engine_factory):
    plain = engine_factory()
    assert _req(plain.url + "/metrics")[0] == 404
    eng = engine_factory("--enable-metrics")
    _req(eng.url + "/generate", {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 5}})
    st, raw = _req(eng.url + "/metrics")
    text = raw.decode()
    assert st == 200
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:gen_throughput",
        "sglang:generation_tokens_total",
    ):
        assert name in text
    line = next(ln for ln in text.splitlines() if ln.startswith("sglang:generation_tokens_total"))
    assert float(line.rsplit(" ", 1)[1]) >= 5


def test_health_503_while_starting_then_200(engine_factory):
    eng = engine_factory("--engine-startup-delay-s", "1.5", wait=False)
    deadline = time.monotonic() + 10
    seen_503 = False
    while time.monotonic() < deadline:
        try:
            st, _ = _req(eng.url + "/health", timeout=2)
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
            continue
        if st == 503:
            seen_503 = True
        if st == 200:
            break
        time.sleep(0.05)
    assert seen_503 and st == 200


def test_flashinfer_cache_cold_then_warm(tmp_path):
    cache = tmp_path / "fi"
    first = start_engine(tmp_path, "--engine-cold-start-s", "0.3", cache_dir=cache)
    try:
        info = json.loads(_req(first.url + "/get_server_info")[1])
        assert info["test_engine_info"]["flashinfer_cache"] == "cold"
    finally:
        first.stop()
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert any("cached_ops" in p.parts for p in files)
    # what the roles count as a warm cache: a module .so under <ver>/<arch>/cached_ops/
    assert list(cache.glob("*/*/cached_ops/*/*.so"))
    assert all("test engine" in p.read_text().lower() or "test_engine" in p.read_text() for p in files)
    second = start_engine(tmp_path, cache_dir=cache)
    try:
        info = json.loads(_req(second.url + "/get_server_info")[1])
        assert info["test_engine_info"]["flashinfer_cache"] == "warm"
        assert "flashinfer cache: warm" in second.log.read_text()
    finally:
        second.stop()


def test_a_new_release_or_kernel_setting_under_the_same_flashinfer_starts_cold(tmp_path):
    """As a real cache: a start whose SGLang release or kernel flags differ needs modules the volume does
    not hold yet (cold, and it builds them); the builds accumulate, so an earlier one stays warm."""
    cache = tmp_path / "fi"

    def state(*flags: str, version: str = "0.5.22") -> str:
        eng = start_engine(tmp_path, *flags, cache_dir=cache, env={"TEST_ENGINE_SGLANG_VERSION": version})
        try:
            return json.loads(_req(eng.url + "/get_server_info")[1])["test_engine_info"]["flashinfer_cache"]
        finally:
            eng.stop()

    assert state() == "cold"
    assert state("--mem-fraction-static", "0.8") == "warm"  # not a kernel setting
    assert state(version="0.5.23") == "cold"  # another release, the same FlashInfer folder
    assert state("--kv-cache-dtype", "fp8_e4m3", version="0.5.23") == "cold"
    assert state("--kv-cache-dtype=fp8_e4m3", version="0.5.23") == "warm"
    assert state() == "warm"  # the first build is still there
    marker = json.loads(next(cache.glob("*/*/.test-engine-cache.json")).read_text())
    assert len(marker["builds"]) == 3 and all(b.startswith("sglang0.5.2") for b in marker["builds"])
    assert len(list(cache.glob("*/*/cached_ops/*/*.so"))) == 3


def test_error_rate_gives_http_500_on_a_fraction(engine_factory):
    eng = engine_factory("--engine-fault", "error_rate:0.5", "--engine-instant")
    codes = [
        _req(eng.url + "/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 1}})[0] for _ in range(40)
    ]
    assert set(codes) <= {200, 500} and 5 <= codes.count(500) <= 35


def test_crash_above_writes_sglang_traceback_and_exits(engine_factory):
    eng = engine_factory("--engine-fault", "crash_above:0")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        _req(eng.url + "/generate", {"input_ids": [1], "sampling_params": {"max_new_tokens": 1}}, timeout=5)
    assert eng.proc.wait(timeout=5) != 0
    log = eng.log.read_text()
    assert "AttributeError: 'PrefillMetadata' object has no attribute 'page_table_1_flattened'" in log


def test_bad_engine_fault_is_a_clear_error():
    out = subprocess.run(
        [sys.executable, "-m", "testengine", "--engine-fault", "explode:1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "unknown fault 'explode'" in out.stderr and "Traceback" not in out.stderr


def _timed_batch(url: str, n: int, out_len: int) -> float:
    import concurrent.futures

    body = {"input_ids": [3] * 64, "sampling_params": {"max_new_tokens": out_len}}
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(n) as ex:
        list(ex.map(lambda _: _req(url + "/generate", body), range(n)))
    return n * out_len / (time.monotonic() - t0)


def test_speed_model_single_stream_and_batching(engine_factory):
    eng = engine_factory()
    single = _timed_batch(eng.url, 1, 40)
    assert 25 <= single <= 45  # ~40 tok/s by default (25 ms step), tolerant of CI noise
    batched = _timed_batch(eng.url, 32, 40)
    assert batched > 8 * single  # throughput rises with concurrency


def test_max_running_requests_queues_the_rest(engine_factory):
    eng = engine_factory(
        "--max-running-requests", "4", "--engine-decode-base-ms", "20", "--engine-decode-per-req-ms", "0"
    )
    t_few = 8 / _timed_batch(eng.url, 4, 8)  # seconds for one batch of 4
    t_more = 8 * 8 / _timed_batch(eng.url, 8, 8)
    assert t_more > 1.6 * t_few  # 8 requests with room for 4 run in two waves


@pytest.mark.skipif(not shutil.which("/usr/bin/python3"), reason="no Debian system python")
def test_runs_on_debian_system_python(tmp_path):
    """The test-engine image has only Debian's python3-aiohttp 3.8 / prometheus-client 0.16."""
    probe = subprocess.run(
        ["/usr/bin/python3", "-c", "import aiohttp, prometheus_client, yaml"], capture_output=True, timeout=30
    )
    if probe.returncode != 0:
        pytest.skip("Debian python3-aiohttp/python3-prometheus-client not installed")
    eng = start_engine(tmp_path, "--enable-metrics", python="/usr/bin/python3")
    try:
        st, raw = _req(
            eng.url + "/generate",
            {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 3}, "stream": True},
        )
        assert st == 200 and _sse(raw)[-1] == "[DONE]"
        assert _req(eng.url + "/metrics")[0] == 200
    finally:
        eng.stop()


def test_non_stream_openai_shapes(engine_factory):
    eng = engine_factory("--reasoning-parser", "glm45")
    st, raw = _req(eng.url + "/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 3})
    body = json.loads(raw)
    assert st == 200 and body["object"] == "text_completion" and body["usage"]["completion_tokens"] == 3
    assert body["choices"][0]["finish_reason"] == "length" and body["choices"][0]["text"]
    st, raw = _req(
        eng.url + "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12},
    )
    body = json.loads(raw)
    msg = body["choices"][0]["message"]
    assert st == 200 and body["object"] == "chat.completion" and msg["role"] == "assistant"
    assert msg["content"] and msg["reasoning_content"] and body["usage"]["completion_tokens"] == 12


def test_instant_mode_streams_the_same_shapes_at_once(engine_factory):
    eng = engine_factory("--engine-instant")
    bodies = []
    for _ in range(2):
        st, raw = _req(
            eng.url + "/generate", {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 4}, "stream": True}
        )
        ev = _sse(raw)
        assert st == 200 and ev[-1] == "[DONE]"
        chunks = [json.loads(e) for e in ev[:-1]]
        assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4]
        bodies.append(chunks)
    assert bodies[0][0]["meta_info"]["id"] != bodies[1][0]["meta_info"]["id"]  # cached body, fresh request id
