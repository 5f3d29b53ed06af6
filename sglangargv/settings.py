"""The ``sglang_server_*`` settings that become SGLang's command line: the rules beyond their spec.

A setting's type, choices and default are written once, in roles/sglang_server/meta/argument_specs.yml
and defaults/main.yml, and Ansible enforces them when the role (or its validate step) is included.
What a spec cannot say lives here: ranges, one setting against another, flags that a variable
already owns. Static rules (no host, no image): preflight runs them before any host changes
(preflight/role_rules.py, through the role's validate step) and the renderer (``sglangargv.render``)
runs them again beside the release's flag table. Every message names the inventory variable
(``sglang_server_<key>``) and what it may hold.

The settings arrive as the role hands them over (``roles/sglang_server/vars/main.yml``,
``__sglang_server_settings``): keys without the ``sglang_server_`` prefix, values as Ansible
templated them (an int may be the string ``"8"``, a bool the string ``"true"``).
"""

from __future__ import annotations

from typing import Any

PREFIX = "sglang_server_"
SPECULATIVE_INTS = ("num_steps", "eagle_topk", "num_draft_tokens")

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


def _number(value: Any, kind: type = int) -> Any:
    """A number setting's value as ``kind`` (its type is the argument spec's rule: anything else is None here)."""
    try:
        return kind(str(value).strip())  # None, "", a bool's "True": not a number
    except ValueError:
        return None


def _at_least(
    settings: dict[str, Any], key: str, errors: list[str], minimum: int = 1, maximum: int | None = None
) -> int | None:
    """The setting's value, or None (unset); out of ``minimum``..``maximum``, an error and None."""
    number = _number(settings.get(key))
    upper = f"..{maximum}" if maximum is not None else " or more"
    if number is not None and (number < minimum or (maximum is not None and number > maximum)):
        errors.append(f"{PREFIX}{key} must be in {minimum}{upper}, got {number}")
        return None
    return number


def as_bool(settings: dict[str, Any], key: str) -> bool:
    """A bool setting's value, as Ansible writes truth in templated strings."""
    value = settings.get(key, False)
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("true", "yes", "on", "1")


def check_settings(settings: dict[str, Any], gpu_count: Any = None) -> list[str]:
    """Static checks that need neither the host nor the image: run in preflight."""
    errors: list[str] = []
    if is_empty(settings.get("model_path")):
        errors.append(f"{PREFIX}model_path must be set (a path inside the container or a model id)")
    before = len(errors)
    tp_size = _at_least(settings, "tp_size", errors)
    if tp_size is None and len(errors) == before:  # unset, not out of range
        errors.append(f"{PREFIX}tp_size must be set (1 or more)")
    gpus = _number(gpu_count)
    if tp_size and gpus is not None:
        if gpus < 1:
            errors.append(f"sglang_gpu_count must be 1 or more, got {gpus}")
        elif tp_size > gpus or gpus % tp_size:
            divisors = [d for d in range(1, gpus + 1) if gpus % d == 0]
            errors.append(
                f"{PREFIX}tp_size={tp_size} must divide sglang_gpu_count={gpus}; "
                f"allowed values: {', '.join(map(str, divisors))}"
            )
    _at_least(settings, "port", errors, 1, 65535)
    for key in ("max_running_requests", "chunked_prefill_size", "cuda_graph_max_bs", "stream_interval"):
        _at_least(settings, key, errors)
    fraction = settings.get("mem_fraction_static")
    if _number(fraction, float) is not None and not 0.0 < _number(fraction, float) < 1.0:
        errors.append(f"{PREFIX}mem_fraction_static must be a number in (0, 1), got {fraction!r}")
    if as_bool(settings, "disable_cuda_graph") and not is_empty(settings.get("cuda_graph_max_bs")):
        errors.append(
            f"{PREFIX}cuda_graph_max_bs is set while {PREFIX}disable_cuda_graph is true: "
            "contradictory, unset one of them"
        )
    _check_speculative(settings.get("speculative"), errors)
    extra = settings.get("extra_args") if isinstance(settings.get("extra_args"), list) else []
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
    """sglang_server_speculative: {algorithm, num_steps, eagle_topk, num_draft_tokens, draft_model_path}
    (its keys, their types and the algorithm's choices: the argument spec's options)."""
    var = f"{PREFIX}speculative"
    if not isinstance(spec, dict):
        return
    numbers = {k: spec.get(k) for k in SPECULATIVE_INTS if not is_empty(spec.get(k))}
    for key, value in numbers.items():
        if (_number(value) or 0) < 1:
            errors.append(f"{var}.{key} must be an integer of 1 or more, got {value!r}")
    if is_empty(spec.get("algorithm")) and (numbers or not is_empty(spec.get("draft_model_path"))):
        errors.append(f"{var} sets {', '.join(sorted(numbers)) or 'draft_model_path'} without an algorithm")
