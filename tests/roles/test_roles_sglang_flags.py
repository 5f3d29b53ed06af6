# ruff: noqa: E501  (argv and messages are asserted whole: long literals)
"""sglangargv, the sglang_server role's command line (through its filters): version-aware flags,
the radix-cache rule from the patch record, and errors that name the inventory variable."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from roles_testlib import ROLES

import sglangargv
import sglangflags
from preflight.specs import role_options


def render(*args: Any) -> dict[str, Any]:
    """What the sglang_server_argv filter hands the role."""
    return sglangargv.render_argv(*args).as_dict()


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
    out = render(settings(), "0.5.9", record("applied"), "120")
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
    out = render(s, version, record("applied"), "100")
    got = pairs(out["argv"])
    assert got[dsa_flag] == "flashmla_sparse"
    assert got[graph_flag] == "128"
    other = {"--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"} - {graph_flag}
    assert not other & set(out["argv"])


def test_versioned_flags_without_a_version_label_fail() -> None:
    out = render(settings(cuda_graph_max_bs=64), "", record("applied"), "120")
    assert any("sglang_server_cuda_graph_max_bs" in e and "sglang_server_sglang_version" in e for e in out["errors"])


@pytest.mark.parametrize(
    ("policy", "rec", "kv", "radix_off", "chunked_prefix_off"),
    [
        ("auto", record("applied"), "fp8_e4m3", False, False),
        ("auto", record("upstream"), "fp8_e4m3", False, False),
        # no guard: the fallback that avoids the crash is --disable-chunked-prefix-cache, radix cache kept
        ("auto", record("absent"), "fp8_e4m3", False, True),
        ("auto", {}, "fp8_e4m3", False, True),
        ("enabled", record("absent"), "fp8_e4m3", False, True),
        # SGLang resolves "auto" to fp8_e4m3 for DSA models on compute major >= 10 (tests/sglang_real)
        ("auto", record("absent"), "auto", False, True),
        ("auto", record("absent"), "bf16", False, False),  # BF16 KV never takes the FP8 path
        ("disabled", record("applied"), "fp8_e4m3", True, False),
        ("disabled", record("absent"), "fp8_e4m3", True, True),
    ],
)
def test_crash_fallback_follows_the_patch_record(policy, rec, kv, radix_off, chunked_prefix_off) -> None:
    out = render(settings(radix_cache=policy, kv_cache_dtype=kv), "0.5.23", rec, "120")
    assert out["errors"] == []
    assert ("--disable-radix-cache" in out["argv"]) is radix_off and out["radix_cache_disabled"] is radix_off
    assert ("--disable-chunked-prefix-cache" in out["argv"]) is chunked_prefix_off
    if chunked_prefix_off:
        assert any("page_table_1_flattened" in w for w in out["warnings"])


def test_allreduce_fusion_is_dropped_on_sm120_and_renamed_where_the_release_renamed_it() -> None:
    s = settings(enable_flashinfer_allreduce_fusion=True)
    on_120 = render(s, "0.5.9", record("applied"), "120")
    on_100 = render(s, "0.5.9", record("applied"), "100")
    assert "--enable-flashinfer-allreduce-fusion" not in on_120["argv"]
    assert on_120["warnings"]
    assert "--enable-flashinfer-allreduce-fusion" in on_100["argv"]
    new = render(s, "0.5.18", record("applied"), "100")
    assert pairs(new["argv"])["--flashinfer-allreduce-fusion-backend"] == "auto"
    assert "--enable-flashinfer-allreduce-fusion" not in new["argv"] and new["errors"] == []


@pytest.mark.parametrize(
    ("over", "version", "needle"),
    [
        (
            {"attention_backend": "dsa"},
            "0.5.12.post1",
            "sglang_server_attention_backend=dsa is refused by SGLang 0.5.12.post1",
        ),
        (
            {"attention_backend": "cutlass_mla"},
            "0.5.20",
            "sglang_server_attention_backend=cutlass_mla is refused by SGLang 0.5.20",
        ),
        (
            {"extra_args": ["--enable-warp-drive"]},
            "0.5.17",
            "sglang_server_extra_args (--enable-warp-drive): SGLang 0.5.17 has no flag",
        ),
        (
            {"extra_args": ["--cuda-graph-bs-decode", "8"]},
            "0.5.12",
            "sglang_server_extra_args (--cuda-graph-bs-decode): SGLang 0.5.12 has no flag",
        ),
    ],
)
def test_values_a_release_refuses_are_refused_by_name(over: dict, version: str, needle: str) -> None:
    out = render(settings(**over), version, record("applied"), "100")
    assert any(needle in e for e in out["errors"]), out["errors"]
    assert any(needle in e for e in sglangargv.check(settings(**over), 8, version))  # preflight too


def test_accepted_values_pass_on_the_releases_that_accept_them() -> None:
    assert render(settings(attention_backend="dsa"), "0.5.13", record("applied"), "100")["errors"] == []
    assert render(settings(attention_backend="cutlass_mla"), "0.5.19", record("applied"), "100")["errors"] == []


def test_deprecated_tool_call_parser_is_a_warning_naming_the_replacement() -> None:
    out = render(settings(tool_call_parser="glm45"), "0.5.17", record("applied"), "120")
    assert out["errors"] == []
    assert any(
        "sglang_server_tool_call_parser=glm45 is deprecated in SGLang 0.5.17" in w and "glm47" in w
        for w in out["warnings"]
    )
    ok = render(settings(tool_call_parser="glm47"), "0.5.17", record("applied"), "120")
    assert not any("tool_call_parser" in w for w in ok["warnings"])


def test_a_version_older_than_every_table_is_refused_and_a_newer_one_uses_the_newest() -> None:
    old = render(settings(), "0.4.9", record("applied"), "120")
    assert any("older than every supported release" in e for e in old["errors"])
    new = render(settings(), "0.5.24", record("applied"), "120")
    assert new["flag_table"] == "0.5.23" and any("checked against 0.5.23" in w for w in new["warnings"])


@pytest.mark.parametrize(
    ("over", "gpus", "needle"),
    [
        ({"tp_size": 3}, 8, "sglang_server_tp_size=3 must divide sglang_gpu_count=8; allowed values: 1, 2, 4, 8"),
        ({"port": 70000}, 8, "sglang_server_port must be in 1..65535"),
        ({"mem_fraction_static": 1.5}, 8, "sglang_server_mem_fraction_static must be a number in (0, 1)"),
        ({"model_path": ""}, 8, "sglang_server_model_path must be set"),
        ({"extra_args": ["--tp-size", "4"]}, 8, "--tp-size, which sglang_server_tp_size already controls"),
        ({"extra_args": ["--disable-radix-cache"]}, 8, "use sglang_server_radix_cache"),
        ({"disable_cuda_graph": True, "cuda_graph_max_bs": 8}, 8, "contradictory"),
        ({"tp_size": 0}, 8, "sglang_server_tp_size must be in 1 or more, got 0"),
        ({"tp_size": None}, 8, "sglang_server_tp_size must be set (1 or more)"),
        ({"max_running_requests": "0"}, 8, "sglang_server_max_running_requests must be in 1 or more, got 0"),
        ({}, 0, "sglang_gpu_count must be 1 or more, got 0"),
    ],
)
def test_bad_settings_name_the_variable(over: dict, gpus: int, needle: str) -> None:
    errors = sglangargv.check(settings(**over), gpus)
    assert any(needle in e for e in errors), errors


SPEC = role_options(ROLES / "sglang_server/meta/argument_specs.yml", "validate")


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"sglang_server_kv_cache_dtype": "fp9"},
         "value of sglang_server_kv_cache_dtype must be one of: auto, fp8_e4m3, fp8_e5m2, bf16, got: fp9"),
        ({"sglang_server_moe_runner_backend": "cutlass_fp9"},
         "value of sglang_server_moe_runner_backend must be one of: , auto, triton, triton_kernel, deep_gemm, cutlass, "
         "flashinfer_cutlass, flashinfer_trtllm, flashinfer_mxfp4, flashinfer_cutedsl, got: cutlass_fp9"),
        ({"sglang_server_speculative": {"algorithm": "MEDUSA"}},
         "value of algorithm must be one of: , EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, got: MEDUSA found in "
         "sglang_server_speculative"),
        ({"sglang_server_speculative": {"algorithm": "EAGLE", "steps": 3}},
         "sglang_server_speculative.steps. Supported parameters include: algorithm, draft_model_path, eagle_topk, "
         "num_draft_tokens, num_steps"),
        ({"sglang_server_speculative": "EAGLE"},
         "argument 'sglang_server_speculative' is of type str and we were unable to convert to dict"),
        ({"sglang_server_tp_size": "eight"}, "argument 'sglang_server_tp_size' is of type str and we were unable to "
         "convert to int"),
        ({"sglang_server_disable_cuda_graph": "maybe"},
         "argument 'sglang_server_disable_cuda_graph' is of type str and we were unable to convert to bool"),
        ({"sglang_server_extra_args": "--x"}, None),  # a string becomes a one-item list
    ],
)  # fmt: skip
def test_types_and_choices_are_the_argument_specs_which_name_the_variable(over: dict, message: str | None) -> None:
    """What each setting may hold is written once, in the role's argument spec; Ansible's validator
    (the one the role's entry point runs) refuses the rest, naming the variable and what it may hold."""
    base = {"sglang_server_container_name": "sglang", "sglang_server_model_path": "m", "sglang_server_tp_size": 8}
    result = ArgumentSpecValidator(SPEC).validate({**base, **over})
    if message is None:
        assert result.error_messages == []
    else:
        assert any(message in e for e in result.error_messages), result.error_messages


def test_good_settings_have_no_errors() -> None:
    assert sglangargv.check(settings(), 8) == []
    assert sglangargv.check(settings(tp_size=4), "8") == []


def test_extra_args_are_appended_verbatim() -> None:
    out = render(settings(extra_args=["--stream-output", "--log-level", "info"]), "0.5.9", {}, "120")
    assert out["argv"][-3:] == ["--stream-output", "--log-level", "info"]


def test_env_values_become_strings() -> None:
    assert sglangargv.env_strings({"A": 1, "B": True, "C": "x"}) == {"A": "1", "B": "true", "C": "x"}


def _example_settings(profile: str = "rtx_pro_6000") -> tuple[dict[str, Any], int, str]:
    """inventory/example's server settings (all + one GPU profile), keyed like the role's vars."""
    from roles_testlib import REPO

    merged: dict[str, Any] = {}
    for f in ("all/main.yml", f"{profile}.yml"):
        merged.update(yaml.safe_load((REPO / "inventory/example/group_vars" / f).read_text()))
    keys = [
        "model_path",
        "served_model_name",
        "tp_size",
        "quantization",
        "kv_cache_dtype",
        "attention_backend",
        "dsa_prefill_backend",
        "dsa_decode_backend",
        "moe_runner_backend",
        "max_running_requests",
        "mem_fraction_static",
        "chunked_prefill_size",
        "disable_cuda_graph",
        "cuda_graph_max_bs",
        "stream_interval",
        "enable_metrics",
        "trust_remote_code",
        "reasoning_parser",
        "tool_call_parser",
        "disable_custom_all_reduce",
        "disable_shared_experts_fusion",
        "enable_flashinfer_allreduce_fusion",
        "radix_cache",
        "extra_args",
        "speculative",
        "pcie_ipc_allreduce",
        "env",
    ]
    s = {k: merged.get(f"sglang_server_{k}", "") for k in keys}
    s.update(listen_host="0.0.0.0", port=merged.get("sglang_server_port", 30000), extra_args=s["extra_args"] or [])
    return s, merged["sglang_gpu_count"], merged["sglang_gpu_arch"]


RELEASES = sorted((p.name[7:-5] for p in sglangflags.TABLES.glob("sglang-*.json")), key=sglangflags.version_key)
# The profiles pin what SGLang resolves on Blackwell; flashinfer_sparse_mla is a DSA backend from 0.5.17 on.
PROFILE_RELEASES = [v for v in RELEASES if sglangflags.version_key(v) >= (0, 5, 17)]


@pytest.mark.parametrize("version", PROFILE_RELEASES)
@pytest.mark.parametrize("guard", ["applied", "absent"])
@pytest.mark.parametrize("profile", ["rtx_pro_6000", "b200"])
def test_example_inventory_renders_only_what_each_release_accepts(version: str, guard: str, profile: str) -> None:
    s, gpus, arch = _example_settings(profile)
    assert sglangargv.check(s, gpus, version) == []
    out = render(s, version, record(guard), arch)
    assert out["errors"] == [] and out["flag_table"] == version
    table = sglangargv.render.flag_table(version)[0]["flags"]
    rendered = [a for a in out["argv"] if a.startswith("--")]
    assert all(f in table and not table[f].get("deprecated") for f in rendered), rendered
    assert not [w for w in out["warnings"] if "deprecated" in w]  # the example uses no deprecated flag or value
    assert pairs(out["argv"])["--tool-call-parser"] == "glm47"


@pytest.mark.parametrize("version", [v for v in RELEASES if v not in PROFILE_RELEASES])
def test_the_sm120_profile_is_refused_by_name_on_releases_without_its_dsa_kernels(version: str) -> None:
    s, _gpus, arch = _example_settings("rtx_pro_6000")
    out = render(s, version, record("applied"), arch)
    assert any(e.startswith("sglang_server_dsa_prefill_backend=flashinfer_sparse_mla is refused by SGLang") or
               f"SGLang {version} has no flag" in e for e in out["errors"]), out["errors"]  # fmt: skip


def test_preflight_warns_on_deprecated_values_with_or_without_a_version() -> None:
    warned = sglangargv.deprecations(settings(tool_call_parser="glm45"), "")  # newest table decides
    assert len(warned) == 1 and "sglang_server_tool_call_parser=glm45 is deprecated in SGLang 0.5.23" in warned[0]
    assert "glm47" in warned[0]
    old = sglangargv.deprecations(settings(tool_call_parser="glm45"), "0.5.9")
    assert len(old) == 1 and "in SGLang 0.5.9" in old[0]
    assert sglangargv.deprecations(settings(tool_call_parser="glm47"), "") == []
    assert sglangargv.deprecations(settings(extra_args=["--stream-output"]), "0.5.17") == [
        "sglang_server_extra_args (--stream-output): --stream-output is deprecated in SGLang 0.5.17; "
        "use --incremental-streaming-output"
    ]
    # where the release has the new flag the role renders it: nothing deprecated to warn about
    assert sglangargv.deprecations(settings(enable_flashinfer_allreduce_fusion=True), "0.5.14") == []


@pytest.mark.parametrize(
    ("kv", "arch", "fp8"),
    [("auto", "120", True), ("auto", "100", True), ("auto", "90", False), ("auto", "", False),
     ("bf16", "120", False), ("fp8_e5m2", "90", True)],
)  # fmt: skip
def test_the_dsa_guard_decides_fp8_from_the_dtype_sglang_resolves(kv: str, arch: str, fp8: bool) -> None:
    out = render(settings(kv_cache_dtype=kv), "0.5.23", record("absent"), arch)
    assert out["kv_cache_fp8"] is fp8
    assert ("--disable-chunked-prefix-cache" in out["argv"]) is fp8


def test_speculative_decoding_renders_from_structured_settings() -> None:
    spec = {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4, "draft_model_path": ""}
    out = render(settings(speculative=spec), "0.5.23", record("applied"), "120")
    assert out["errors"] == []
    got = pairs(out["argv"])
    assert [got["--speculative-algorithm"], got["--speculative-num-steps"], got["--speculative-eagle-topk"],
            got["--speculative-num-draft-tokens"]] == ["EAGLE", "3", "1", "4"]  # fmt: skip
    assert "--speculative-draft-model-path" not in out["argv"]
    off = render(settings(speculative={"algorithm": ""}), "0.5.23", record("applied"), "120")
    assert not [a for a in off["argv"] if a.startswith("--speculative")]


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"algorithm": "EAGLE", "num_steps": 0}, "sglang_server_speculative.num_steps must be an integer of 1 or more"),
        ({"algorithm": "EAGLE", "eagle_topk": "0"}, "speculative.eagle_topk must be an integer of 1 or more, got '0'"),
        ({"algorithm": "", "draft_model_path": "/m"}, "speculative sets draft_model_path without an algorithm"),
        ({"algorithm": "", "num_steps": 3}, "sglang_server_speculative sets num_steps without an algorithm"),
    ],
)
def test_bad_speculative_settings_name_the_key(spec: Any, needle: str) -> None:
    assert any(needle in e for e in sglangargv.check(settings(speculative=spec), 8)), needle
    assert any(needle in e for e in render(settings(speculative=spec), "0.5.23", {}, "120")["errors"])


@pytest.mark.parametrize(("version", "env", "warned"), [("0.5.21", {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, False),
                                                      ("0.5.23", {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, False),
                                                      ("0.5.20", {}, True), ("0.5.17", {}, True)])  # fmt: skip
def test_pcie_ipc_allreduce_is_set_only_where_the_release_reads_it(version: str, env: dict, warned: bool) -> None:
    out = render(settings(pcie_ipc_allreduce=True), version, record("applied"), "120")
    assert out["env"] == env
    assert any(f"SGLang {version} has no SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" in w for w in out["warnings"]) is warned


def test_sglang_environment_names_are_checked_against_the_release() -> None:
    out = render(
        settings(env={"SGLANG_PCIE_IPC_MAX_NUMEL": "0", "SGLANG_ENABEL_PCIE_IPC_ALLREDUCE": "1", "NCCL_X": "x"}),
        "0.5.23",
        record("applied"),
        "120",
    )
    unknown = [w for w in out["warnings"] if "declared switches" in w]
    assert unknown == [
        "sglang_server_env: SGLANG_ENABEL_PCIE_IPC_ALLREDUCE is not one of SGLang 0.5.23's declared switches "
        "(its environ.py): a typo, or another release's switch?"
    ]


FULL = {
    "model_path": "zai-org/GLM-5-NVFP4", "served_model_name": "glm-5", "tp_size": 8, "quantization": "modelopt_fp4",
    "kv_cache_dtype": "fp8_e4m3", "attention_backend": "nsa", "dsa_prefill_backend": "flashmla_sparse",
    "dsa_decode_backend": "trtllm", "moe_runner_backend": "flashinfer_cutlass", "max_running_requests": 64,
    "mem_fraction_static": 0.85, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 32, "stream_interval": 2,
    "speculative": {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4,
                    "draft_model_path": "/models/draft"},
    "enable_metrics": True, "trust_remote_code": "yes", "reasoning_parser": "glm45", "tool_call_parser": "glm47",
    "disable_custom_all_reduce": "true", "disable_shared_experts_fusion": "1", "enable_flashinfer_allreduce_fusion": "on",
    "radix_cache": "auto", "listen_host": "0.0.0.0", "port": 30000, "extra_args": ["--log-level", "info"], "env": {},
}  # fmt: skip


def test_every_setting_renders_its_own_flag_in_order_for_0_5_23_on_b200() -> None:
    """Each setting set at once (bools as YAML and Jinja write them), the whole argv and result."""
    assert render(FULL, "0.5.23", record("applied"), "100") == {
        "argv": [
            "--model-path", "zai-org/GLM-5-NVFP4", "--served-model-name", "glm-5", "--tp-size", "8",
            "--quantization", "modelopt_fp4", "--kv-cache-dtype", "fp8_e4m3", "--attention-backend", "nsa",
            "--dsa-prefill-backend", "flashmla_sparse", "--dsa-decode-backend", "trtllm",
            "--moe-runner-backend", "flashinfer_cutlass", "--max-running-requests", "64", "--mem-fraction-static", "0.85",
            "--chunked-prefill-size", "8192", "--cuda-graph-max-bs-decode", "32", "--stream-interval", "2",
            "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4", "--speculative-draft-model-path", "/models/draft",
            "--enable-metrics", "--trust-remote-code", "--reasoning-parser", "glm45", "--tool-call-parser", "glm47",
            "--disable-custom-all-reduce", "--disable-shared-experts-fusion", "--flashinfer-allreduce-fusion-backend",
            "auto", "--host", "0.0.0.0", "--port", "30000", "--log-level", "info",
        ],
        "errors": [], "warnings": [], "radix_cache_disabled": False,
        "radix_cache_reason": "patch record: dsa-fp8-page-table-guard is applied; radix cache kept",
        "flag_table": "0.5.23", "env": {}, "kv_cache_fp8": True,
    }  # fmt: skip
    off = render({**FULL, "cuda_graph_max_bs": None, "disable_cuda_graph": "True", "enable_metrics": False,
                  "trust_remote_code": "no"}, "0.5.23", record("applied"), "100")["argv"]  # fmt: skip
    assert off[off.index("8192") + 1 : off.index("--stream-interval")] == ["--disable-cuda-graph"]
    assert "--enable-metrics" not in off and "--trust-remote-code" not in off


def test_sm_120_as_written_anywhere_and_the_radix_reasons_read_whole() -> None:
    for arch in ("120", "sm_120", "12.0"):
        out = render({**FULL, "kv_cache_dtype": None}, "0.5.23", record("applied"), arch)
        assert "--flashinfer-allreduce-fusion-backend" not in out["argv"] and out["kv_cache_fp8"] is True  # auto: FP8
        assert out["warnings"] == [
            "sglang_server_enable_flashinfer_allreduce_fusion is a no-op on sm_120 (RTX PRO 6000): not rendered"
        ]
    absent = render(FULL, "0.5.23", record("absent"), "100")
    assert absent["warnings"] == [
        "patch record: dsa-fp8-page-table-guard is absent: --disable-chunked-prefix-cache added so FP8 DSA prefill "
        "never reads page_table_1_flattened (the radix cache stays on)"
    ]
    assert absent["radix_cache_reason"] == (
        "patch record: dsa-fp8-page-table-guard is absent; radix cache kept, chunked prefix cache off"
    )
    bf16 = render({**FULL, "kv_cache_dtype": "bf16"}, "0.5.23", record("absent"), "100")
    assert bf16["radix_cache_reason"] == "patch record: dsa-fp8-page-table-guard is absent; radix cache kept"
    off = render({**FULL, "radix_cache": "disabled"}, "0.5.23", "not a record", "100")
    assert off["radix_cache_reason"] == "sglang_server_radix_cache=disabled (guard status: missing)"
    no_status = render(FULL, "0.5.23", {"fixes": {GUARD: {"files": []}}}, "100")
    assert no_status["radix_cache_reason"].startswith("patch record: dsa-fp8-page-table-guard is missing; ")


def test_without_a_known_version_nothing_is_checked_and_the_error_names_every_setting_that_needs_one() -> None:
    plain = render(settings(), "", record("applied"), "120")
    assert (plain["errors"], plain["warnings"], plain["flag_table"]) == ([], [], "")
    both = render(settings(dsa_prefill_backend="flashmla_sparse", dsa_decode_backend="trtllm", cuda_graph_max_bs=8), None,
                  record("applied"), "100")  # fmt: skip
    assert both["errors"] == [
        "the image has no io.sglang-deploy.sglang.version label (None) and sglang_server_dsa_prefill_backend, "
        "sglang_server_dsa_decode_backend, sglang_server_cuda_graph_max_bs render differently per SGLang version: "
        "set sglang_server_sglang_version"
    ]
    assert sglangargv.parse_version("v0.5.23.post1") == (0, 5, 23) and sglangargv.parse_version(" 0.5") == (0, 5, 0)
    assert sglangargv.parse_version("latest") is None


def test_pcie_ipc_allreduce_messages_read_whole() -> None:
    unknown = render(settings(pcie_ipc_allreduce="true"), "", record("applied"), "120")
    assert unknown["env"] == {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"} and unknown["warnings"] == [
        "sglang_server_pcie_ipc_allreduce: the SGLang version is unknown; SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1 set "
        "(read from 0.5.21)"
    ]
    old = render(settings(pcie_ipc_allreduce=True), "0.5.20", record("applied"), "120")
    assert old["env"] == {} and old["warnings"] == [
        "sglang_server_pcie_ipc_allreduce: SGLang 0.5.20 has no SGLANG_ENABLE_PCIE_IPC_ALLREDUCE (0.5.21 and later): not "
        "set, all-reduce stays on NCCL / custom all-reduce"
    ]


@pytest.mark.parametrize(
    ("over", "gpus", "errors"),
    [
        ({"tp_size": 1}, 1, []),
        ({"port": 1}, 8, []),
        ({"port": 65535}, 8, []),
        ({"port": 65536}, 8, ["sglang_server_port must be in 1..65535, got 65536"]),
        ({"chunked_prefill_size": 0}, 8, ["sglang_server_chunked_prefill_size must be in 1 or more, got 0"]),
        ({"cuda_graph_max_bs": 0}, 8, ["sglang_server_cuda_graph_max_bs must be in 1 or more, got 0"]),
        ({"stream_interval": "0"}, 8, ["sglang_server_stream_interval must be in 1 or more, got 0"]),
        ({"mem_fraction_static": 1.0}, 8, ["sglang_server_mem_fraction_static must be a number in (0, 1), got 1.0"]),
        ({"mem_fraction_static": 0}, 8, ["sglang_server_mem_fraction_static must be a number in (0, 1), got 0"]),
        ({"mem_fraction_static": "0.9"}, 8, []),
        ({"disable_cuda_graph": "yes", "cuda_graph_max_bs": 8}, 8, [
            "sglang_server_cuda_graph_max_bs is set while sglang_server_disable_cuda_graph is true: contradictory, "
            "unset one of them"]),
        ({"extra_args": ["--port=31000"]}, 8, ["sglang_server_extra_args contains --port, which sglang_server_port already controls"]),
        ({"extra_args": ["--disable-radix-cache"]}, 8, [
            "sglang_server_extra_args contains --disable-radix-cache: use sglang_server_radix_cache (auto | enabled | "
            "disabled) instead, so it cannot contradict the patch record"]),
        ({"speculative": {"algorithm": "", "num_steps": 3, "eagle_topk": 2}}, 8, [
            "sglang_server_speculative sets eagle_topk, num_steps without an algorithm"]),
    ],
)  # fmt: skip
def test_each_rule_at_its_edge_reads_whole(over: dict, gpus: int, errors: list[str]) -> None:
    assert sglangargv.check_settings(settings(**over), gpus) == errors
