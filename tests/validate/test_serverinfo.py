"""Server-info summary: engine detection, radix cache, secrets redacted."""

from __future__ import annotations

from validate.serverinfo import REDACTED, detect_engine, model_name, redact, summarize

SGLANG_INFO = {  # the shape of SGLang 0.5.x /get_server_info (abridged)
    "model_path": "zai-org/GLM-5-NVFP4",
    "served_model_name": "glm-5",
    "tp_size": 8,
    "kv_cache_dtype": "fp8_e4m3",
    "disable_radix_cache": True,
    "attention_backend": "triton",
    "nsa_prefill_backend": "flashmla_sparse",
    "api_key": "sk-live-123",
    "internal_states": [{"last_gen_throughput": 612.5}],
    "version": "0.5.9",
}


def test_real_sglang_is_detected_and_summarized():
    s = summarize(SGLANG_INFO, {"model_path": "zai-org/GLM-5-NVFP4"})
    assert detect_engine(SGLANG_INFO) == "sglang" and s["engine"] == "sglang"
    assert s["tp_size"] == 8 and s["radix_cache"] == "off" and s["kv_cache_dtype"] == "fp8_e4m3"
    assert s["dsa_prefill_backend"] == "flashmla_sparse"  # older releases' nsa_* name
    assert s["last_gen_throughput"] == 612.5 and s["version"] == "0.5.9"


def test_test_engine_and_unknown_are_told_apart():
    assert detect_engine({"version": "test-engine-0.1.0 (not SGLang)", "test_engine": True}) == "test-engine"
    assert detect_engine({"test_engine": True}) == "test-engine"
    assert detect_engine(None) == "unknown" and detect_engine({}) == "unknown"
    assert summarize(None, None)["radix_cache"] is None


def test_secrets_are_redacted_everywhere():
    out = redact({**SGLANG_INFO, "nested": [{"hf_token": "hf_abc", "ok": 1}], "ssl_keyfile_password": "x"})
    assert out["api_key"] == REDACTED and out["nested"][0]["hf_token"] == REDACTED
    assert out["ssl_keyfile_password"] == REDACTED and out["nested"][0]["ok"] == 1
    assert out["tp_size"] == 8
    assert redact({"api_key": None})["api_key"] is None  # nothing to hide


def test_model_name_prefers_v1_models():
    assert model_name(SGLANG_INFO, {"data": [{"id": "glm-5-served"}]}) == "glm-5-served"
    assert model_name(SGLANG_INFO, None) == "glm-5"
    assert model_name(None, None) == "default"
