"""The patch tool's own logic on small synthetic trees (no network, no docker)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import patchset
import pytest
from images_testlib import IMAGES, PATCHES, run_tool
from patchset import PatchError, load_patches, make_record, version_key


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("0.5.9", "0.5.10"),
        ("0.5.12.post1", "0.5.13"),
        ("0.5.13", "0.5.13.post1"),
        ("0.5.6rc1", "0.5.6"),
        ("0.5.9.dev1", "0.5.9rc1"),
        ("0.5", "0.5.0.post1"),
        ("0.5.23", "0.5.23.post99"),
    ],
)
def test_version_order(lower: str, higher: str):
    assert version_key(lower) < version_key(higher)


def test_unparseable_version_is_a_clear_error():
    with pytest.raises(PatchError, match="cannot parse version 'latest'"):
        version_key("latest")


def test_shipped_manifests_load_and_record_their_ranges():
    patches = {p.id: p for p in load_patches(PATCHES)}
    assert set(patches) == {"dsa-fp8-page-table-guard", "autotune-flashinfer-cutlass"}
    assert patches["autotune-flashinfer-cutlass"].first_fixed == "0.5.13"
    assert patches["autotune-flashinfer-cutlass"].newest_needing == "0.5.12.post1"
    assert patches["dsa-fp8-page-table-guard"].newest_needing == "0.5.23"
    for p in patches.values():
        assert p.changes_for("0.5.9"), f"{p.id} must cover 0.5.9"
        assert not p.changes_for("0.5.5")


def _copy_patches(tmp_path: Path) -> Path:
    dest = tmp_path / "patches"
    shutil.copytree(PATCHES, dest, ignore=shutil.ignore_patterns("__pycache__", "*.py", "*.txt"))
    return dest


def test_manifest_without_marker_is_rejected(tmp_path: Path):
    patches_dir = _copy_patches(tmp_path)
    manifest = patches_dir / "autotune-flashinfer-cutlass" / "manifest.toml"
    manifest.write_text(manifest.read_text().replace("# sglang-deploy patch autotune-flashinfer-cutlass:", "#"))
    with pytest.raises(PatchError, match="must contain the marker comment"):
        load_patches(patches_dir)


def test_manifest_id_must_match_folder(tmp_path: Path):
    patches_dir = _copy_patches(tmp_path)
    (patches_dir / "autotune-flashinfer-cutlass").rename(patches_dir / "renamed")
    with pytest.raises(PatchError, match="must equal the folder name"):
        load_patches(patches_dir)


def _runner_tree(tmp_path: Path, body: str) -> Path:
    root = tmp_path / "tree"
    target = root / "sglang/srt/model_executor/model_runner.py"
    target.parent.mkdir(parents=True)
    target.write_text(body)
    return root


UPSTREAM_LIST = """
def f(backend_str):
    moe_needs_autotune = backend_str in [
        "flashinfer_trtllm",
        "flashinfer_cutlass",
    ]
"""


def test_upstream_and_absent_outside_the_range(tmp_path: Path):
    patch = next(p for p in load_patches(PATCHES) if p.id == "autotune-flashinfer-cutlass")
    root = _runner_tree(tmp_path, UPSTREAM_LIST)
    result, changed = patchset.evaluate(patch, root, "0.5.13")
    assert (result.status, changed) == ("upstream", {})
    (root / "sglang/srt/model_executor/model_runner.py").write_text(
        UPSTREAM_LIST.replace('        "flashinfer_cutlass",\n', "")
    )
    result, _ = patchset.evaluate(patch, root, "0.5.13")
    assert result.status == "absent"


def test_commented_out_backend_is_not_upstream(tmp_path: Path):
    patch = next(p for p in load_patches(PATCHES) if p.id == "autotune-flashinfer-cutlass")
    root = _runner_tree(tmp_path, UPSTREAM_LIST.replace('"flashinfer_cutlass"', '# "flashinfer_cutlass"'))
    assert patchset.evaluate(patch, root, "0.5.13")[0].status == "absent"


def test_record_rejects_unknown_status_naming_allowed_values(tmp_path: Path):
    proc = run_tool(
        "record",
        "--sglang-version",
        "0.5.9",
        "--flashinfer-version",
        "0.6.3",
        "--cuda-version",
        "12.9",
        "--fix",
        "dsa-fp8-page-table-guard=patched",
        "--record",
        tmp_path / "r.json",
    )
    assert proc.returncode == 2
    assert "applied, upstream, absent" in proc.stderr and "'patched'" in proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_record_command_writes_the_schema(tmp_path: Path):
    out = tmp_path / "etc" / "patches.json"
    proc = run_tool(
        "record",
        "--sglang-version",
        "0.5.23",
        "--flashinfer-version",
        "0.7.2.post1",
        "--cuda-version",
        "13.0",
        "--fix",
        "b-fix=absent,a-fix=upstream",
        "--record",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text()) == make_record(
        engine="test-engine",
        sglang_version="0.5.23",
        flashinfer_version="0.7.2.post1",
        cuda_version="13.0",
        fixes={"a-fix": ("upstream", []), "b-fix": ("absent", [])},
    )
    assert list(json.loads(out.read_text())["fixes"]) == ["a-fix", "b-fix"]


def test_missing_root_is_usage_error(tmp_path: Path):
    proc = run_tool("apply", "--root", tmp_path)
    assert proc.returncode == 2 and "no sglang/ package folder" in proc.stderr


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python3", "-m", "sglang.launch_server", "--port", "31000"], ("127.0.0.1", 31000)),
        (["x", "--host=0.0.0.0", "--port=8000"], ("127.0.0.1", 8000)),
        (["x", "--host", "10.1.2.3"], ("10.1.2.3", 30000)),
    ],
)
def test_healthcheck_reads_the_servers_own_port(argv: list[str], expected: tuple[str, int]):
    sys.path.insert(0, str(IMAGES / "sglang"))
    import healthcheck

    assert healthcheck.server_address(argv) == expected
