"""Measure what FlashInfer's on-disk cache holds and what it saves at start-up.

Why this exists: the bundle persists ``/root/.cache/flashinfer`` on every GPU host
on the claim that it makes restarts fast. This script checks that claim with real
FlashInfer on a real GPU. It runs the FlashInfer operations that SGLang touches at
start-up (and that run on the GPU at hand), each time in a fresh Python process
with ``HOME`` pointed at a private folder so that *every* cache lands somewhere we
can list:

* ``cold``    - empty HOME: first use of each op (JIT build, load, autotune);
* ``warm``    - same HOME, new process: what a restart with the cache kept costs;
* ``deleted`` - ``HOME/.cache/flashinfer`` removed, other caches kept: a restart
  after the cache volume was lost;
* ``heavy_*`` - optional: the CUTLASS fused-MoE module (huge JIT build) with its
  autotuner, cold then warm, in whatever time budget is left.

After each phase it lists every file under HOME (path, size, category) so the
result says which sub-directories hold JIT objects, libraries, build files,
generated sources, cubins and tuning data. A probe records which environment
variables move which directory. Results go to one JSON file; a compact table is
printed last.

Entry point (on the GPU machine)::

    python3 benchmarks/flashinfer_cache.py --out result.json [--budget-s 540]

Only this script's own stdlib code runs in the parent process; torch and
flashinfer are imported in the worker subprocesses, so the CPU-only parts
(inventory, classification, ratios, summary) can be tested without a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

# Variables that move a cache somewhere else. The worker runs with all of them unset
# (so everything lands under HOME); the probe sets them one at a time.
CACHE_ENV_VARS = (
    "FLASHINFER_WORKSPACE_BASE",
    "FLASHINFER_CUBIN_DIR",
    "FLASHINFER_CUDA_ARCH_LIST",
    "FLASHINFER_DISABLE_JIT",
    "FLASHINFER_AUTOTUNER_LOAD_FROM_FILE",
    "TVM_FFI_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "CUDA_CACHE_PATH",
    "XDG_CACHE_HOME",
    "SGLANG_CACHE_DIR",
    "MAX_JOBS",
)

LIGHT_OPS = ("sampling_top_k_top_p", "prefill_ragged_192x128", "mla_paged_decode", "bmm_fp8_autotune")
HEAVY_OPS = ("cutlass_fused_moe_bf16_autotune",)

# What SGLang uses each op for (recorded in the result so the figure says what it covers).
OP_NOTES = {
    "sampling_top_k_top_p": "flashinfer.sampling.top_k_top_p_sampling_from_probs: SGLang's default "
    "sampler (sampling_backend=flashinfer), first hit by the start-up warm-up request",
    "prefill_ragged_192x128": "BatchPrefillWithRaggedKVCacheWrapper, qk 192 / vo 128, causal, bf16, "
    "backend=auto: the MHA prefill of SGLang's flashinfer_mla backend for DeepSeek-V3-style models",
    "mla_paged_decode": "BatchMLAPagedAttentionWrapper, ckv 512 / kpe 64, page_size 1, bf16, "
    "backend=auto: SGLang's flashinfer_mla decode (and paged prefill) path",
    "bmm_fp8_autotune": "flashinfer.bmm_fp8 (cuBLASLt runner) under flashinfer.autotune(): the FP8 "
    "GEMM entry that goes through FlashInfer's AutoTuner on Hopper",
    "cutlass_fused_moe_bf16_autotune": "flashinfer.fused_moe.cutlass_fused_moe, bf16, SM90 CUTLASS "
    "module, under flashinfer.autotune(): SGLang's flashinfer_cutlass MoE runner (NVFP4 on Blackwell "
    "uses the same module family; NVFP4 kernels cannot run on Hopper)",
}


# --------------------------------------------------------------------------- results


@dataclass
class FileEntry:
    """One file under the measured HOME (path relative to HOME)."""

    path: str
    size: int
    category: str


@dataclass
class OpResult:
    """First and second call of one op inside one worker process."""

    op: str
    ok: bool
    first_call_s: float | None = None
    second_call_s: float | None = None
    build_s: float | None = None
    autotune_s: float | None = None
    rel_err: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass
class PhaseResult:
    """One worker process: what it cost and what it left on disk."""

    name: str
    ops: list[str]
    wall_s: float
    returncode: int | None
    timed_out: bool
    import_s: float | None
    op_results: list[OpResult]
    files_before: int
    files_added: int
    bytes_added: int
    files_removed: int
    by_category_after: dict[str, dict[str, int]]
    stderr_tail: str = ""
    skipped: str | None = None


# --------------------------------------------------------------------------- inventory


def classify(relpath: str) -> str:
    """Name the role of a cache file from its path relative to HOME.

    The layout is FlashInfer 0.6's: ``.cache/flashinfer/<ver>/<arch>/cached_ops/<module>/``
    holds ninja's objects and the module's ``.so``; ``.../generated/`` holds generated
    sources; ``.cache/flashinfer/cubins/`` downloaded cubins; tvm-ffi keeps its torch
    DLPack addon in ``.cache/tvm-ffi``. Anything else is named by its top folder.
    """
    parts = Path(relpath).parts
    name = parts[-1] if parts else ""
    if len(parts) >= 2 and parts[0] == ".cache" and parts[1] == "flashinfer":
        if "cubins" in parts:
            return "flashinfer_cubins"
        if "generated" in parts:
            return "flashinfer_generated_sources"
        if "cached_ops" in parts:
            if "tmp" in parts or name.endswith(".lock"):
                return "flashinfer_locks"
            if name.endswith(".so"):
                return "flashinfer_jit_library"
            if name.endswith(".o"):
                return "flashinfer_jit_object"
            if name in {"build.ninja", ".ninja_log", ".ninja_deps"} or name.endswith(".d"):
                return "flashinfer_build_files"
            return "flashinfer_cached_ops_other"
        if "autotune" in parts or name.endswith(".json"):
            return "flashinfer_tuning"
        return "flashinfer_other"
    if len(parts) >= 2 and parts[0] == ".cache":
        return {
            "tvm-ffi": "tvm_ffi_addon",
            "sglang": "sglang_cache",
            "torch": "torch_cache",
        }.get(parts[1], f"cache_{parts[1]}")
    if parts and parts[0] == ".triton":
        return "triton_cache"
    if len(parts) >= 2 and parts[0] == ".nv" and parts[1] == "ComputeCache":
        return "cuda_ptx_jit_cache"
    return f"other_{parts[0]}" if parts else "other"


def inventory(root: Path) -> list[FileEntry]:
    """List every regular file under ``root`` (symlinks are not followed)."""
    entries: list[FileEntry] = []
    if not root.is_dir():
        return entries
    for dirpath, _dirs, files in os.walk(root):
        for fname in files:
            full = Path(dirpath) / fname
            with contextlib.suppress(OSError):
                if full.is_symlink() or not full.is_file():
                    continue
                rel = full.relative_to(root).as_posix()
                entries.append(FileEntry(rel, full.stat().st_size, classify(rel)))
    entries.sort(key=lambda e: e.path)
    return entries


def by_category(entries: Iterable[FileEntry]) -> dict[str, dict[str, int]]:
    """Files and bytes per category."""
    out: dict[str, dict[str, int]] = {}
    for e in entries:
        slot = out.setdefault(e.category, {"files": 0, "bytes": 0})
        slot["files"] += 1
        slot["bytes"] += e.size
    return dict(sorted(out.items()))


def by_directory(entries: Iterable[FileEntry], depth: int = 6) -> dict[str, dict[str, int]]:
    """Files and bytes per directory, cut at ``depth`` path components.

    Depth 6 reaches ``.cache/flashinfer/<ver>/<arch>/cached_ops/<module>``, which is
    what the cache role needs to see: one line per JIT module.
    """
    out: dict[str, dict[str, int]] = {}
    for e in entries:
        parent = Path(e.path).parent.parts[:depth]
        key = "/".join(parent) if parent else "."
        slot = out.setdefault(key, {"files": 0, "bytes": 0})
        slot["files"] += 1
        slot["bytes"] += e.size
    return dict(sorted(out.items()))


def diff(before: list[FileEntry], after: list[FileEntry]) -> tuple[list[FileEntry], list[str]]:
    """Files that appeared or changed size, and paths that disappeared."""
    old = {e.path: e.size for e in before}
    new_paths = {e.path for e in after}
    added = [e for e in after if old.get(e.path) != e.size]
    removed = sorted(p for p in old if p not in new_paths)
    return added, removed


def ninja_progress(build_dir: Path) -> dict[str, int]:
    """How many of a module's objects ninja has produced (for a build cut off by a timeout)."""
    ninja = build_dir / "build.ninja"
    if not ninja.is_file():
        return {"objects_planned": 0, "objects_built": 0}
    planned = 0
    built = 0
    for line in ninja.read_text(errors="replace").splitlines():
        if line.startswith("build ") and ":" in line:
            target = line[len("build ") :].split(":", 1)[0].strip()
            if target.endswith(".o"):
                planned += 1
                if Path(target).is_file() or (build_dir / target).is_file():
                    built += 1
    return {"objects_planned": planned, "objects_built": built}


# --------------------------------------------------------------------------- ratios / report


def ratios(phases: list[PhaseResult], base: str = "cold", other: str = "warm") -> dict[str, Any]:
    """Cold-over-warm ratio of each op's first call and of the summed first calls.

    Only ops that succeeded in both phases count; ``None`` where a ratio is undefined.
    """
    by_name = {p.name: p for p in phases}
    if base not in by_name or other not in by_name:
        return {}
    a = {r.op: r for r in by_name[base].op_results if r.ok and r.first_call_s is not None}
    b = {r.op: r for r in by_name[other].op_results if r.ok and r.first_call_s is not None}
    common = [op for op in a if op in b]
    per_op: dict[str, dict[str, float | None]] = {}
    for op in common:
        ca, cb = a[op].first_call_s or 0.0, b[op].first_call_s or 0.0
        per_op[op] = {
            f"{base}_s": round(ca, 4),
            f"{other}_s": round(cb, 4),
            "ratio": round(ca / cb, 1) if cb > 0 else None,
            "saved_s": round(ca - cb, 3),
        }
    sa = sum(a[op].first_call_s or 0.0 for op in common)
    sb = sum(b[op].first_call_s or 0.0 for op in common)
    wa, wb = by_name[base].wall_s, by_name[other].wall_s
    return {
        "ops": per_op,
        "sum_first_calls": {
            f"{base}_s": round(sa, 3),
            f"{other}_s": round(sb, 3),
            "ratio": round(sa / sb, 1) if sb > 0 else None,
        },
        "process_wall": {
            f"{base}_s": round(wa, 2),
            f"{other}_s": round(wb, 2),
            "ratio": round(wa / wb, 2) if wb > 0 else None,
        },
    }


def _fmt(v: float | None, unit: str = "s") -> str:
    return "-" if v is None else f"{v:.3f}{unit}" if v < 10 else f"{v:.1f}{unit}"


def render_summary(result: dict[str, Any]) -> str:
    """A compact plain-text table of the result (what the device call prints last)."""
    lines = []
    host = result.get("host", {})
    lines.append(
        f"FlashInfer cache benchmark {result.get('date', '?')}: flashinfer {host.get('flashinfer')}, "
        f"torch {host.get('torch')}, CUDA {host.get('torch_cuda')} (nvcc {host.get('nvcc')}), "
        f"{host.get('gpu')} sm_{host.get('compute_capability')}"
    )
    phases = [p for p in result.get("phases", []) if not p.get("skipped")]
    names = [p["name"] for p in phases]
    ops: list[str] = []
    for p in phases:
        for r in p["op_results"]:
            if r["op"] not in ops:
                ops.append(r["op"])
    width = max([len(o) for o in ops] + [10])
    lines.append(f"{'first call':<{width}} " + " ".join(f"{n:>13}" for n in names))
    for op in ops:
        cells = []
        for p in phases:
            r = next((x for x in p["op_results"] if x["op"] == op), None)
            if r is None:
                cells.append(f"{'':>13}")
            elif not r["ok"]:
                cells.append(f"{'FAILED':>13}")
            else:
                cells.append(f"{_fmt(r['first_call_s']):>13}")
        lines.append(f"{op:<{width}} " + " ".join(cells))
    lines.append(f"{'process wall':<{width}} " + " ".join(f"{_fmt(p['wall_s']):>13}" for p in phases))
    lines.append(f"{'files added':<{width}} " + " ".join(f"{p['files_added']:>13}" for p in phases))
    for key, label in (("cold_vs_warm", "cold/warm"), ("heavy_cold_vs_warm", "heavy cold/warm")):
        r = result.get("ratios", {}).get(key) or {}
        s = r.get("sum_first_calls")
        if s:
            lines.append(
                f"{label}: first calls {s.get('ratio') or '-'}x, process wall {r['process_wall'].get('ratio') or '-'}x"
            )
    inv = result.get("inventory", {}).get("by_category", {})
    if inv:
        lines.append(
            "cache on disk: " + ", ".join(f"{k} {v['files']} files {v['bytes'] / 1e6:.1f} MB" for k, v in inv.items())
        )
    for p in result.get("phases", []):
        if p.get("skipped"):
            lines.append(f"phase {p['name']} skipped: {p['skipped']}")
        elif p.get("timed_out") or p.get("returncode") != 0:
            last = (p.get("stderr_tail") or "").strip().splitlines()[-1:] or [""]
            lines.append(f"phase {p['name']}: rc={p.get('returncode')} timed_out={p.get('timed_out')}: {last[0][:300]}")
        for r in p.get("op_results", []):
            if not r["ok"]:
                lines.append(f"{p['name']}/{r['op']} failed: {(r.get('error') or '')[:300]}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- worker (GPU)


def _sync_timer(torch: Any) -> Callable[[], float]:
    def now() -> float:
        torch.cuda.synchronize()
        return time.perf_counter()

    return now


def _rel_err(torch: Any, out: Any, ref: Any) -> float:
    out64, ref64 = out.double(), ref.double()
    if not bool(torch.isfinite(out64).all()):
        return float("inf")
    return float((out64 - ref64).norm() / ref64.norm().clamp_min(1e-30))


def _op_sampling(torch: Any, fi: Any, now: Callable[[], float]) -> OpResult:
    batch, vocab, k = 64, 151552, 50
    gen = torch.Generator(device="cuda").manual_seed(1234)
    logits = torch.randn(batch, vocab, device="cuda", generator=gen)
    probs = torch.softmax(logits, dim=-1)
    top_k = torch.full((batch,), k, device="cuda", dtype=torch.int32)
    top_p = torch.full((batch,), 0.9, device="cuda", dtype=torch.float32)

    def call() -> Any:
        return fi.sampling.top_k_top_p_sampling_from_probs(probs, top_k, top_p, filter_apply_order="joint")

    t0 = now()
    samples = call()
    t1 = now()
    samples2 = call()
    t2 = now()
    allowed = torch.topk(probs, k, dim=-1).indices
    inside = (allowed == samples.long().unsqueeze(-1)).any(dim=-1) & (allowed == samples2.long().unsqueeze(-1)).any(
        dim=-1
    )
    ok = bool(inside.all())
    return OpResult(
        "sampling_top_k_top_p",
        ok,
        t1 - t0,
        t2 - t1,
        detail={
            "batch": batch,
            "vocab": vocab,
            "top_k": k,
            "in_top_k_fraction": float(inside.float().mean()),
        },
        error=None if ok else "a sample fell outside the top-k set",
    )


def _attention_ref(torch: Any, q: Any, k: Any, v: Any, scale: float, causal: bool) -> Any:
    """Float64 reference of one request: q [m,h,dq], k [n,h,dq], v [n,h,dv]."""
    qf, kf, vf = q.double(), k.double(), v.double()
    s = torch.einsum("mhd,nhd->hmn", qf, kf) * scale
    if causal:
        m, n = q.shape[0], k.shape[0]
        mask = torch.ones(m, n, dtype=torch.bool, device=q.device).tril(diagonal=n - m)
        s = s.masked_fill(~mask, float("-inf"))
    return torch.einsum("hmn,nhd->mhd", torch.softmax(s, dim=-1), vf)


def _op_prefill_ragged(torch: Any, fi: Any, now: Callable[[], float]) -> OpResult:
    heads, dqk, dvo = 16, 192, 128
    lens = [317, 96, 1024]
    total = sum(lens)
    indptr = torch.tensor([0, *list(_cumsum(lens))], dtype=torch.int32, device="cuda")
    q = torch.randn(total, heads, dqk, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(total, heads, dqk, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(total, heads, dvo, dtype=torch.bfloat16, device="cuda")
    ws = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    scale = dqk**-0.5

    def call() -> tuple[Any, str]:
        w = fi.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="auto")
        w.plan(
            indptr,
            indptr,
            heads,
            heads,
            dqk,
            head_dim_vo=dvo,
            causal=True,
            sm_scale=scale,
            q_data_type=torch.bfloat16,
        )
        return w.run(q, k, v), str(getattr(w, "_backend", "?"))

    t0 = now()
    out, backend = call()
    t1 = now()
    out2, _ = call()
    t2 = now()
    refs = []
    for i in range(len(lens)):
        a, b = int(indptr[i]), int(indptr[i + 1])
        refs.append(_attention_ref(torch, q[a:b], k[a:b], v[a:b], scale, True))
    ref = torch.cat(refs)
    err = max(_rel_err(torch, out, ref), _rel_err(torch, out2, ref))
    ok = err < 2e-2
    return OpResult(
        "prefill_ragged_192x128",
        ok,
        t1 - t0,
        t2 - t1,
        rel_err=err,
        detail={"backend": backend, "heads": heads, "seq_lens": lens},
        error=None if ok else f"relative error {err:.3g} over 2e-2",
    )


def _cumsum(xs: list[int]) -> list[int]:
    out, acc = [], 0
    for x in xs:
        acc += x
        out.append(acc)
    return out


def _op_mla_decode(torch: Any, fi: Any, now: Callable[[], float]) -> OpResult:
    heads, dckv, dkpe = 16, 512, 64
    kv_lens = [100, 257, 64, 1500]
    bs, total = len(kv_lens), sum(kv_lens)
    q_indptr = torch.arange(bs + 1, dtype=torch.int32, device="cuda")
    kv_indptr = torch.tensor([0, *_cumsum(kv_lens)], dtype=torch.int32, device="cuda")
    kv_indices = torch.randperm(total, device="cuda").to(torch.int32)
    kv_len_arr = torch.tensor(kv_lens, dtype=torch.int32, device="cuda")
    q_nope = torch.randn(bs, heads, dckv, dtype=torch.bfloat16, device="cuda")
    q_pe = torch.randn(bs, heads, dkpe, dtype=torch.bfloat16, device="cuda")
    ckv = torch.randn(total, 1, dckv, dtype=torch.bfloat16, device="cuda")
    kpe = torch.randn(total, 1, dkpe, dtype=torch.bfloat16, device="cuda")
    ws = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    scale = (128 + 64) ** -0.5  # DeepSeek-V3: softmax scale of qk_head_dim 192

    def call() -> tuple[Any, str]:
        w = fi.mla.BatchMLAPagedAttentionWrapper(ws, backend="auto")
        w.plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_len_arr,
            heads,
            dckv,
            dkpe,
            1,
            False,
            scale,
            torch.bfloat16,
            torch.bfloat16,
        )
        return w.run(q_nope, q_pe, ckv, kpe), str(getattr(w, "_backend", "?"))

    t0 = now()
    out, backend = call()
    t1 = now()
    out2, _ = call()
    t2 = now()
    refs = []
    for i in range(bs):
        idx = kv_indices[int(kv_indptr[i]) : int(kv_indptr[i + 1])].long()
        c, p = ckv[idx, 0].double(), kpe[idx, 0].double()
        s = (q_nope[i].double() @ c.T + q_pe[i].double() @ p.T) * scale
        refs.append(torch.softmax(s, dim=-1) @ c)
    ref = torch.stack(refs)
    err = max(_rel_err(torch, out, ref), _rel_err(torch, out2, ref))
    ok = err < 2e-2
    return OpResult(
        "mla_paged_decode",
        ok,
        t1 - t0,
        t2 - t1,
        rel_err=err,
        detail={"backend": backend, "heads": heads, "kv_lens": kv_lens},
        error=None if ok else f"relative error {err:.3g} over 2e-2",
    )


def _to_fp8(torch: Any, x: Any) -> tuple[Any, Any]:
    finfo = torch.finfo(torch.float8_e4m3fn)
    amax = x.abs().max().clamp(min=1e-12)
    scale = finfo.max / amax
    return (x * scale).clamp(finfo.min, finfo.max).to(torch.float8_e4m3fn), scale.float().reciprocal()


def _op_bmm_fp8(torch: Any, fi: Any, now: Callable[[], float]) -> OpResult:
    # The absorbed-MLA shape: per head, tokens x 128 times 128 x 512.
    heads, m, kdim, n = 16, 64, 128, 512
    a = torch.randn(heads, m, kdim, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(heads, n, kdim, dtype=torch.bfloat16, device="cuda").transpose(-2, -1)
    a8, a_s = _to_fp8(torch, a)
    b8, b_s = _to_fp8(torch, b)

    def call() -> Any:
        return fi.bmm_fp8(a8, b8, a_s, b_s, torch.bfloat16, backend="cublas")

    t0 = now()
    with fi.autotune(True):
        out = call()
    t1 = now()
    out2 = call()
    t2 = now()
    ref = (a8.double() * a_s.double()) @ (b8.double() * b_s.double())
    err = max(_rel_err(torch, out, ref), _rel_err(torch, out2, ref))
    ok = err < 2e-2
    return OpResult(
        "bmm_fp8_autotune",
        ok,
        t1 - t0,
        t2 - t1,
        autotune_s=t1 - t0,
        rel_err=err,
        detail={"shape": [heads, m, kdim, n], "backend": "cublas"},
        error=None if ok else f"relative error {err:.3g} over 2e-2",
    )


def _op_fused_moe(torch: Any, fi: Any, now: Callable[[], float]) -> OpResult:
    experts, topk, hidden, inter, tokens = 8, 2, 1024, 512, 128
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(tokens, hidden, dtype=torch.bfloat16, device="cuda", generator=gen) * 0.5
    w1 = torch.randn(experts, inter, hidden, dtype=torch.bfloat16, device="cuda", generator=gen) * 0.05
    w3 = torch.randn(experts, inter, hidden, dtype=torch.bfloat16, device="cuda", generator=gen) * 0.05
    w2 = torch.randn(experts, hidden, inter, dtype=torch.bfloat16, device="cuda", generator=gen) * 0.05
    w31 = torch.cat([w3, w1], dim=1).contiguous()
    router = torch.randn(tokens, experts, device="cuda", generator=gen)
    weights, selected = torch.topk(torch.softmax(router, dim=-1), topk, dim=-1)
    weights = (weights / weights.sum(-1, keepdim=True)).float()
    selected = selected.to(torch.int32)
    from flashinfer.fused_moe import core as moe_core

    t0 = now()
    moe_core.get_cutlass_fused_moe_module("90")
    t_build = now()

    def call() -> Any:
        out = torch.empty_like(x)
        fi.fused_moe.cutlass_fused_moe(
            x,
            selected,
            weights,
            w31,
            w2,
            torch.bfloat16,
            quant_scales=None,
            output=out,
            tune_max_num_tokens=1024,
        )
        return out

    with fi.autotune(True):
        out = call()
    t1 = now()
    out2 = call()
    t2 = now()
    ref = torch.zeros(tokens, hidden, dtype=torch.float64, device="cuda")
    xd = x.double()
    for j in range(topk):
        e = selected[:, j].long()
        g = torch.einsum("th,tih->ti", xd, w1[e].double())
        u = torch.einsum("th,tih->ti", xd, w3[e].double())
        h = torch.nn.functional.silu(g) * u
        ref += weights[:, j : j + 1].double() * torch.einsum("ti,thi->th", h, w2[e].double())
    err = max(_rel_err(torch, out, ref), _rel_err(torch, out2, ref))
    ok = err < 5e-2
    return OpResult(
        "cutlass_fused_moe_bf16_autotune",
        ok,
        t1 - t0,
        t2 - t1,
        build_s=t_build - t0,
        autotune_s=t1 - t_build,
        rel_err=err,
        detail={
            "experts": experts,
            "topk": topk,
            "hidden": hidden,
            "inter": inter,
            "tokens": tokens,
            "tune_max_num_tokens": 1024,
        },
        error=None if ok else f"relative error {err:.3g} over 5e-2",
    )


OPS: dict[str, Callable[[Any, Any, Callable[[], float]], OpResult]] = {
    "sampling_top_k_top_p": _op_sampling,
    "prefill_ragged_192x128": _op_prefill_ragged,
    "mla_paged_decode": _op_mla_decode,
    "bmm_fp8_autotune": _op_bmm_fp8,
    "cutlass_fused_moe_bf16_autotune": _op_fused_moe,
}


def _emit(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()


def run_worker(ops: list[str], events: Path) -> int:
    """Import torch + flashinfer and run each op once cold-in-process, once again.

    Each op's record is appended to ``events`` as soon as it is known, so a phase
    cut off by its timeout still reports the ops it finished.
    """
    import traceback

    t0 = time.perf_counter()
    import torch

    torch.cuda.init()
    t_torch = time.perf_counter()
    import flashinfer

    t_fi = time.perf_counter()
    _emit(
        events,
        {"event": "import", "torch_s": t_torch - t0, "flashinfer_s": t_fi - t_torch, "import_s": t_fi - t0},
    )
    now = _sync_timer(torch)
    for op in ops:
        try:
            res = OPS[op](torch, flashinfer, now)
        except Exception as exc:
            res = OpResult(op, False, error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}")
        _emit(events, {"event": "op", **dataclasses.asdict(res)})
    return 0


def run_probe() -> int:
    """Print where FlashInfer 0.6 would put its files under the current environment."""
    info: dict[str, Any] = {}
    import flashinfer
    from flashinfer.jit import env as jit_env

    info["flashinfer"] = flashinfer.__version__
    for name in (
        "FLASHINFER_CACHE_DIR",
        "FLASHINFER_WORKSPACE_DIR",
        "FLASHINFER_JIT_DIR",
        "FLASHINFER_GEN_SRC_DIR",
        "FLASHINFER_CUBIN_DIR",
        "FLASHINFER_AOT_DIR",
    ):
        info[name] = str(getattr(jit_env, name, None))
    for name in ("has_flashinfer_cubin", "has_flashinfer_jit_cache"):
        fn = getattr(jit_env, name, None)
        info[name] = bool(fn()) if callable(fn) else None
    info["TVM_FFI_CACHE_DIR"] = str(Path(os.environ.get("TVM_FFI_CACHE_DIR", "~/.cache/tvm-ffi")).expanduser())
    print(json.dumps(info))
    return 0


# --------------------------------------------------------------------------- parent


def clean_env(home: Path, extra_path: str | None) -> dict[str, str]:
    """The worker's environment: HOME redirected, every cache-moving variable unset."""
    env = {k: v for k, v in os.environ.items() if k not in CACHE_ENV_VARS}
    env["HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    if extra_path:
        env["PATH"] = extra_path + os.pathsep + env.get("PATH", "")
    return env


def _ninja_dir() -> str | None:
    """ninja must be on PATH for FlashInfer's JIT; fall back to the pip package's binary."""
    if shutil.which("ninja"):
        return None
    try:
        import ninja  # type: ignore[import-not-found]

        return str(Path(ninja.BIN_DIR))
    except ImportError:
        return None


def _run_child(args: list[str], env: dict[str, str], timeout_s: float) -> tuple[int | None, bool, float, str]:
    """Run a child in its own process group; on timeout kill the group (ninja, nvcc too)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        timed_out = False
        try:
            rc: int | None = proc.wait(timeout=max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            timed_out = True
            rc = None
            # SIGINT first: ninja then stops its compilers and deletes half-written objects,
            # so a later run resumes from whole files only.
            for sig, grace in ((signal.SIGINT, 10.0), (signal.SIGKILL, 10.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
        wall = time.perf_counter() - t0
        err.seek(0)
        tail = err.read()[-4000:].decode(errors="replace")
    return rc, timed_out, wall, tail


def _read_events(path: Path) -> tuple[float | None, list[OpResult]]:
    import_s = None
    results: list[OpResult] = []
    if not path.is_file():
        return import_s, results
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            rec = json.loads(line)
            if rec.get("event") == "import":
                import_s = rec.get("import_s")
            elif rec.get("event") == "op":
                rec.pop("event")
                results.append(OpResult(**rec))
    return import_s, results


def prepare_home(phase: str, home: Path) -> None:
    """Put HOME in the state the phase measures."""
    fi_cache = home / ".cache" / "flashinfer"
    if phase == "cold":
        shutil.rmtree(home, ignore_errors=True)
    elif phase == "deleted":
        shutil.rmtree(fi_cache, ignore_errors=True)
    elif phase == "heavy_cold":
        for d in fi_cache.glob("*/*/cached_ops/fused_moe_*"):
            shutil.rmtree(d, ignore_errors=True)
        for d in fi_cache.glob("*/*/generated/cutlass_instantiations"):
            shutil.rmtree(d, ignore_errors=True)
    home.mkdir(parents=True, exist_ok=True)


def run_phase(phase: str, ops: list[str], home: Path, scratch: Path, timeout_s: float) -> PhaseResult:
    prepare_home(phase, home)
    before = inventory(home)
    events = scratch / f"{phase}.jsonl"
    events.unlink(missing_ok=True)
    env = clean_env(home, _ninja_dir())
    args = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--ops",
        ",".join(ops),
        "--events",
        str(events),
    ]
    rc, timed_out, wall, tail = _run_child(args, env, timeout_s)
    import_s, results = _read_events(events)
    after = inventory(home)
    added, removed = diff(before, after)
    return PhaseResult(
        phase,
        ops,
        round(wall, 3),
        rc,
        timed_out,
        import_s,
        results,
        len(before),
        len(added),
        sum(e.size for e in added),
        len(removed),
        by_category(after),
        stderr_tail=tail if (rc != 0 or timed_out) else tail[-600:],
    )


def probe_env(home: Path) -> dict[str, Any]:
    """Which variables move which directory (import only, no GPU work)."""
    cases: dict[str, dict[str, str]] = {
        "default": {},
        "FLASHINFER_WORKSPACE_BASE": {"FLASHINFER_WORKSPACE_BASE": "/srv/fi-base"},
        "FLASHINFER_CUDA_ARCH_LIST": {"FLASHINFER_CUDA_ARCH_LIST": "9.0a 12.0a"},
        "FLASHINFER_CUBIN_DIR": {"FLASHINFER_CUBIN_DIR": "/srv/fi-cubins"},
    }
    out: dict[str, Any] = {}
    for name, extra in cases.items():
        env = clean_env(home, None) | extra
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--probe"],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        try:
            out[name] = {"set": extra, "paths": json.loads(proc.stdout.strip().splitlines()[-1])}
        except (json.JSONDecodeError, IndexError):
            out[name] = {"set": extra, "error": proc.stderr[-1500:]}
    return out


def _cmd(args: list[str]) -> str | None:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None


def host_facts() -> dict[str, Any]:
    """Versions that belong in the cache key, read in a child so the parent stays GPU-free."""
    code = (
        "import json,torch,flashinfer,importlib.metadata as m;"
        "p=torch.cuda.get_device_properties(0);"
        "print(json.dumps({'torch':torch.__version__,'torch_cuda':torch.version.cuda,"
        "'flashinfer':flashinfer.__version__,'tvm_ffi':m.version('apache-tvm-ffi'),"
        "'gpu':p.name,'compute_capability':f'{p.major}{p.minor}','sm_count':p.multi_processor_count}))"
    )
    facts: dict[str, Any] = {}
    out = _cmd([sys.executable, "-c", code])
    with contextlib.suppress(json.JSONDecodeError, TypeError, IndexError):
        facts.update(json.loads((out or "").splitlines()[-1]))
    nvcc = _cmd(["nvcc", "--version"]) or ""
    facts["nvcc"] = next(
        (ln.split("release")[-1].split(",")[0].strip() for ln in nvcc.splitlines() if "release" in ln), None
    )
    facts["driver"] = _cmd(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    facts["python"] = platform.python_version()
    facts["cpu_count"] = os.cpu_count()
    facts["ninja"] = shutil.which("ninja") or _ninja_dir()
    return facts


def plan_phases(heavy: bool) -> list[tuple[str, list[str]]]:
    """Light ops cold, warm, deleted; then, if asked, the heavy MoE module cold and warm."""
    phases = [("cold", list(LIGHT_OPS)), ("warm", list(LIGHT_OPS)), ("deleted", list(LIGHT_OPS))]
    if heavy:
        phases += [("heavy_cold", list(HEAVY_OPS)), ("heavy_warm", list(HEAVY_OPS))]
    return phases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="where to write the JSON result")
    ap.add_argument(
        "--work-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "fi-cache-bench",
        help="scratch folder; its home/ is the measured HOME",
    )
    ap.add_argument("--budget-s", type=float, default=540.0, help="wall-clock budget for all phases")
    ap.add_argument("--phase-cap-s", type=float, default=420.0, help="longest any one phase may run")
    ap.add_argument("--heavy", action="store_true", help="also measure the CUTLASS fused-MoE module")
    ap.add_argument(
        "--phases",
        help="comma list to run instead of the default plan, "
        "e.g. heavy_cold,heavy_warm (names: cold warm deleted heavy_cold heavy_resume heavy_warm)",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ops", help=argparse.SUPPRESS)
    ap.add_argument("--events", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        return run_worker([o for o in (args.ops or "").split(",") if o], args.events)
    if args.probe:
        return run_probe()
    if args.out is None:
        ap.error("--out is required")

    t_start = time.perf_counter()
    probe_reserve_s = 45.0  # the env probe runs last and needs about this long
    deadline = t_start + args.budget_s - probe_reserve_s
    work = args.work_dir.resolve()
    home = work / "home"
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": "benchmarks/flashinfer_cache.py",
        "date": dt.date.today().isoformat(),
        "host": host_facts(),
        "op_notes": {k: OP_NOTES[k] for k in (*LIGHT_OPS, *HEAVY_OPS)},
        "unset_env": list(CACHE_ENV_VARS),
        "phases": [],
    }

    def write() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    if args.phases:
        names = [p for p in args.phases.split(",") if p]
        plan = [(n, list(HEAVY_OPS if n.startswith("heavy") else LIGHT_OPS)) for n in names]
    else:
        plan = plan_phases(args.heavy)
    phases: list[PhaseResult] = []
    heavy_done = False
    for name, ops in plan:
        remaining = deadline - time.perf_counter() - 20.0
        if name == "heavy_warm" and not heavy_done:
            skip = "the heavy build did not finish in an earlier phase"
        elif remaining < 30:
            skip = f"budget: {remaining:.0f}s left"
        else:
            skip = None
        if skip:
            res = PhaseResult(name, ops, 0.0, None, False, None, [], 0, 0, 0, 0, {}, skipped=skip)
        else:
            print(
                f"[flashinfer_cache] phase {name}: {', '.join(ops)} (timeout {min(remaining, args.phase_cap_s):.0f}s)",
                flush=True,
            )
            res = run_phase(name, ops, home, work, min(remaining, args.phase_cap_s))
            print(
                f"[flashinfer_cache] phase {name}: {res.wall_s:.1f}s wall, rc={res.returncode}, "
                f"timed_out={res.timed_out}, +{res.files_added} files",
                flush=True,
            )
            if name.startswith("heavy") and any(r.ok for r in res.op_results):
                heavy_done = True
            if res.timed_out and name.startswith("heavy"):
                builds = sorted((home / ".cache" / "flashinfer").glob("*/*/cached_ops/fused_moe_*"))
                res.op_results.append(
                    OpResult(
                        HEAVY_OPS[0],
                        False,
                        error="timed out during build",
                        detail={"ninja": {str(b.name): ninja_progress(b) for b in builds}},
                    )
                )
        phases.append(res)
        result["phases"] = [dataclasses.asdict(p) for p in phases]
        result["ratios"] = {
            "cold_vs_warm": ratios(phases, "cold", "warm"),
            "deleted_vs_warm": ratios(phases, "deleted", "warm"),
            "heavy_cold_vs_warm": ratios(phases, "heavy_cold", "heavy_warm"),
        }
        write()

    final = inventory(home)
    result["inventory"] = {
        "home": str(home),
        "by_category": by_category(final),
        "by_directory": by_directory(final),
        "largest_files": [dataclasses.asdict(e) for e in sorted(final, key=lambda e: -e.size)[:25]],
        "total_files": len(final),
        "total_bytes": sum(e.size for e in final),
    }
    # The probe reuses the measured HOME so tvm-ffi's addon (if any) is not rebuilt per case.
    result["env_probe"] = probe_env(home)
    result["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    write()
    print(render_summary(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
