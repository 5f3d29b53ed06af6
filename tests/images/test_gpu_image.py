"""The built production GPU image, inside itself (no GPU): the release check's tests.

Run by `bash scripts/test.sh gpu-image` (benchmarks/gpu_image.py), after building the image with
`python3 images/build.py sglang --local-cuda-base`; never by CI (marker ``gpu_image``). Everything
here runs in a container of the image, with the network off: SGLang's own launcher and parser,
the gate's imports, and SGLang's own ``ServerArgs`` resolution of what the roles render for the
RTX PRO 6000 and B200 profiles, with the image's real torch, FlashInfer and sgl_kernel. Only the
device facts are faked (tests/sglang_real/probe.py: compute capability, count, memory, and the
CUDA driver stub on the loader's path for the kernels' import).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from images_testlib import IMAGES, REPO

sys.path.insert(0, str(REPO / "tests" / "sglang_real"))
import profiles_lib
from profiles_lib import DEVICES, MODEL, pairs

import sglangflags

pytestmark = [pytest.mark.gpu_image, pytest.mark.docker]

IMAGE = os.environ.get("SGLANG_GPU_IMAGE", "local/sglang-glm5:0.5.23-cu130-local")
RELEASE = "0.5.23"
# the driver stub under the name the loader looks for, for imports that link libcuda (sgl_kernel)
WITH_STUB = 'mkdir -p /tmp/stub && ln -sf /usr/local/cuda/lib64/stubs/libcuda.so /tmp/stub/libcuda.so.1 && exec sh "$@"'


def docker_run(*cmd: str, mounts: dict[Path, str] | None = None, env: dict[str, str] | None = None,
               timeout: int = 600) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``cmd`` in a throwaway container of the image: no network, the driver stub on LD_LIBRARY_PATH."""
    args = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh",
            "-e", "LD_LIBRARY_PATH=/tmp/stub", "-e", "HF_HUB_OFFLINE=1", "-e", "TRANSFORMERS_OFFLINE=1"]  # fmt: skip
    for host, target in (mounts or {}).items():
        args += ["-v", f"{host}:{target}:ro"]
    for key, value in (env or {}).items():
        args += ["-e", f"{key}={value}"]
    return subprocess.run([*args, IMAGE, "-c", WITH_STUB, "with-stub", *cmd], capture_output=True, text=True,
                          check=False, timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def labels() -> dict[str, str]:
    proc = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.fail(f"{IMAGE} is not built: python3 images/build.py sglang --local-cuda-base --tag {IMAGE}")
    return json.loads(proc.stdout)[0]["Config"]["Labels"]


def test_labels_say_what_the_image_is(labels: dict[str, str]) -> None:
    assert labels["io.sglang-deploy.engine"] == "sglang"
    assert labels["io.sglang-deploy.install-mode"] == "gpu"
    assert labels["io.sglang-deploy.sglang.version"] == RELEASE
    assert labels["io.sglang-deploy.flashinfer.version"] == "0.7.2"
    assert labels["io.sglang-deploy.cuda.version"] == "13.0"
    assert labels["io.sglang-deploy.patches"] == "autotune-flashinfer-cutlass=upstream,dsa-fp8-page-table-guard=applied"


def test_the_patch_record_matches_the_label_and_the_patched_file_compiles(labels: dict[str, str]) -> None:
    proc = docker_run("-c", "cat /etc/sglang-deploy/patches.json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert (record["engine"], record["sglang_version"], record["flashinfer_version"]) == ("sglang", RELEASE, "0.7.2")
    assert (
        ",".join(f"{k}={v['status']}" for k, v in sorted(record["fixes"].items())) == labels["io.sglang-deploy.patches"]
    )
    patched = record["fixes"]["dsa-fp8-page-table-guard"]["files"]
    code = (
        "import importlib, sys; [importlib.import_module(f[:-3].replace('/', '.')) for f in sys.argv[1:]]; print('ok')"
    )
    proc = docker_run("-c", 'exec python3 -c "$0" "$@"', code, *patched)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_every_locked_package_is_installed_at_its_pinned_version() -> None:
    lock = {name: pin.version for name, pin in image_wheelhouse().read_lock().items()}
    code = (
        "import importlib.metadata as m, json, re; "
        "print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version for d in m.distributions()}))"
    )
    proc = docker_run("-c", 'exec /opt/venv/bin/python -c "$0"', code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    installed = json.loads(proc.stdout)
    assert {name: installed.get(name) for name in lock} == lock
    assert set(installed) - set(lock) <= {"pip"}, "packages outside the lock"


def image_wheelhouse() -> Any:
    sys.path.insert(0, str(IMAGES))
    import wheelhouse

    return wheelhouse


def test_launch_server_help_runs() -> None:
    proc = docker_run("-c", "exec python3 -m sglang.launch_server --help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for flag in ("--model-path", "--dsa-prefill-backend", "--moe-runner-backend", "--kv-cache-dtype"):
        assert flag in proc.stdout


def test_every_module_of_validate_imports(labels: dict[str, str]) -> None:
    """The gate runs in this image (sglang_gate_location: host): each of its modules imports here,
    google-re2 included, and users' patterns run on RE2, not on Python's re."""
    code = (
        "import importlib, pathlib, sys; sys.path.insert(0, '/opt/sglang-deploy'); "
        "mods = sorted('validate.' + p.stem for p in pathlib.Path('/opt/sglang-deploy/validate').glob('*.py') "
        "if p.stem != '__main__'); bad = []\n"
        "for m in mods:\n"
        "    try: importlib.import_module(m)\n"
        "    except Exception as e: bad.append(f'{m}: {type(e).__name__}: {e}')\n"
        "import re2; print(len(mods), bad)"
    )
    proc = docker_run("-c", 'exec python3 -c "$0"', code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    count, bad = proc.stdout.strip().split(" ", 1)
    assert bad == "[]" and int(count) >= 10, proc.stdout
    gate = docker_run("-c", "cd /opt/sglang-deploy && exec python3 -m validate --help")
    assert gate.returncode == 0 and "gate" in gate.stdout, gate.stderr[-2000:]
    assert labels["io.sglang-deploy.validate.version"] not in ("", "unknown")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return profiles_lib.render(RELEASE, tmp_path_factory.mktemp("render"))


@pytest.fixture(scope="module")
def resolved(rendered: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Per profile, SGLang's resolution in the image: the rendered argv ("profile"), without the pinned
    settings ("sglang"), the old triton recipe on sm_120, and the profile with the model folder of an
    older ModelOpt export (quantization only in hf_quant_config.json)."""
    tmp = tmp_path_factory.mktemp("probe")
    older = profiles_lib.quant_only_in_hf_quant_config(tmp / "model-hf-quant")
    out = {}
    for profile, r in rendered.items():
        capability, memory, name = DEVICES[profile]
        argvs = profiles_lib.cases(profile, r["argv"], "/model")
        argvs["hf_quant_config"] = [("/model-hf-quant" if a == "/model" else a) for a in argvs["profile"]]
        (tmp / f"{profile}.json").write_text(json.dumps(argvs))
        proc = docker_run(
            "-c", 'exec python3 /probe/probe.py --real-kernels "$@"', "probe", "--capability", capability,
            "--gpus", "8", "--memory-gib", str(memory), "--name", name, "--cases", f"/work/{profile}.json",
            mounts={REPO / "tests" / "sglang_real": "/probe", MODEL: "/model", older: "/model-hf-quant", tmp: "/work"},
            env=profiles_lib.server_env(r),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-4000:]
        out[profile] = json.loads(proc.stdout)
    return out


def test_the_real_kernels_were_imported_not_stand_ins(resolved: dict[str, Any]) -> None:
    modules = resolved["b200"]["modules"]
    assert resolved["b200"]["sglang_version"] == RELEASE
    assert modules["sgl_kernel"] and modules["sgl_kernel"].startswith("/opt/venv/"), modules
    assert modules["flashinfer"] and modules["flashinfer"].startswith("/opt/venv/"), modules
    assert modules["torch"].startswith("/opt/venv/")


EXPECTED = {
    # attention, DSA prefill, DSA decode, KV dtype, MoE runner, the MTP draft's MoE runner
    "rtx_pro_6000": ("dsa", "flashinfer_sparse_mla", "flashinfer_sparse_mla", "fp8_e4m3", "flashinfer_cutlass",
                     "flashinfer_cutlass"),
    "b200": ("dsa", "trtllm", "trtllm", "fp8_e4m3", "flashinfer_trtllm", "flashinfer_trtllm"),
}  # fmt: skip


@pytest.mark.parametrize("profile", sorted(DEVICES))
@pytest.mark.parametrize("case", ["profile", "sglang", "hf_quant_config"])
def test_sglang_in_the_image_resolves_each_profile_as_pinned(profile: str, case: str, resolved, rendered) -> None:
    """The rendered argv, SGLang's own choice without the pinned flags, and the older export's layout
    all resolve to the profile's backends, in the image's real SGLang with its real kernels."""
    got = resolved[profile]["cases"][case]["resolved"]
    attention, dsa_prefill, dsa_decode, kv, moe, draft_moe = EXPECTED[profile]
    assert (got["attention_backend"], got["dsa_prefill_backend"], got["dsa_decode_backend"]) == (
        attention, dsa_prefill, dsa_decode)  # fmt: skip
    # no separate prefill/decode attention backend: both phases run the attention backend (DSA)
    assert (got["prefill_attention_backend"], got["decode_attention_backend"]) == (None, None)
    assert got["kv_cache_dtype"] == kv and got["moe_runner_backend"] == moe
    assert (got["speculative_moe_runner_backend"], got["speculative_moe_a2a_backend"]) == (draft_moe, None)
    assert got["quantization"] == "modelopt_fp4"
    assert got["page_size"] == 64
    assert got["speculative_algorithm"] == "EAGLE" and got["speculative_num_draft_tokens"] == 4
    argv = pairs(rendered[profile]["argv"])
    if case == "profile":
        assert got["moe_runner_backend"] == argv["--moe-runner-backend"]
        assert got["dsa_decode_backend"] == argv["--dsa-decode-backend"]


def test_allreduce_choices(resolved, rendered) -> None:
    """sm_100: custom all-reduce kept and FlashInfer's all-reduce fusion backend chosen by SGLang for GLM
    DSA; the PCIe-linked RTX PRO 6000: no custom all-reduce and the PCIe IPC all-reduce switch on."""
    for case in ("profile", "sglang"):
        b200 = resolved["b200"]["cases"][case]["resolved"]
        rtx = resolved["rtx_pro_6000"]["cases"][case]["resolved"]
        assert (b200["disable_custom_all_reduce"], b200["flashinfer_allreduce_fusion_backend"]) == (False, "auto")
        assert (rtx["disable_custom_all_reduce"], rtx["flashinfer_allreduce_fusion_backend"]) == (True, None)
        assert b200["enable_flashinfer_allreduce_fusion"] is rtx["enable_flashinfer_allreduce_fusion"] is False
    assert "--disable-custom-all-reduce" in rendered["rtx_pro_6000"]["argv"]
    assert "--disable-custom-all-reduce" not in rendered["b200"]["argv"]
    assert resolved["rtx_pro_6000"]["environment"]["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] is True
    assert resolved["b200"]["environment"]["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] is False


def test_the_flag_table_is_what_the_image_parser_accepts(resolved) -> None:
    """sglangflags' 0.5.23 table (read from the wheel) vs the installed release's own argparse."""
    parser = resolved["b200"]["parser"]
    table = sglangflags.load(RELEASE)[0]["flags"]
    assert sorted(table) == sorted(parser)
    assert {f: table[f]["value"] for f in table} == {f: parser[f]["value"] for f in parser}
    # choices the wheel's AST spells out, and those it computes at run time ("dynamic" in the table)
    choices = {f: sorted(map(str, e["choices"])) for f, e in table.items() if isinstance(e.get("choices"), list)}
    assert {f: parser[f]["choices"] for f in choices} == choices
    assert {f for f, p in parser.items() if p["choices"]} == {f for f, e in table.items() if e.get("choices")}


def test_the_cubin_record_names_what_flashinfer_would_fetch_on_b200(labels: dict[str, str]) -> None:
    """Built without --with-cubins: the label says none, FlashInfer's kernel folder stays its default
    (in the cache volume), and the record lists the repository folders it fetches from, which the
    roles name when they refuse this image for an air-gapped sm_100 host."""
    assert labels["io.sglang-deploy.flashinfer.cubins"] == "none"
    proc = docker_run("-c", 'cat /etc/sglang-deploy/cubins.json; echo "$FLASHINFER_CUBIN_DIR"')
    assert proc.returncode == 0, proc.stderr
    record_text, cubin_dir = proc.stdout.rsplit("}", 1)
    record = json.loads(record_text + "}")
    assert cubin_dir.strip() == "/root/.cache/flashinfer/cubins"
    assert record["state"] == "none" and record["flashinfer_version"] == "0.7.2"
    folders = record["artifact_folders"]
    assert any(f.endswith("/fmha/trtllm-gen/") for f in folders) and any(f.endswith("/deep-gemm/") for f in folders)
    assert any(f.endswith("/fmha/cute-dsl/x86_64/sm_100a/") for f in folders), folders
