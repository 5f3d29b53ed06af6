"""CPU-only tests of benchmarks/flashinfer_cache.py: the parts that decide what the
cache figure says (file inventory, categories, phase set-up, ratios, timeouts).

The GPU work itself only runs on the device machine; these tests check that the
bookkeeping around it would report a real cache layout correctly.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("flashinfer_cache", ROOT / "benchmarks" / "flashinfer_cache.py")
assert SPEC and SPEC.loader
fc = importlib.util.module_from_spec(SPEC)
sys.modules["flashinfer_cache"] = fc
SPEC.loader.exec_module(fc)

OPS = ".cache/flashinfer/0.6.3/90a/cached_ops"


def _write(root: Path, rel: str, size: int) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"x" * size)


@pytest.fixture
def fake_home(tmp_path: Path) -> Path:
    """A HOME laid out the way FlashInfer 0.6.3 + tvm-ffi leave it after a cold start."""
    home = tmp_path / "home"
    mod = f"{OPS}/sampling"
    _write(home, f"{mod}/sampling.so", 5000)
    _write(home, f"{mod}/sampling.cuda.o", 3000)
    _write(home, f"{mod}/flashinfer_sampling_binding.cuda.o", 1000)
    _write(home, f"{mod}/build.ninja", 200)
    _write(home, f"{mod}/.ninja_log", 50)
    _write(home, f"{OPS}/tmp/sampling.lock", 0)
    _write(home, ".cache/flashinfer/0.6.3/90a/generated/batch_prefill_x/batch_prefill.cu", 700)
    _write(home, ".cache/flashinfer/cubins/abc/kernel.cubin", 900)
    _write(home, ".cache/tvm-ffi/libtorch_c_dlpack_addon_torch211-cuda-1234abcd.so", 400)
    _write(home, ".triton/cache/k/kernel.json", 10)
    return home


def test_classify_names_each_cache_part() -> None:
    cases = {
        f"{OPS}/m/m.so": "flashinfer_jit_library",
        f"{OPS}/m/a.cuda.o": "flashinfer_jit_object",
        f"{OPS}/m/b.o": "flashinfer_jit_object",
        f"{OPS}/m/build.ninja": "flashinfer_build_files",
        f"{OPS}/m/.ninja_deps": "flashinfer_build_files",
        f"{OPS}/tmp/m.lock": "flashinfer_locks",
        ".cache/flashinfer/0.6.3/90a/generated/m/x.cu": "flashinfer_generated_sources",
        ".cache/flashinfer/cubins/x/y.cubin": "flashinfer_cubins",
        ".cache/flashinfer/autotune/0.6.3/sm90/x.json": "flashinfer_tuning",
        ".cache/tvm-ffi/lib.so": "tvm_ffi_addon",
        ".cache/sglang/flashinfer/autotune/x.json": "sglang_cache",
        ".triton/cache/a": "triton_cache",
        ".nv/ComputeCache/index": "cuda_ptx_jit_cache",
        "stray.txt": "other_stray.txt",
    }
    got = {path: fc.classify(path) for path in cases}
    assert got == cases


def test_inventory_counts_files_and_bytes_by_category(fake_home: Path) -> None:
    (fake_home / "link-to-so").symlink_to(fake_home / OPS / "sampling" / "sampling.so")
    entries = fc.inventory(fake_home)
    paths = [e.path for e in entries]
    assert "link-to-so" not in paths, "symlinks must not be counted twice"
    cats = fc.by_category(entries)
    assert cats["flashinfer_jit_object"] == {"files": 2, "bytes": 4000}
    assert cats["flashinfer_jit_library"] == {"files": 1, "bytes": 5000}
    assert cats["flashinfer_build_files"] == {"files": 2, "bytes": 250}
    assert cats["tvm_ffi_addon"]["bytes"] == 400
    assert sum(v["bytes"] for v in cats.values()) == sum(e.size for e in entries) == 11260


def test_by_directory_gives_one_line_per_jit_module(fake_home: Path) -> None:
    dirs = fc.by_directory(fc.inventory(fake_home))
    assert dirs[f"{OPS}/sampling"] == {"files": 5, "bytes": 9250}
    assert f"{OPS}/tmp" in dirs
    assert fc.inventory(fake_home / "missing") == []


def test_diff_reports_added_changed_and_removed(fake_home: Path) -> None:
    before = fc.inventory(fake_home)
    _write(fake_home, f"{OPS}/sampling/sampling.so", 6000)  # rebuilt: size changed
    _write(fake_home, f"{OPS}/norm/norm.so", 10)  # new module
    (fake_home / ".triton/cache/k/kernel.json").unlink()
    added, removed = fc.diff(before, fc.inventory(fake_home))
    assert sorted(e.path for e in added) == [f"{OPS}/norm/norm.so", f"{OPS}/sampling/sampling.so"]
    assert removed == [".triton/cache/k/kernel.json"]


def test_ninja_progress_counts_built_objects(tmp_path: Path) -> None:
    d = tmp_path / "fused_moe_90"
    d.mkdir()
    objs = [d / f"k{i}.cuda.o" for i in range(3)]
    lines = ["ninja_required_version = 1.3"]
    lines += [f"build {o}: cuda_compile /src/k{i}.cu" for i, o in enumerate(objs)]
    lines += [f"build {d / 'fused_moe_90.so'}: link " + " ".join(map(str, objs))]
    (d / "build.ninja").write_text("\n".join(lines))
    objs[0].write_bytes(b"o")
    objs[2].write_bytes(b"o")
    assert fc.ninja_progress(d) == {"objects_planned": 3, "objects_built": 2}
    assert fc.ninja_progress(tmp_path / "none") == {"objects_planned": 0, "objects_built": 0}


def test_prepare_home_puts_each_phase_in_its_state(fake_home: Path) -> None:
    _write(fake_home, f"{OPS}/fused_moe_90/fused_moe_90.so", 10)
    _write(fake_home, ".cache/flashinfer/0.6.3/90a/generated/cutlass_instantiations/90/a.cu", 10)
    fc.prepare_home("heavy_cold", fake_home)
    assert not (fake_home / OPS / "fused_moe_90").exists()
    assert not (fake_home / ".cache/flashinfer/0.6.3/90a/generated/cutlass_instantiations").exists()
    assert (fake_home / OPS / "sampling" / "sampling.so").exists()

    fc.prepare_home("warm", fake_home)
    assert (fake_home / OPS / "sampling" / "sampling.so").exists()

    fc.prepare_home("deleted", fake_home)
    assert not (fake_home / ".cache" / "flashinfer").exists()
    assert (fake_home / ".cache" / "tvm-ffi").is_dir(), "deleted removes FlashInfer's cache only"

    fc.prepare_home("cold", fake_home)
    assert fake_home.is_dir() and not any(fake_home.iterdir())


def _phase(name: str, firsts: dict[str, float | None], wall: float) -> object:
    results = [fc.OpResult(op, ok=v is not None, first_call_s=v, second_call_s=0.001) for op, v in firsts.items()]
    return fc.PhaseResult(name, list(firsts), wall, 0, False, 1.0, results, 0, 0, 0, 0, {})


def test_ratios_use_only_ops_that_ran_in_both_phases() -> None:
    cold = _phase("cold", {"a": 60.0, "b": 30.0, "c": 5.0}, 100.0)
    warm = _phase("warm", {"a": 0.5, "b": 0.1, "c": None}, 10.0)
    r = fc.ratios([cold, warm], "cold", "warm")
    assert set(r["ops"]) == {"a", "b"}
    assert r["ops"]["a"]["ratio"] == 120.0
    assert r["ops"]["b"]["saved_s"] == pytest.approx(29.9)
    assert r["sum_first_calls"]["ratio"] == pytest.approx(150.0)
    assert r["process_wall"]["ratio"] == 10.0
    assert fc.ratios([cold], "cold", "warm") == {}


def test_clean_env_redirects_home_and_drops_cache_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", "/elsewhere")
    monkeypatch.setenv("TVM_FFI_CACHE_DIR", "/elsewhere2")
    monkeypatch.setenv("KEEP_ME", "1")
    env = fc.clean_env(tmp_path, "/opt/ninja/bin")
    assert env["HOME"] == str(tmp_path)
    assert "FLASHINFER_WORKSPACE_BASE" not in env and "TVM_FFI_CACHE_DIR" not in env
    assert env["KEEP_ME"] == "1"
    assert env["PATH"].startswith("/opt/ninja/bin" + os.pathsep)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state


def test_run_child_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    """A phase cut off mid-build must not leave ninja/nvcc running on the device."""
    pidfile = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen(['sleep', '60']); open({str(pidfile)!r}, 'w').write(str(p.pid)); "
        "sys.stderr.write('started\\n'); sys.stderr.flush(); time.sleep(60)"
    )
    t0 = time.perf_counter()
    rc, timed_out, wall, tail = fc._run_child([sys.executable, "-c", code], dict(os.environ), 1.5)
    assert timed_out and rc is None
    assert wall < 30 and time.perf_counter() - t0 < 30
    assert "started" in tail
    pid = int(pidfile.read_text())
    deadline = time.time() + 5
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def test_render_summary_shows_ops_ratio_and_failures() -> None:
    cold = _phase("cold", {"sampling": 42.0, "prefill": 80.0}, 130.0)
    warm = _phase("warm", {"sampling": 0.2, "prefill": None}, 9.0)
    warm.op_results[1].error = "RuntimeError: boom"
    phases = [cold, warm]
    import dataclasses

    result = {
        "date": "2026-12-02",
        "host": {"flashinfer": "0.6.3", "gpu": "NVIDIA H200", "compute_capability": "90"},
        "phases": [dataclasses.asdict(p) for p in phases],
        "ratios": {"cold_vs_warm": fc.ratios(phases, "cold", "warm")},
        "inventory": {"by_category": {"flashinfer_jit_library": {"files": 2, "bytes": 3_000_000}}},
    }
    text = fc.render_summary(result)
    assert "0.6.3" in text and "NVIDIA H200" in text
    assert "42.0s" in text and "FAILED" in text
    assert "cold/warm: first calls 210.0x" in text
    assert "warm/prefill failed: RuntimeError: boom" in text
    assert "flashinfer_jit_library 2 files 3.0 MB" in text
