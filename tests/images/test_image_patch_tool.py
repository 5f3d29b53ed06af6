"""The patch tool on the real sglang wheels from PyPI (0.5.9 needs both fixes; 0.5.23 one)."""

from __future__ import annotations

import hashlib
import json
import py_compile
import zipfile
from pathlib import Path

import pytest
from images_guarded_code import call_fp8_kv_getter, call_should_autotune
from images_testlib import NEW, OLD, image_build, run_tool

pytestmark = pytest.mark.network

MHA = "sglang/srt/models/deepseek_common/attention_forward_methods/forward_mha.py"
RUNNER = "sglang/srt/model_executor/model_runner.py"
AUTOTUNE_NEW = "sglang/srt/model_executor/runner/flashinfer_autotune.py"
DSA = "dsa-fp8-page-table-guard"
AUTOTUNE = "autotune-flashinfer-cutlass"


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every source file under root/sglang (what 'nothing changed' is checked on)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((root / "sglang").rglob("*.py"))
    }


def pristine(wheel: Path, rel: str, tmp_path: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        zf.extract(rel, tmp_path / "pristine")
    return tmp_path / "pristine" / rel


def apply(root: Path, record: Path, *extra: str):
    return run_tool("apply", "--root", root, "--cuda-version", "12.9", "--record", record, *extra)


def test_old_release_gets_both_patches_compiled_and_recorded(tree_old: Path, tmp_path: Path):
    before = tree_digest(tree_old)
    record = tmp_path / "patches.json"
    proc = apply(tree_old, record)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(record.read_text())
    assert data["engine"] == "sglang"
    assert (data["sglang_version"], data["flashinfer_version"], data["cuda_version"]) == (
        OLD[0],
        "unknown",
        "12.9",
    )
    assert data["fixes"][DSA] == {"status": "applied", "files": [MHA]}
    assert data["fixes"][AUTOTUNE] == {"status": "applied", "files": [RUNNER]}
    after = tree_digest(tree_old)
    assert {k for k in before if before[k] != after[k]} == {MHA, RUNNER}
    for rel in (MHA, RUNNER):
        py_compile.compile(str(tree_old / rel), doraise=True)
        cached = list((tree_old / rel).parent.glob(f"__pycache__/{Path(rel).stem}.*.pyc"))
        assert cached, f"the tool did not byte-compile {rel}"


def test_old_release_second_run_changes_nothing(tree_old: Path, tmp_path: Path):
    assert apply(tree_old, tmp_path / "1.json").returncode == 0
    first = tree_digest(tree_old)
    proc = apply(tree_old, tmp_path / "2.json")
    assert proc.returncode == 0, proc.stderr
    assert "already applied" in proc.stderr
    assert tree_digest(tree_old) == first
    assert json.loads((tmp_path / "1.json").read_text()) == json.loads((tmp_path / "2.json").read_text())


def test_guard_falls_back_instead_of_raising(tree_old: Path, wheel_old: Path, tmp_path: Path):
    """The shipped function raises the reported AttributeError; the patched one does not."""
    func = "_get_mla_kv_buffer_from_fp8_for_nsa"
    with pytest.raises(AttributeError, match="page_table_1_flattened"):
        call_fp8_kv_getter(pristine(wheel_old, MHA, tmp_path), func)
    assert apply(tree_old, tmp_path / "r.json").returncode == 0
    result, seen = call_fp8_kv_getter(tree_old / MHA, func)
    assert seen.get("fetched_one_shot") is True
    assert seen["dequant_indices"] is seen["one_shot"], "FP8 dequant must read the one-shot KV indices"
    assert len(result) == 2


def test_guard_covers_the_hybrid_prefill_decode_wrapper(tree_old: Path, wheel_old: Path, tmp_path: Path):
    """0.5.9-0.5.21: separate prefill/decode backends reach the getter through a wrapper without
    forward_metadata. The shipped code fails one level up; the patched one falls back."""
    func = "_get_mla_kv_buffer_from_fp8_for_nsa"
    with pytest.raises(AttributeError, match="'HybridAttnBackend' object has no attribute 'forward_metadata'"):
        call_fp8_kv_getter(pristine(wheel_old, MHA, tmp_path), func, hybrid=True)
    assert apply(tree_old, tmp_path / "r.json").returncode == 0
    _result, seen = call_fp8_kv_getter(tree_old / MHA, func, hybrid=True)
    assert seen.get("fetched_one_shot") is True and seen["dequant_indices"] is seen["one_shot"]


def test_autotune_includes_cutlass_after_patch(tree_old: Path, wheel_old: Path, tmp_path: Path):
    assert call_should_autotune(pristine(wheel_old, RUNNER, tmp_path), "flashinfer_cutlass") is False
    assert apply(tree_old, tmp_path / "r.json").returncode == 0
    assert call_should_autotune(tree_old / RUNNER, "flashinfer_cutlass") is True
    assert call_should_autotune(tree_old / RUNNER, "flashinfer_trtllm") is True
    assert call_should_autotune(tree_old / RUNNER, "triton") is False


def test_new_release_autotune_upstream_guard_still_needed(tree_new: Path, tmp_path: Path):
    """0.5.23: cutlass autotune is upstream (untouched); the DSA guard is still applied (see manifest)."""
    before = tree_digest(tree_new)
    record = tmp_path / "patches.json"
    proc = apply(tree_new, record, "--flashinfer-version", NEW[1])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(record.read_text())
    assert data["sglang_version"] == NEW[0]
    assert data["fixes"][AUTOTUNE] == {"status": "upstream", "files": []}
    assert data["fixes"][DSA] == {"status": "applied", "files": [MHA]}
    after = tree_digest(tree_new)
    assert {k for k in before if before[k] != after[k]} == {MHA}
    assert before[AUTOTUNE_NEW] == after[AUTOTUNE_NEW]
    for hybrid in (False, True):
        _result, seen = call_fp8_kv_getter(tree_new / MHA, "_get_mla_kv_buffer_from_fp8_for_dsa", hybrid=hybrid)
        assert seen["dequant_indices"] is seen["one_shot"]
    again = apply(tree_new, tmp_path / "again.json", "--flashinfer-version", NEW[1])
    assert again.returncode == 0, again.stderr
    assert tree_digest(tree_new) == after
    assert json.loads((tmp_path / "again.json").read_text()) == data


def test_new_release_shipped_code_still_crashes(wheel_new: Path, tmp_path: Path):
    """Why 0.5.23 is not 'upstream' for the guard: its own function still raises."""
    with pytest.raises(AttributeError, match="page_table_1_flattened"):
        call_fp8_kv_getter(pristine(wheel_new, MHA, tmp_path), "_get_mla_kv_buffer_from_fp8_for_dsa")


def test_drifted_file_fails_with_version_drift_and_writes_nothing(tree_old: Path, tmp_path: Path):
    target = tree_old / MHA
    text = target.read_text()
    anchor = "        kv_indices = backend.forward_metadata.page_table_1_flattened\n"
    assert anchor in text
    target.write_text(text.replace(anchor, "        kv_indices = backend.forward_metadata.page_table\n"))
    before = tree_digest(tree_old)
    record = tmp_path / "patches.json"
    proc = apply(tree_old, record)
    assert proc.returncode == 1
    assert "VERSION DRIFT" in proc.stderr
    for needle in (
        DSA,
        MHA,
        f"sglang {OLD[0]}",
        "kv_indices = backend.forward_metadata.page_table_1_flattened",
    ):
        assert needle in proc.stderr, f"drift message lacks {needle!r}: {proc.stderr}"
    assert not record.exists(), "no record may be written on drift"
    assert tree_digest(tree_old) == before, "the other patch must not be half-applied"


def test_check_mode_decides_without_writing(tree_old: Path, tmp_path: Path):
    before = tree_digest(tree_old)
    proc = run_tool("apply", "--root", tree_old, "--check", "--record", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{AUTOTUNE}=applied,{DSA}=applied"
    assert "would apply" in proc.stderr
    assert tree_digest(tree_old) == before and not (tmp_path / "r.json").exists()


def test_expect_mismatch_fails_the_build(tree_old: Path, tmp_path: Path):
    before = tree_digest(tree_old)
    proc = apply(tree_old, tmp_path / "r.json", "--expect", f"{AUTOTUNE}=upstream,{DSA}=applied")
    assert proc.returncode == 1
    assert "differs from the expected" in proc.stderr
    assert not (tmp_path / "r.json").exists()
    assert tree_digest(tree_old) == before


@pytest.mark.parametrize("key", ["a", "b"])
def test_test_engine_releases_claim_what_the_real_release_would_get(key: str, wheel_old: Path, wheel_new: Path):
    """release-a/-b pose as 0.5.9/0.5.23: their records must say what the tool decides there."""
    rel = image_build.TEST_ENGINE_RELEASES[key]
    wheel = {OLD[0]: wheel_old, NEW[0]: wheel_new}[rel.sglang]
    assert image_build.expected_patches(wheel, rel.sglang) == rel.patches
