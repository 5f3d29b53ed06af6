"""The sglang_server_argv / sglang_server_check filters: version-aware flags, the radix-cache
rule from the patch record, and errors that name the inventory variable."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pytest
from roles_testlib import ROLES

_spec = importlib.util.spec_from_file_location(
    "sglang_flags", ROLES / "sglang_server" / "filter_plugins" / "sglang_flags.py"
)
assert _spec and _spec.loader
flags = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = flags
_spec.loader.exec_module(flags)

GUARD = "dsa-fp8-page-table-guard"


def settings(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model_path": "zai-org/GLM-5-NVFP4",
        "tp_size": 8,
        "quantization": "modelopt_fp4",
        "kv_cache_dtype": "fp8_e4m3",
        "attention_backend": "triton",
        "moe_runner_backend": "flashinfer_cutlass",
        "max_running_requests": 1024,
        "radix_cache": "auto",
        "extra_args": [],
        "port": 30000,
        "listen_host": "0.0.0.0",
    }
    base.update(over)
    return base


def record(status: str) -> dict[str, Any]:
    return {"schema_version": 1, "fixes": {GUARD: {"status": status, "files": []}}}


def pairs(argv: list[str]) -> dict[str, str]:
    return {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if not argv[i + 1].startswith("--")}


def test_reference_command_line() -> None:
    out = flags.sglang_server_argv(settings(), "0.5.9", record("applied"), "120")
    assert out["errors"] == []
    got = pairs(out["argv"])
    assert got["--tp-size"] == "8"
    assert got["--quantization"] == "modelopt_fp4"
    assert got["--kv-cache-dtype"] == "fp8_e4m3"
    assert got["--moe-runner-backend"] == "flashinfer_cutlass"
    assert got["--max-running-requests"] == "1024"
    assert "--disable-radix-cache" not in out["argv"]


@pytest.mark.parametrize(
    ("version", "dsa_flag", "graph_flag"),
    [
        ("0.5.9", "--nsa-prefill-backend", "--cuda-graph-max-bs"),
        ("0.5.12", "--nsa-prefill-backend", "--cuda-graph-max-bs"),
        ("0.5.13", "--dsa-prefill-backend", "--cuda-graph-max-bs"),
        ("0.5.14", "--dsa-prefill-backend", "--cuda-graph-max-bs-decode"),
        ("0.5.20", "--dsa-prefill-backend", "--cuda-graph-max-bs-decode"),
        ("0.5.23.post1", "--dsa-prefill-backend", "--cuda-graph-max-bs-decode"),
    ],
)
def test_flag_names_follow_the_sglang_version(version: str, dsa_flag: str, graph_flag: str) -> None:
    s = settings(dsa_prefill_backend="flashmla_sparse", cuda_graph_max_bs=128)
    out = flags.sglang_server_argv(s, version, record("applied"), "100")
    got = pairs(out["argv"])
    assert got[dsa_flag] == "flashmla_sparse"
    assert got[graph_flag] == "128"
    other = {"--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"} - {graph_flag}
    assert not other & set(out["argv"])


def test_versioned_flags_without_a_version_label_fail() -> None:
    out = flags.sglang_server_argv(settings(cuda_graph_max_bs=64), "", record("applied"), "120")
    assert any("sglang_server_cuda_graph_max_bs" in e and "sglang_server_sglang_version" in e for e in out["errors"])


@pytest.mark.parametrize(
    ("policy", "rec", "disabled", "error"),
    [
        ("auto", record("applied"), False, False),
        ("auto", record("upstream"), False, False),
        ("auto", record("absent"), True, False),
        ("auto", {}, True, False),
        ("disabled", record("applied"), True, False),
        ("enabled", record("applied"), False, False),
        ("enabled", record("absent"), False, True),
    ],
)
def test_radix_cache_follows_the_patch_record(policy: str, rec: dict, disabled: bool, error: bool) -> None:
    out = flags.sglang_server_argv(settings(radix_cache=policy), "0.5.24", rec, "120")
    assert ("--disable-radix-cache" in out["argv"]) is disabled
    assert out["radix_cache_disabled"] is disabled
    assert bool(out["errors"]) is error
    if error:
        assert "sglang_server_radix_cache" in out["errors"][0]


def test_allreduce_fusion_is_dropped_on_sm120() -> None:
    s = settings(enable_flashinfer_allreduce_fusion=True)
    on_120 = flags.sglang_server_argv(s, "0.5.9", record("applied"), "120")
    on_100 = flags.sglang_server_argv(s, "0.5.9", record("applied"), "100")
    assert "--enable-flashinfer-allreduce-fusion" not in on_120["argv"]
    assert on_120["warnings"]
    assert "--enable-flashinfer-allreduce-fusion" in on_100["argv"]


@pytest.mark.parametrize(
    ("over", "gpus", "needle"),
    [
        ({"tp_size": 3}, 8, "sglang_server_tp_size=3 must divide sglang_gpu_count=8; allowed values: 1, 2, 4, 8"),
        ({"kv_cache_dtype": "fp9"}, 8, "sglang_server_kv_cache_dtype must be one of: auto, fp8_e4m3"),
        ({"port": 70000}, 8, "sglang_server_port must be in 1..65535"),
        ({"mem_fraction_static": 1.5}, 8, "sglang_server_mem_fraction_static must be a number in (0, 1)"),
        ({"model_path": ""}, 8, "sglang_server_model_path must be set"),
        ({"extra_args": ["--tp-size", "4"]}, 8, "--tp-size, which sglang_server_tp_size already controls"),
        ({"extra_args": ["--disable-radix-cache"]}, 8, "use sglang_server_radix_cache"),
        ({"disable_cuda_graph": True, "cuda_graph_max_bs": 8}, 8, "contradictory"),
        ({"moe_runner_backend": "cutlass_fp9"}, 8, "sglang_server_moe_runner_backend must be one of"),
    ],
)
def test_bad_settings_name_the_variable(over: dict, gpus: int, needle: str) -> None:
    errors = flags.sglang_server_check(settings(**over), gpus)
    assert any(needle in e for e in errors), errors


def test_good_settings_have_no_errors() -> None:
    assert flags.sglang_server_check(settings(), 8) == []
    assert flags.sglang_server_check(settings(tp_size=4), "8") == []


def test_extra_args_are_appended_verbatim() -> None:
    out = flags.sglang_server_argv(settings(extra_args=["--stream-output", "--log-level", "info"]), "0.5.9", {}, "120")
    assert out["argv"][-3:] == ["--stream-output", "--log-level", "info"]


def test_env_values_become_strings() -> None:
    assert flags.sglang_server_str_values({"A": 1, "B": True, "C": "x"}) == {"A": "1", "B": "true", "C": "x"}
