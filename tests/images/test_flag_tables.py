"""The committed flag tables are what images/flags/extract.py reads from the real PyPI wheels, today."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from images_testlib import IMAGES, fetch_wheel

_spec = importlib.util.spec_from_file_location("flags_extract", IMAGES / "flags" / "extract.py")
extract = importlib.util.module_from_spec(_spec)
sys.modules["flags_extract"] = extract
_spec.loader.exec_module(extract)


@pytest.mark.network
@pytest.mark.parametrize("version", extract.SUPPORTED)
def test_committed_table_reproduces_from_the_wheel(version: str) -> None:
    table = extract.dumps(extract.extract(fetch_wheel("sglang", version), version))
    committed = extract.table_path(version)
    assert committed.is_file(), f"no table for {version}: run python3 images/flags/extract.py {version}"
    assert committed.read_text() == table, f"{committed} is stale: run python3 images/flags/extract.py {version}"


def test_every_supported_release_has_a_table_and_nothing_else() -> None:
    found = sorted(p.name for p in (IMAGES.parent / "sglangflags" / "tables").glob("*.json"))
    assert found == sorted(f"sglang-{v}.json" for v in extract.SUPPORTED)


@pytest.mark.network
def test_extractor_reads_both_argument_styles() -> None:
    """0.5.9 defines flags with parser.add_argument; 0.5.23 with annotated fields in arg_groups/fields/."""
    old = extract.extract(fetch_wheel("sglang", "0.5.9"), "0.5.9")["flags"]
    new = extract.extract(fetch_wheel("sglang", "0.5.23"), "0.5.23")["flags"]
    assert old["--nsa-prefill-backend"]["value"] is True and "--dsa-prefill-backend" not in old
    assert "--nsa-prefill-backend" not in new and new["--dsa-prefill-backend"]["value"] is True
    assert new["--trust-remote-code"]["value"] is False  # a bool field is a switch
    assert new["--tensor-parallel-size"] == new["--tp-size"]  # an alias shares its entry
    assert new["--enable-flashinfer-allreduce-fusion"]["deprecated"] is True
    assert new["--enable-flashinfer-allreduce-fusion"]["new_flag"] == "--flashinfer-allreduce-fusion-backend=auto"
    assert "glm47" in new["--tool-call-parser"]["choices"] and "glm47" in old["--tool-call-parser"]["choices"]


def test_the_kernel_build_changes_with_the_release_and_each_kernel_flag_only() -> None:
    """sglangflags.kernel_build: what the cache role compares to decide "warm for this start"."""
    import sglangflags

    argv = ["--model-path", "/models/GLM-5-NVFP4", "--tp-size", "8", "--kv-cache-dtype", "fp8_e4m3",
            "--moe-runner-backend", "flashinfer_cutlass", "--mem-fraction-static", "0.9", "--disable-cuda-graph",
            "--speculative-algorithm", "EAGLE"]  # fmt: skip
    base = sglangflags.kernel_build("0.5.23", argv)
    assert base.id.startswith("sglang0.5.23-") and len(base.id) == len("sglang0.5.23-") + 12
    assert base.about == (
        "sglang 0.5.23, --disable-cuda-graph true, --kv-cache-dtype fp8_e4m3, --model-path /models/GLM-5-NVFP4, "
        "--moe-runner-backend flashinfer_cutlass, --speculative-algorithm EAGLE, --tp-size 8"
    )
    # not kernel settings, order, and the --flag=value spelling: the same build
    same = ["--mem-fraction-static", "0.5", "--speculative-algorithm=EAGLE", *argv[:8], "--disable-cuda-graph"]
    assert sglangflags.kernel_build("0.5.23", same) == base
    # another release, another value of any kernel flag, a kernel flag more or less: another build
    others = [
        sglangflags.kernel_build("0.5.22", argv),
        sglangflags.kernel_build("0.5.23", [*argv[:5], "bf16", *argv[6:]]),
        sglangflags.kernel_build("0.5.23", [*argv[:7], "flashinfer_trtllm", *argv[8:]]),
        sglangflags.kernel_build("0.5.23", [*argv[:-1], "NEXTN"]),
        sglangflags.kernel_build("0.5.23", [*argv, "--tp-size", "4"]),
        sglangflags.kernel_build("0.5.23", argv[:-2]),
    ]
    assert len({b.id for b in [base, *others]}) == 7
