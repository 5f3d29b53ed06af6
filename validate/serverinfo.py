"""What is running: a summary of /get_server_info and /get_model_info, secrets redacted."""

from __future__ import annotations

from typing import Any

# Exact names, not substrings: SGLang's server args hold tokenizer_path, max_prefill_tokens,
# max_total_tokens, ... which are not secrets. These are the secret-carrying args of SGLang
# 0.5.9-0.5.23 (api_key, admin_api_key, ssl_keyfile_password) and the usual credential names.
SECRET_KEYS = frozenset(
    {
        "api_key",
        "admin_api_key",
        "ssl_keyfile_password",
        "hf_token",
        "huggingface_token",
        "token",
        "access_token",
        "auth_token",
        "secret",
        "secret_key",
        "password",
        "passwd",
        "authorization",
        "aws_secret_access_key",
        "openai_api_key",
    }
)
REDACTED = "***redacted***"

TEST_ENGINE_NOTE = (
    "These figures come from the SGLang-compatible TEST ENGINE (CI, no GPU), not from SGLang: "
    "they prove the gate and the rollout work, never the model's speed."
)


def redact(obj: Any) -> Any:
    """Copy of ``obj`` with values of secret-looking keys replaced (server args carry api_key)."""
    if isinstance(obj, dict):
        return {
            k: (REDACTED if str(k).lower() in SECRET_KEYS and v not in (None, "") else redact(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def detect_engine(server_info: dict[str, Any] | None) -> str:
    """'test-engine' when the server says so, 'sglang' for a real SGLang answer, else 'unknown'."""
    if not server_info:
        return "unknown"
    version = str(server_info.get("version", ""))
    if server_info.get("test_engine") is True or "test-engine" in version or "test engine" in version:
        return "test-engine"
    if version:
        return "sglang"
    return "unknown"


def summarize(server_info: dict[str, Any] | None, model_info: dict[str, Any] | None) -> dict[str, Any]:
    """The fields an operator wants in the report; missing ones are None, never guessed."""
    si = server_info or {}
    mi = model_info or {}
    states = si.get("internal_states") or [{}]
    state0 = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    radix = si.get("disable_radix_cache")
    te = si.get("test_engine_info") or {}
    return {
        "engine": detect_engine(server_info),
        "version": si.get("version"),
        "model_path": si.get("model_path") or mi.get("model_path"),
        "served_model_name": si.get("served_model_name") or mi.get("served_model_name"),
        "tp_size": si.get("tp_size"),
        "dp_size": si.get("dp_size"),
        "radix_cache": None if radix is None else ("off" if radix else "on"),
        "kv_cache_dtype": si.get("kv_cache_dtype"),
        "quantization": si.get("quantization"),
        "attention_backend": si.get("attention_backend"),
        "moe_runner_backend": si.get("moe_runner_backend"),
        "dsa_prefill_backend": si.get("dsa_prefill_backend") or si.get("nsa_prefill_backend"),
        "dsa_decode_backend": si.get("dsa_decode_backend") or si.get("nsa_decode_backend"),
        "max_running_requests": si.get("max_running_requests"),
        "cuda_graph_max_bs": si.get("cuda_graph_max_bs") or si.get("cuda_graph_max_bs_decode"),
        "chunked_prefill_size": si.get("chunked_prefill_size"),
        "mem_fraction_static": si.get("mem_fraction_static"),
        "reasoning_parser": si.get("reasoning_parser") or mi.get("reasoning_parser"),
        "last_gen_throughput": state0.get("last_gen_throughput"),
        "flashinfer_cache": te.get("flashinfer_cache"),
        "test_engine_faults": te.get("faults"),
    }


def model_name(server_info: dict[str, Any] | None, models: dict[str, Any] | None) -> str:
    """The model id to send in OpenAI requests: /v1/models first, then server args."""
    data = (models or {}).get("data") or []
    if data and isinstance(data[0], dict) and data[0].get("id"):
        return str(data[0]["id"])
    si = server_info or {}
    return str(si.get("served_model_name") or si.get("model_path") or "default")


# Server-info fields that change at every start of a server and at no other time: SGLang draws
# ``random_seed`` at start-up when none is given (ServerArgs.__post_init__) and reports its own
# ``startup_time`` timings (0.5.17: a dict of floats; the test engine: its start time); ``pid``
# where a release reports one. Read at the start and after every phase (validate/gate.py).
IDENTITY_KEYS = ("pid", "random_seed", "startup_time")


def identity(server_info: dict[str, Any]) -> dict[str, Any]:
    """The start-dependent facts of a server info (only those present)."""
    return {k: server_info[k] for k in IDENTITY_KEYS if server_info.get(k) is not None}


def served_names(
    server_info: dict[str, Any] | None, model_info: dict[str, Any] | None, models: dict[str, Any] | None
) -> list[str]:
    """Every name the server says it serves: served_model_name, model_path and the /v1/models ids."""
    si, mi = server_info or {}, model_info or {}
    names = [si.get("served_model_name"), si.get("model_path"), mi.get("served_model_name"), mi.get("model_path")]
    names += [m.get("id") for m in (models or {}).get("data") or [] if isinstance(m, dict)]
    return list(dict.fromkeys(str(n) for n in names if n))
