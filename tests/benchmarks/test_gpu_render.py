"""benchmarks/gpu/render.yml renders, through the real roles, what real_sglang.py starts on the H200.

The device run is only evidence for the roles if the server there got the roles' argv and
cache environment; this runs the same playbook on the controller and checks both, value by value.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MOUNT = "/root/.cache/flashinfer"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("render")
    playbook = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) or "ansible-playbook"
    proc = subprocess.run(
        [playbook, "-i", "benchmarks/gpu/inventory.yml", "benchmarks/gpu/render.yml", "-e", f"render_out={out}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {name: json.loads((out / f"rendered-{name}.json").read_text()) for name in ("serve", "overflow")}


def test_serving_argv_is_the_roles_for_an_sm90_host(rendered):
    assert rendered["serve"]["command"] == [
        "python3", "-m", "sglang.launch_server",
        "--model-path", "/models/random-llama-0.9b", "--served-model-name", "random-llama-0.9b",
        "--tp-size", "1", "--kv-cache-dtype", "auto", "--attention-backend", "triton", "--enable-metrics",
        "--host", "127.0.0.1", "--port", "30000",
    ]  # fmt: skip
    assert rendered["serve"]["warnings"] == []


def test_overflow_rendering_adds_only_the_small_queue(rendered):
    serve, overflow = rendered["serve"]["command"], rendered["overflow"]["command"]
    assert [a for a in overflow if a not in serve] == ["--max-running-requests", "8", "--max-queued-requests", "4"]
    assert rendered["overflow"]["env"] == rendered["serve"]["env"]


def test_every_cache_variable_points_into_the_keyed_volume(rendered):
    spec = rendered["serve"]
    assert spec["cache_key"] == "fi0.6.15.post1-cu13.0-sm90-al9.0a"
    assert spec["mounts"] == [{"type": "volume", "source": f"flashinfer-cache-{spec['cache_key']}", "target": MOUNT}]
    env = dict(spec["env"])
    assert env.pop("FLASHINFER_WORKSPACE_BASE") == "/root"  # FlashInfer appends .cache/flashinfer itself
    assert env.pop("FLASHINFER_CUDA_ARCH_LIST") == "9.0a"
    assert set(env) == {
        "SGLANG_CACHE_DIR", "SGLANG_JIT_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH",
        "TVM_FFI_CACHE_DIR", "SGLANG_DG_CACHE_DIR", "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR",
    }  # fmt: skip
    assert all(value.startswith(MOUNT + "/") for value in env.values()), env


def test_bench_serving_gets_the_prompt_count_and_lengths_where_they_belong():
    """The run that compared the gate with bench_serving at 1,024 prompts passed 1024 as the input
    length and kept 256 prompts: each value must reach its own flag."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "real_sglang.py"
    spec = importlib.util.spec_from_file_location("real_sglang", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    argv = mod.bench_argv(Path("/tmp/x.jsonl"), 3, 1024)
    flag = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    assert (flag["--num-prompts"], flag["--random-input-len"], flag["--random-output-len"]) == ("1024", "256", "128")
    assert (flag["--random-range-ratio"], flag["--seed"], flag["--request-rate"]) == ("1.0", "3", "inf")
