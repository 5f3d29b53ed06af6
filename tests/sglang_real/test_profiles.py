"""The GPU profiles are what SGLang itself resolves, and the flag tables are what its parser accepts.

Real SGLang 0.5.17 and 0.5.23 (their PyPI wheels, CPU PyTorch; cpu_env.py), only the device facts
faked (probe.py): the argv the roles render for inventory/example's rtx_pro_6000 (sm_120) and b200
(sm_100) hosts goes through SGLang's own parser and ServerArgs resolution, against GLM-5-NVFP4's
config.json (tests/fixtures/glm5-nvfp4-config). Each profile pins SGLang's choices; a release that
resolves differently fails here, not on a fleet.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cpu_env  # noqa: E402
from profiles_lib import DEVICES, FLASHINFER, MODEL, cases, pairs, render, server_env  # noqa: E402

import sglangflags  # noqa: E402

pytestmark = [pytest.mark.network, pytest.mark.slow]


@pytest.fixture(scope="module", params=sorted(FLASHINFER))
def release(request: pytest.FixtureRequest) -> str:
    cpu_env.ensure((request.param,))
    return request.param


@pytest.fixture(scope="module")
def rendered(release: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """inventory/example rendered by the roles for this release: {profile: {argv, env, ...}}."""
    return render(release, tmp_path_factory.mktemp(f"render-{release}"))


def probe(release: str, profile: str, argvs: dict[str, list[str]], env: dict[str, str], tmp: Path) -> dict[str, Any]:
    capability, memory, name = DEVICES[profile]
    spec = tmp / f"cases-{profile}.json"
    spec.write_text(json.dumps(argvs))
    proc = subprocess.run(
        [str(cpu_env.venv_python()), str(HERE / "probe.py"), "--capability", capability, "--gpus", "8",
         "--memory-gib", str(memory), "--name", name, "--cases", str(spec)],
        capture_output=True, text=True, check=False, timeout=600,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp), "PYTHONPATH": cpu_env.pythonpath(release),
             "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **env},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def resolved(release: str, rendered: dict[str, dict[str, Any]], tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Per profile: SGLang's resolution of the rendered argv ("profile"), of the argv without the pinned
    settings ("sglang", SGLang's own choice) and, on sm_120, of --attention-backend triton."""
    tmp = tmp_path_factory.mktemp(f"probe-{release}")
    return {
        profile: probe(release, profile, cases(profile, r["argv"], str(MODEL)), server_env(r), tmp)
        for profile, r in rendered.items()
    }


def test_both_profiles_were_rendered(rendered: dict[str, dict[str, Any]]) -> None:
    assert sorted(rendered) == ["b200", "rtx_pro_6000"]
    assert rendered["rtx_pro_6000"]["gpu_arch"] == "120" and rendered["b200"]["gpu_arch"] == "100"


@pytest.mark.parametrize("profile", sorted(DEVICES))
def test_sglang_keeps_every_setting_the_profile_renders(profile: str, rendered, resolved, release: str) -> None:
    argv = pairs(rendered[profile]["argv"])
    got = resolved[profile]["cases"]["profile"]["resolved"]
    assert resolved[profile]["sglang_version"] == release
    assert got["attention_backend"] == argv["--attention-backend"] == "dsa"
    assert (got["dsa_prefill_backend"], got["dsa_decode_backend"]) == (
        argv["--dsa-prefill-backend"],
        argv["--dsa-decode-backend"],
    )
    assert got["kv_cache_dtype"] == argv["--kv-cache-dtype"] == "fp8_e4m3"
    assert got["moe_runner_backend"] == argv["--moe-runner-backend"]
    assert got["chunked_prefill_size"] == int(argv["--chunked-prefill-size"])
    assert got["mem_fraction_static"] == float(argv["--mem-fraction-static"])
    assert got["max_running_requests"] == int(argv["--max-running-requests"]) == 1024
    assert got["page_size"] == 64  # DSA's page size
    assert [got["speculative_algorithm"], got["speculative_num_steps"], got["speculative_eagle_topk"],
            got["speculative_num_draft_tokens"]] == ["EAGLE", 3, 1, 4]  # fmt: skip
    assert got["disable_custom_all_reduce"] is ("--disable-custom-all-reduce" in rendered[profile]["argv"])
    assert got["disable_shared_experts_fusion"] is True


@pytest.mark.parametrize("profile", sorted(DEVICES))
def test_each_pinned_setting_is_what_sglang_picks_itself(profile: str, rendered, resolved) -> None:
    """Without the pinned flags, SGLang resolves the same backends, dtype and chunk size on that GPU."""
    pinned = resolved[profile]["cases"]["profile"]["resolved"]
    own = resolved[profile]["cases"]["sglang"]["resolved"]
    keys = ("attention_backend", "dsa_prefill_backend", "dsa_decode_backend", "moe_runner_backend", "kv_cache_dtype",
            "chunked_prefill_size", "page_size")  # fmt: skip
    assert {k: own[k] for k in keys} == {k: pinned[k] for k in keys}
    expected = {
        "rtx_pro_6000": ("flashinfer_sparse_mla", "flashinfer_cutlass", 8192),
        "b200": ("trtllm", "flashinfer_trtllm", 16384),
    }
    assert (own["dsa_decode_backend"], own["moe_runner_backend"], own["chunked_prefill_size"]) == expected[profile]


def test_sm100_gets_the_allreduce_fusion_sglang_enables_for_glm_dsa(resolved) -> None:
    own = resolved["b200"]["cases"]["sglang"]["resolved"]
    assert own["flashinfer_allreduce_fusion_backend"] == "auto" and own["disable_shared_experts_fusion"] is True


def test_triton_attention_is_kept_silently_on_sm120_which_is_why_the_profile_does_not_use_it(resolved) -> None:
    """The old profile's --attention-backend triton: SGLang keeps it (dense MLA, the DSA indexer idle)."""
    got = resolved["rtx_pro_6000"]["cases"]["triton"]["resolved"]
    assert got["attention_backend"] == "triton" and got["kv_cache_dtype"] == "fp8_e4m3"


def test_pcie_ipc_allreduce_reaches_sglang_where_it_reads_it(release: str, resolved, rendered) -> None:
    env_rtx = rendered["rtx_pro_6000"]["env"].get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE")
    read = resolved["rtx_pro_6000"]["environment"].get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE")
    if release == "0.5.17":  # no such switch there: the role does not set it, and says so
        assert env_rtx is None and read is None
        assert any("has no SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" in w for w in rendered["rtx_pro_6000"]["warnings"])
    else:
        assert env_rtx == "1" and read is True
        assert resolved["b200"]["environment"]["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] is False


def test_the_flag_table_is_what_the_release_parser_accepts(release: str, resolved) -> None:
    """sglangflags' table vs SGLang's own argparse parser: flags, --no-* forms, which take a value."""
    parser = resolved["b200"]["parser"]
    table = sglangflags.load(release)[0]["flags"]
    assert sorted(table) == sorted(parser)
    assert {f: table[f]["value"] for f in table} == {f: parser[f]["value"] for f in parser}
    negations = [f for f in parser if f.startswith("--no-") and f[5:] and f"--{f[5:]}" in parser]
    assert all(table[f].get("negates") == f"--{f[5:]}" for f in negations)
    marked = {f for f, p in parser.items() if "Deprecated" in p["action"]}
    assert marked <= {f for f, e in table.items() if e.get("deprecated")}
