"""Run single methods of SGLang's real source with stub collaborators (no torch, no GPU).

Importing the modules needs torch and a CUDA stack, so the tests compile just the one
function from the (patched or pristine) file and call it with stand-ins for the objects
it touches. The function body itself is SGLang's code as shipped (plus our patch).
"""

from __future__ import annotations
import __future__

import ast
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock


def load_function(source: str, name: str, namespace: dict[str, Any], filename: str = "<sglang>"):
    """Compile the module-level or class-level ``def name`` found in ``source`` into ``namespace``."""
    tree = ast.parse(source)
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if node is None:
        raise LookupError(f"{name} not found in {filename}")
    module = ast.Module(body=[node], type_ignores=[])
    code = compile(module, filename, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)
    return namespace[name]


@dataclass
class FlashInferPrefillMetadata:
    """Stands in for flashinfer_backend.PrefillMetadata: it has no page_table_1_flattened."""

    prefill_wrappers: list = field(default_factory=list)
    use_ragged: bool = False
    extend_no_prefix: bool = False


class TboAttnBackend:  # never matches: the backend below is not wrapped
    pass


class HybridAttnBackend:
    """Stands in for the wrapper of separate prefill/decode backends (0.5.9-0.5.21): no forward_metadata."""

    kv_index_translator = None


def call_fp8_kv_getter(file: Path, func_name: str, hybrid: bool = False) -> tuple[Any, dict[str, Any]]:
    """Call the FP8 KV getter with a flashinfer-style backend (or a hybrid wrapper); return (result, observations)."""
    seen: dict[str, Any] = {}
    one_shot = object()  # the one-shot KV indices the fallback should use

    def dequant(kv_cache, kv_indices, *args, **kwargs):
        seen["dequant_indices"] = kv_indices
        return mock.MagicMock(name="kv_latent_bf16")

    backend: Any = (
        HybridAttnBackend()
        if hybrid
        else SimpleNamespace(forward_metadata=FlashInferPrefillMetadata(), kv_index_translator=None)
    )

    def fetch():
        seen["fetched_one_shot"] = True
        return one_shot

    forward_batch = SimpleNamespace(
        attn_backend=backend,
        fetch_mha_one_shot_kv_indices=fetch,
        token_to_kv_pool=mock.MagicMock(name="token_to_kv_pool"),
    )
    namespace: dict[str, Any] = {
        "TboAttnBackend": TboAttnBackend,
        "dequantize_k_cache_paged": dequant,
        "dequantize_k_cache_paged_dsa": dequant,
        "resolve_attn_backend": lambda fb: fb.attn_backend,
        "get_attn_backend": lambda: backend,
        "get_token_to_kv_pool": lambda: mock.MagicMock(name="pool"),
        "_use_aiter_gfx95": False,
        "torch": mock.MagicMock(name="torch"),
        "filter_dcp_local_kv_indices": lambda kv_indices: kv_indices,
    }
    func = load_function(file.read_text(encoding="utf-8"), func_name, namespace, str(file))
    layer = SimpleNamespace(kv_lora_rank=512, attn_mha=SimpleNamespace(layer_id=0))
    result = func(layer, forward_batch)
    seen["one_shot"] = one_shot
    return result, seen


def call_should_autotune(file: Path, backend: str) -> bool:
    """ModelRunner._should_run_flashinfer_autotune of 0.5.7-0.5.12 on an sm_120 GPU stub."""
    torch = mock.MagicMock(name="torch")
    torch.cuda.get_device_capability.return_value = (12, 0)
    namespace: dict[str, Any] = {"torch": torch}
    func = load_function(file.read_text(encoding="utf-8"), "_should_run_flashinfer_autotune", namespace, str(file))
    spec = SimpleNamespace(is_eagle=lambda: False, is_standalone=lambda: False, is_ngram=lambda: False)
    runner = SimpleNamespace(
        server_args=SimpleNamespace(
            disable_flashinfer_autotune=False, moe_runner_backend=backend, speculative_moe_runner_backend=None
        ),
        spec_algorithm=spec,
        is_draft_worker=False,
        device="cuda",
    )
    return bool(func(runner))
