"""FlashInfer's prebuilt kernels (trtllm-gen, DeepGEMM, CuTe-DSL FMHA): baked into the image or not, and recorded.

Why: on B200 (sm_100) FlashInfer 0.7.2 does not compile these kernels, it fetches them from NVIDIA's
artifact repository at first use (``flashinfer/jit/cubin_loader.py``: into FLASHINFER_CUBIN_DIR,
each checked against the sha256 its release pins). An air-gapped host (FLASHINFER_NO_DOWNLOAD=1, the
roles' default there) stops at the first such kernel. Built with ``images/build.py sglang
--with-cubins`` on a build host that can reach the repository (or a mirror of it:
``--cubins-repository``), every artifact of the pinned FlashInfer lands in /opt/flashinfer-cubins
and the image's FLASHINFER_CUBIN_DIR points there.

Either way the build writes /etc/sglang-deploy/cubins.json: ``state`` (``baked`` or ``none``) and
the artifact folders FlashInfer fetches from (read offline from its own ``ArtifactPath``), which the
sglang_image role reads to refuse an image without them for air-gapped sm_100 hosts, naming them.

``flashinfer download-cubin`` reports a failed download and still exits 0, so ``download`` checks
the result itself with FlashInfer's own status of every artifact and fails naming the missing ones.

    FLASHINFER_CUBIN_DIR=/opt/flashinfer-cubins python3 cubins.py download --record /etc/sglang-deploy/cubins.json
    python3 cubins.py record /etc/sglang-deploy/cubins.json          # state none: what would be fetched
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path


def artifact_folders() -> list[str]:
    """The repository folders FlashInfer fetches kernels from on this CPU (offline: its own constants)."""
    from flashinfer.artifacts import ArtifactPath

    cpu = "aarch64" if platform.machine() in ("aarch64", "arm64") else "x86_64"
    fixed = [ArtifactPath.TRTLLM_GEN_FMHA, ArtifactPath.TRTLLM_GEN_BMM, ArtifactPath.TRTLLM_GEN_GEMM,
             ArtifactPath.DEEPGEMM]  # fmt: skip
    return [*fixed, *(f"{ArtifactPath.DSL_FMHA}{cpu}/{arch}/" for arch in ArtifactPath.DSL_FMHA_ARCHS)]


def status() -> dict[str, object]:
    """FlashInfer's own status of every artifact in FLASHINFER_CUBIN_DIR (reads the checksums it fetched)."""
    from flashinfer.artifacts import get_artifacts_status
    from flashinfer.jit.env import FLASHINFER_CUBIN_DIR

    files = get_artifacts_status()
    return {
        "dir": str(FLASHINFER_CUBIN_DIR),
        "present": sum(1 for _, ok in files if ok),
        "missing": sorted(name for name, ok in files if not ok),
    }


def record(out: Path, state: str, found: dict[str, object] | None = None) -> dict[str, object]:
    import flashinfer

    doc = {"state": state, "flashinfer_version": flashinfer.__version__, "artifact_folders": artifact_folders(),
           **(found or {})}  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "record":
        print(json.dumps(record(Path(argv[1]), "none")))
        return 0
    if len(argv) != 3 or argv[:2] != ["download", "--record"]:
        print("usage: cubins.py download --record FILE | cubins.py record FILE", file=sys.stderr)
        return 2
    from flashinfer.artifacts import download_artifacts

    try:
        download_artifacts()
        found = status()
    except Exception as exc:  # FlashInfer raises several types when the repository is unreachable
        print(f"cubins: FlashInfer could not fetch or list its artifacts: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    missing = found["missing"]
    if missing or not found["present"]:
        print(f"cubins: {len(missing)} artifacts missing in {found['dir']}: {', '.join(missing[:10])}", file=sys.stderr)  # type: ignore[arg-type]
        return 1
    print(json.dumps(record(Path(argv[2]), "baked", found)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
