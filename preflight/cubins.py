"""An air-gapped B200 host needs an image that carries FlashInfer's prebuilt kernels: the one rule.

Why: on sm_100 (B200) and sm_103 (B300) FlashInfer 0.7.2 does not compile its trtllm-gen, DeepGEMM
and CuTe-DSL FMHA kernels, it fetches their binaries from NVIDIA's artifact repository at first use
(flashinfer/jit/cubin_loader.py). With FLASHINFER_NO_DOWNLOAD=1, which the roles set on air-gapped
hosts (gpu_host_offline, flashinfer_cache_no_download), the first such kernel stops the server. The
image says whether it carries them (label ``io.sglang-deploy.flashinfer.cubins``: ``baked`` from
``images/build.py sglang --with-cubins``, else ``none``) and which repository folders FlashInfer
fetches from (/etc/sglang-deploy/cubins.json). RTX PRO 6000 (sm_120) JIT-compiles what it runs
(FlashInfer's CUTLASS MoE, flashinfer_sparse_mla), so it needs none. The test engine needs none.

Preflight applies it before any host changes where the image's labels are known on the controller
(an offline archive: its NAME.json beside it, images/image_archive.py); the cache role applies it to
every host right after the image is delivered, before the host is drained
(roles/flashinfer_cache/tasks/cubins.yml), the registry's images included.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

LABEL = "io.sglang-deploy.flashinfer.cubins"
# GPU architectures whose FlashInfer kernels come as downloaded binaries (trtllm-gen's sm100f/sm103a)
FETCHING_ARCHES = frozenset({"100", "103"})


def fetches_kernels(gpu_arch: object) -> bool:
    """Whether FlashInfer fetches prebuilt kernels on this GPU arch ("100", "10.0", "sm_100", "100,100")."""
    digits = {d.replace(".", "") for d in re.findall(r"\d+(?:\.\d)?", str(gpu_arch))}
    return bool(digits & FETCHING_ARCHES)


def refusal(
    host: str,
    image: str,
    gpu_arch: object,
    no_download: bool,
    labels: Mapping[str, str],
    folders: Sequence[str] = (),
) -> str | None:
    """Why ``image`` cannot serve on ``host``, or None; names the folders FlashInfer would fetch."""
    if not no_download or not fetches_kernels(gpu_arch) or labels.get("io.sglang-deploy.engine") != "sglang":
        return None
    state = labels.get(LABEL) or "missing"
    if state == "baked":
        return None
    fi = labels.get("io.sglang-deploy.flashinfer.version") or "?"
    what = ", ".join(folders) + " from NVIDIA's artifact repository" if folders else "its kernel binaries"
    return (
        f"{host}: {image} carries no FlashInfer kernel binaries ({LABEL}={state}), and this B200-class host "
        f"(sm_{gpu_arch}) cannot download them (FLASHINFER_NO_DOWNLOAD: gpu_host_offline / "
        f"flashinfer_cache_no_download). FlashInfer {fi} fetches {what} at first use, so the server would stop "
        "at its first such kernel. Build the image with `python3 images/build.py sglang --with-cubins` on a host "
        "that reaches the repository (or `--cubins-repository MIRROR`), or let this host download "
        "(flashinfer_cache_no_download: false)."
    )


def archive_labels(archive: str) -> dict[str, str] | None:
    """The image labels an offline archive's NAME.json records (None when there is none to read)."""
    path = Path(archive)
    base = path.name.removesuffix(".gz").removesuffix(".tar")
    try:
        labels = json.loads(path.with_name(f"{base}.json").read_text()).get("labels")
    except (OSError, ValueError, AttributeError):
        return None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else None


def preflight_refusal(host: str, hv: Mapping[str, object], gpu_arch: str, offline: bool) -> str | None:
    """The rule for a host whose image comes as an archive the controller holds; None otherwise."""
    if hv.get("sglang_image_source") != "archive" or str(hv.get("sglang_image_archive_on_host")).lower() in (
        "true", "1", "yes", "on"):  # fmt: skip
        return None
    labels = archive_labels(str(hv.get("sglang_image_archive_path") or ""))
    if labels is None:
        return None
    no_download = hv.get("flashinfer_cache_no_download", offline)
    return refusal(host, str(hv.get("sglang_image")), gpu_arch, str(no_download).lower() in ("true", "1", "yes", "on"),
                   labels)  # fmt: skip
