"""The ``sglang_server_*`` settings that become SGLang's command line: what each may hold.

Static rules only (no host, no image): preflight runs them before any host changes (through the
sglang_server role's validate step) and the renderer (``sglangargv.render``) runs them again
beside the release's flag table. Every message names the inventory variable
(``sglang_server_<key>``) and what it may hold.

The settings arrive as the role hands them over (``roles/sglang_server/vars/main.yml``,
``__sglang_server_settings``): keys without the ``sglang_server_`` prefix, values as Ansible
templated them (an int may still be the string ``"8"``, a bool the string ``"true"``).
"""

from __future__ import annotations

from typing import Any

PREFIX = "sglang_server_"


DSA_BACKENDS = (
    "",
    "flashmla_sparse",
    "flashmla_sparse_q8",
    "flashmla_kv",
    "flashmla_auto",
    "flashinfer_sparse_mla",
    "triton_sparse_mla",
    "fa3",
    "tilelang",
    "trtllm",
)
# sglang_server_speculative.algorithm: SGLang's --speculative-algorithm (NEXTN is its alias of EAGLE
# for a model's own MTP layer, GLM-5's GlmMoeDsaForCausalLMNextN).
SPECULATIVE_ALGORITHMS = ("", "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
SPECULATIVE_INTS = ("num_steps", "eagle_topk", "num_draft_tokens")

# Superset of the values accepted across the SGLang releases we deploy (0.5.9 .. 0.5.23).
CHOICES: dict[str, tuple[str, ...]] = {
    "kv_cache_dtype": ("auto", "fp8_e4m3", "fp8_e5m2", "bf16"),
    "quantization": (
        "",
        "modelopt_fp4",
        "modelopt_fp8",
        "modelopt",
        "fp8",
        "mxfp4",
        "w4afp8",
        "w8a8_fp8",
        "w8a8_int8",
        "awq",
        "gptq",
        "compressed-tensors",
    ),
    "attention_backend": (
        "",
        "triton",
        "flashinfer",
        "fa3",
        "fa4",
        "flashmla",
        "cutlass_mla",
        "trtllm_mla",
        "trtllm_mha",
        "dsa",
        "nsa",
        "torch_native",
    ),
    # (each release's table then says which of these it has: flashinfer_sparse_mla from 0.5.17)
    "dsa_prefill_backend": DSA_BACKENDS,
    "dsa_decode_backend": DSA_BACKENDS,
    "moe_runner_backend": (
        "",
        "auto",
        "triton",
        "triton_kernel",
        "deep_gemm",
        "cutlass",
        "flashinfer_cutlass",
        "flashinfer_trtllm",
        "flashinfer_mxfp4",
        "flashinfer_cutedsl",
    ),
    "radix_cache": ("auto", "enabled", "disabled"),
}

# Flags a structured variable owns: putting them in extra_args as well is contradictory.
MANAGED_FLAGS: dict[str, str] = {
    "--model-path": "model_path",
    "--model": "model_path",
    "--served-model-name": "served_model_name",
    "--tp-size": "tp_size",
    "--tp": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--quantization": "quantization",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--attention-backend": "attention_backend",
    "--nsa-prefill-backend": "dsa_prefill_backend",
    "--dsa-prefill-backend": "dsa_prefill_backend",
    "--nsa-decode-backend": "dsa_decode_backend",
    "--dsa-decode-backend": "dsa_decode_backend",
    "--moe-runner-backend": "moe_runner_backend",
    "--max-running-requests": "max_running_requests",
    "--mem-fraction-static": "mem_fraction_static",
    "--chunked-prefill-size": "chunked_prefill_size",
    "--cuda-graph-max-bs": "cuda_graph_max_bs",
    "--cuda-graph-max-bs-decode": "cuda_graph_max_bs",
    "--disable-cuda-graph": "disable_cuda_graph",
    "--enable-metrics": "enable_metrics",
    "--host": "listen_host",
    "--port": "port",
    "--trust-remote-code": "trust_remote_code",
    "--reasoning-parser": "reasoning_parser",
    "--tool-call-parser": "tool_call_parser",
    "--disable-custom-all-reduce": "disable_custom_all_reduce",
    "--disable-shared-experts-fusion": "disable_shared_experts_fusion",
    "--enable-flashinfer-allreduce-fusion": "enable_flashinfer_allreduce_fusion",
    "--stream-interval": "stream_interval",
    "--disable-radix-cache": "radix_cache",
    "--disable-chunked-prefix-cache": "radix_cache",
    "--flashinfer-allreduce-fusion-backend": "enable_flashinfer_allreduce_fusion",
    "--api-key": "api_key",
    "--speculative-algorithm": "speculative",
    "--speculative-num-steps": "speculative",
    "--speculative-eagle-topk": "speculative",
    "--speculative-num-draft-tokens": "speculative",
    "--speculative-draft-model-path": "speculative",
}


def is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _as_int(
    settings: dict[str, Any], key: str, errors: list[str], minimum: int = 1, maximum: int | None = None
) -> int | None:
    value = settings.get(key)
    if is_empty(value):
        return None
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(str(value).strip())
    except ValueError:
        errors.append(f"{PREFIX}{key} must be an integer, got {value!r}")
        return None
    upper = f"..{maximum}" if maximum is not None else " or more"
    if number < minimum or (maximum is not None and number > maximum):
        errors.append(f"{PREFIX}{key} must be in {minimum}{upper}, got {number}")
        return None
    return number


def as_bool(settings: dict[str, Any], key: str, errors: list[str]) -> bool:
    value = settings.get(key, False)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0", "", "none"):
        return False
    errors.append(f"{PREFIX}{key} must be true or false, got {value!r}")
    return False


def _choice(settings: dict[str, Any], key: str, errors: list[str]) -> str:
    value = "" if is_empty(settings.get(key)) else str(settings.get(key)).strip()
    allowed = CHOICES[key]
    if value not in allowed:
        shown = ", ".join(repr(v) if v == "" else v for v in allowed)
        errors.append(f"{PREFIX}{key} must be one of: {shown}; got {value!r}")
    return value


def check_settings(settings: dict[str, Any], gpu_count: Any = None) -> list[str]:
    """Static checks that need neither the host nor the image: run in preflight."""
    errors: list[str] = []
    if is_empty(settings.get("model_path")):
        errors.append(f"{PREFIX}model_path must be set (a path inside the container or a model id)")
    for key in CHOICES:
        _choice(settings, key, errors)
    tp_size = _as_int(settings, "tp_size", errors)
    if tp_size is None and not any("tp_size" in e for e in errors):
        errors.append(f"{PREFIX}tp_size must be set (1 or more)")
    gpus: int | None = None
    try:
        gpus = None if is_empty(gpu_count) else int(str(gpu_count))
    except ValueError:
        errors.append(f"sglang_gpu_count must be an integer, got {gpu_count!r}")
    if tp_size and gpus is not None:
        if gpus < 1:
            errors.append(f"sglang_gpu_count must be 1 or more, got {gpus}")
        elif tp_size > gpus or gpus % tp_size:
            divisors = [d for d in range(1, gpus + 1) if gpus % d == 0]
            errors.append(
                f"{PREFIX}tp_size={tp_size} must divide sglang_gpu_count={gpus}; "
                f"allowed values: {', '.join(map(str, divisors))}"
            )
    _as_int(settings, "port", errors, 1, 65535)
    for key in ("max_running_requests", "chunked_prefill_size", "cuda_graph_max_bs", "stream_interval"):
        _as_int(settings, key, errors)
    fraction = settings.get("mem_fraction_static")
    if not is_empty(fraction):
        try:
            value = float(str(fraction))
            if not 0.0 < value < 1.0:
                raise ValueError
        except ValueError:
            errors.append(f"{PREFIX}mem_fraction_static must be a number in (0, 1), got {fraction!r}")
    for key in (
        "disable_cuda_graph",
        "enable_metrics",
        "trust_remote_code",
        "disable_custom_all_reduce",
        "disable_shared_experts_fusion",
        "enable_flashinfer_allreduce_fusion",
    ):
        as_bool(settings, key, errors)
    if as_bool(settings, "disable_cuda_graph", []) and not is_empty(settings.get("cuda_graph_max_bs")):
        errors.append(
            f"{PREFIX}cuda_graph_max_bs is set while {PREFIX}disable_cuda_graph is true: "
            "contradictory, unset one of them"
        )
    _check_speculative(settings.get("speculative"), errors)
    as_bool(settings, "pcie_ipc_allreduce", errors)
    extra = settings.get("extra_args") or []
    if not isinstance(extra, list) or not all(isinstance(a, str | int | float) for a in extra):
        errors.append(f"{PREFIX}extra_args must be a list of strings, got {extra!r}")
    else:
        for arg in extra:
            flag = str(arg).split("=", 1)[0]
            owner = MANAGED_FLAGS.get(flag)
            if owner == "radix_cache":
                errors.append(
                    f"{PREFIX}extra_args contains {flag}: use {PREFIX}radix_cache "
                    "(auto | enabled | disabled) instead, so it cannot contradict the patch record"
                )
            elif owner:
                errors.append(f"{PREFIX}extra_args contains {flag}, which {PREFIX}{owner} already controls")
    return errors


def _check_speculative(spec: Any, errors: list[str]) -> None:
    """sglang_server_speculative: {algorithm, num_steps, eagle_topk, num_draft_tokens, draft_model_path}."""
    var = f"{PREFIX}speculative"
    if spec in (None, "", {}):
        return
    if not isinstance(spec, dict):
        errors.append(f"{var} must be a mapping (algorithm, num_steps, eagle_topk, num_draft_tokens), got {spec!r}")
        return
    unknown = sorted(set(spec) - {"algorithm", *SPECULATIVE_INTS, "draft_model_path"})
    if unknown:
        errors.append(
            f"{var} has unknown keys {unknown}: allowed algorithm, num_steps, eagle_topk, num_draft_tokens, "
            "draft_model_path"
        )
    algorithm = "" if is_empty(spec.get("algorithm")) else str(spec.get("algorithm")).strip()
    if algorithm not in SPECULATIVE_ALGORITHMS:
        errors.append(f"{var}.algorithm must be one of: '', {', '.join(SPECULATIVE_ALGORITHMS[1:])}; got {algorithm!r}")
    numbers = {k: spec.get(k) for k in SPECULATIVE_INTS if not is_empty(spec.get(k))}
    for key, value in numbers.items():
        if isinstance(value, bool) or not str(value).strip().isdigit() or int(str(value)) < 1:
            errors.append(f"{var}.{key} must be an integer of 1 or more, got {value!r}")
    if not algorithm and (numbers or not is_empty(spec.get("draft_model_path"))):
        errors.append(f"{var} sets {', '.join(sorted(numbers)) or 'draft_model_path'} without an algorithm")
