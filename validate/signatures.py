"""Crash signatures: the texts SGLang, PyTorch, NCCL and the NVIDIA driver really print.

Each pattern was read from the released sources of the SGLang versions we deploy
(PyPI wheels 0.5.9, 0.5.12, 0.5.17, 0.5.20, 0.5.23) or from real server logs
(tests/fixtures/sglang-0.5.17-h200). The tests feed each signature a line copied from
those sources, and the recorded clean start-up logs must match none of them (SGLang
logs "All-reduce call path: NCCL" on every healthy start, so a bare "NCCL" is no
crash). Where a text changed between releases, both wordings are here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .userregex import Pattern, compile_builtin, compile_user_regex


@dataclass(frozen=True)
class Signature:
    name: str
    pattern: str
    meaning: str


BUILTIN: tuple[Signature, ...] = (
    Signature(
        "page_table_1_flattened",
        # AttributeError: 0.5.6-0.5.23 reading forward_metadata of a flashinfer PrefillMetadata;
        # AssertionError message: forward_mha.py "should have been generated for FP8 MHA path";
        # bare AssertionError: the traceback shows dsa_backend.py/nsa_backend.py's source line.
        r"AttributeError: .*'page_table_1_flattened'"
        r"|page_table_1_flattened should have been generated"
        r"|assert page_table_1_flattened is not None",
        "DSA + FP8 KV cache prefill reached the MHA path without its page table (see images/patches)",
    ),
    Signature(
        "nan_in_decode",
        # <= 0.5.16 sampler.py: "Detected errors during sampling! NaN in the logits." (warning, then ValueError);
        # >= 0.5.17 utils/async_probe.py: "NaN detected in %s; values were sanitized before sampling." and
        # the async assert "NaN detected! <msg>"; the finish reason SGLang sets: "NaN happened".
        r"NaN in the logits|NaN detected(?: in |!)|NaN happened",
        "NaN logits: the model or a kernel produced NaN",
    ),
    Signature(
        "invalid_probabilities",
        # torch.multinomial: "probability tensor contains either `inf`, `nan` or element < 0"
        r"probability tensor contains either .?inf.?, .?nan.? or element < 0",
        "sampling got inf/NaN/negative probabilities",
    ),
    Signature(
        "cuda_error",
        r"CUDA error: |CUDA_ERROR_[A-Z_]+|cudaError[A-Z][A-Za-z]+|illegal memory access was encountered"
        r"|device-side assert triggered",
        "a CUDA kernel failed (illegal memory access, device-side assert, ...)",
    ),
    Signature(
        "nccl_error",
        r"NCCL error|nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidUsage|RemoteError)"
        r"|Watchdog caught collective operation timeout|ProcessGroupNCCL.{0,80}(?:timed out|timeout)",
        "a collective failed or timed out (tensor-parallel all-reduce)",
    ),
    Signature(
        "oom",
        r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError:|cudaErrorMemoryAllocation"
        r"|Not enough memory\. Please try to increase --mem-fraction-static",
        "GPU memory exhausted",
    ),
    Signature(
        "xid",
        # kernel log: "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus."
        r"NVRM: Xid \(",
        "the NVIDIA driver reported an Xid error",
    ),
    Signature(
        "scheduler_exception",
        # scheduler.py / tokenizer_manager.py / detokenizer_manager.py / data_parallel_controller.py:
        # logger.error(f"<Component> hit an exception: {traceback}"); engine.py on a dead child.
        # (names spelled out: an unbounded \w+ before a literal backtracks quadratically on a long line)
        r"(?:Scheduler|TokenizerManager|DetokenizerManager|DataParallelController"
        r"|MultiTokenizerRouter|MultiDetokenizerRouter) hit an exception"
        r"|Received sigquit from a child process",
        "an SGLang process died",
    ),
)

GENERIC = "scheduler_exception"  # precedes the specific error in a traceback: report the specific one


def compile_all(extra: dict[str, str] | None = None) -> list[tuple[str, Pattern]]:
    """Built-in signatures then the config's ``extra_signatures`` (RE2: a user's pattern cannot hang the scan)."""
    builtin = [(s.name, compile_builtin(s.pattern)) for s in BUILTIN]
    return builtin + [(name, compile_user_regex(p)) for name, p in (extra or {}).items()]
