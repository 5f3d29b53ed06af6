# ruff: noqa: E501  (verbatim log text: long lines are the point)
"""Crash texts the test engine writes to stderr, shaped like SGLang/PyTorch/NCCL output.

They let CI prove the gate's log scan finds the real thing. The page_table text is
the traceback SGLang releases before the attribute guard print when a DSA model with
an FP8 KV cache reaches the MHA one-shot prefill path on the flashinfer backend
(docs/gate-sglang-facts.md: ``_get_mla_kv_buffer_from_fp8_for_nsa`` in forward_mha.py). Every
text carries a line saying the test engine wrote it, so nobody mistakes a CI log for
a production crash.
"""

from __future__ import annotations

import time

_TAG = "[test-engine] simulated fault output follows (written by the test engine, not SGLang)"


def _stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def page_table_traceback() -> str:
    """SGLang's scheduler crash for the missing ``page_table_1_flattened`` attribute."""
    return f"""{_TAG}
[{_stamp()} TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2850, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py", line 120, in decorate_context
    return func(*args, **kwargs)
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1001, in event_loop_overlap
    batch_result = self.run_batch(batch)
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1893, in forward
    output = self._forward_raw(
  File "/sgl-workspace/sglang/python/sglang/srt/models/deepseek_v2.py", line 1379, in forward_prepare
    inner_state = self.forward_normal_one_shot_prepare(
  File "/sgl-workspace/sglang/python/sglang/srt/models/deepseek_common/attention_forward_methods/forward_mha.py", line 211, in forward_normal_one_shot_prepare
    kv_a, k_pe = self._get_mla_kv_buffer_from_fp8_for_nsa(forward_batch)
  File "/sgl-workspace/sglang/python/sglang/srt/models/deepseek_common/attention_forward_methods/forward_mha.py", line 598, in _get_mla_kv_buffer_from_fp8_for_nsa
    kv_indices = forward_batch.attn_backend.forward_metadata.page_table_1_flattened
AttributeError: 'PrefillMetadata' object has no attribute 'page_table_1_flattened'

[{_stamp()}] Received sigquit from a child process. It usually means the child failed.
"""


def cuda_error() -> str:
    return f"""{_TAG}
[{_stamp()} TP3] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 771, in replay
    self.graphs[self.bs].replay()
RuntimeError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
"""


def nccl_error() -> str:
    return f"""{_TAG}
[{_stamp()} TP5] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/distributed/parallel_state.py", line 512, in all_reduce
    torch.distributed.all_reduce(input_, group=self.device_group)
torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3
ncclUnhandledCudaError: Call to CUDA function failed.
"""


def oom_error() -> str:
    return f"""{_TAG}
[{_stamp()} TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1893, in forward
    output = self._forward_raw(
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 94.97 GiB of which 1.12 GiB is free.
"""


def nan_warning() -> str:
    return f"""{_TAG}
[{_stamp()} TP0] Detected errors during sampling! NaN in the logits.
"""


SIGNATURES = {
    "page_table": page_table_traceback,
    "cuda": cuda_error,
    "nccl": nccl_error,
    "oom": oom_error,
    "nan": nan_warning,
}
