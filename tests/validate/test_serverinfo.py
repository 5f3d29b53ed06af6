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


def test_real_server_info_redacts_exact_secret_names_only():
    """SGLang 0.5.17's real /get_server_info: tokenizer_path and max_*_tokens are not secrets."""
    import json
    from pathlib import Path

    real = json.loads(
        (Path(__file__).resolve().parents[1] / "fixtures/sglang-0.5.17-h200/get_server_info.json").read_text()
    )
    real["api_key"], real["admin_api_key"] = "sk-live", "sk-admin"
    out = redact(real)
    assert out["api_key"] == REDACTED and out["admin_api_key"] == REDACTED
    assert out["tokenizer_path"] == real["tokenizer_path"] and out["max_prefill_tokens"] == real["max_prefill_tokens"]
    assert out["ssl_keyfile_password"] is None  # nothing to hide
    changed = [k for k in real if out[k] != real[k]]
    assert sorted(changed) == ["admin_api_key", "api_key"]
    s = summarize(real, None)
    assert s["engine"] == "sglang" and s["version"] == real["version"] and s["radix_cache"] == "on"
