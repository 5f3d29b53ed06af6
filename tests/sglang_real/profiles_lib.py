"""What the GPU-profile tests share: the roles' rendering of inventory/example, the cases handed to
SGLang's own ``ServerArgs`` (probe.py), and reading the rendered argv.

Two places run the probe: the CPU venv with real SGLang wheels and stand-ins for the GPU-only
kernels (tests/sglang_real/test_profiles.py, every CI run), and the built GPU image with its real
torch, FlashInfer and sgl_kernel (tests/images/test_gpu_image.py, the release check). Both fake only
the device facts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MODEL = REPO / "tests" / "fixtures" / "glm5-nvfp4-config"
RENDERED_MODEL = "/models/GLM-5-NVFP4"  # inventory/example's sglang_server_model_path
FLASHINFER = {"0.5.17": "0.6.15.post1", "0.5.23": "0.7.2"}  # the FlashInfer each release pins
DEVICES = {
    "rtx_pro_6000": ("12.0", 96, "NVIDIA RTX PRO 6000 Blackwell Server Edition"),
    "b200": ("10.0", 180, "NVIDIA B200"),
}
# Flags whose value the profile pins to SGLang's own choice: dropped, SGLang must choose the same.
PINNED = ("--attention-backend", "--dsa-prefill-backend", "--dsa-decode-backend", "--moe-runner-backend",
          "--kv-cache-dtype", "--chunked-prefill-size")  # fmt: skip


def without(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token in flags:
            skip = True
        else:
            out.append(token)
    return out


def pairs(argv: list[str]) -> dict[str, str]:
    return {a: b for a, b in zip(argv, [*argv[1:], ""], strict=True) if a.startswith("--") and not b.startswith("--")}


def render(release: str, out: Path) -> dict[str, dict[str, Any]]:
    """inventory/example rendered by the roles for ``release``: {profile: {argv, env, warnings, ...}}."""
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory/example", str(HERE / "render.yml"),
           "-e", f"render_out={out}", "-e", f"render_sglang_version={release}",
           "-e", f"render_flashinfer_version={FLASHINFER[release]}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


def cases(profile: str, argv: list[str], model: str) -> dict[str, list[str]]:
    """The argv as rendered ("profile"), without the pinned settings ("sglang": SGLang's own choice)
    and, on sm_120, with --attention-backend triton (the old recipe)."""
    argv = [model if a == RENDERED_MODEL else a for a in argv]
    out = {"profile": argv, "sglang": without(argv, PINNED)}
    if profile == "rtx_pro_6000":
        out["triton"] = [*without(argv, PINNED[:3]), "--attention-backend", "triton"]
    return out


def server_env(rendered: dict[str, Any]) -> dict[str, str]:
    """The SGLANG_* switches the profile hands the server (cache paths left out: no cache here)."""
    return {k: v for k, v in rendered["env"].items() if k.startswith("SGLANG_") and "CACHE" not in k}


def quant_only_in_hf_quant_config(dest: Path) -> Path:
    """The model folder as older ModelOpt exports lay it out: no ``quantization_config`` in config.json,
    only hf_quant_config.json beside it (SGLang reads that file then)."""
    dest.mkdir(parents=True, exist_ok=True)
    config = json.loads((MODEL / "config.json").read_text())
    config.pop("quantization_config")
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    shutil.copy2(MODEL / "hf_quant_config.json", dest / "hf_quant_config.json")
    return dest
