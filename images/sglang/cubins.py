"""Bake FlashInfer's prebuilt kernel binaries (trtllm-gen, DeepGEMM, cuDNN/CuTe-DSL FMHA) into the image.

Why: on B200 (sm_100) FlashInfer 0.7.2 does not compile these kernels, it fetches them from NVIDIA's
artifact repository at first use (``flashinfer/jit/cubin_loader.py``: into FLASHINFER_CUBIN_DIR,
each checked against the sha256 its release pins). An air-gapped host (FLASHINFER_NO_DOWNLOAD=1, the
roles' default there) stops at the first such kernel. Built with ``images/build.py sglang
--with-cubins`` on a build host that can reach the repository (or a mirror of it:
``--cubins-repository``), every artifact of the pinned FlashInfer lands in /opt/flashinfer-cubins and
the image's FLASHINFER_CUBIN_DIR points there; the label ``io.sglang-deploy.flashinfer.cubins`` says
``baked`` and the roles let such an image onto air-gapped sm_100 hosts (they refuse one that says
``none``, naming what it lacks).

``flashinfer download-cubin`` reports a failed download and still exits 0, so this checks the result
itself with FlashInfer's own status of every artifact, and fails naming the missing ones.

    FLASHINFER_CUBIN_DIR=/opt/flashinfer-cubins python3 cubins.py download
    python3 cubins.py status      # JSON: {"dir", "present", "missing": [...]}
"""

from __future__ import annotations

import json
import sys


def status() -> dict[str, object]:
    from flashinfer.artifacts import get_artifacts_status
    from flashinfer.jit.env import FLASHINFER_CUBIN_DIR

    files = get_artifacts_status()
    return {
        "dir": str(FLASHINFER_CUBIN_DIR),
        "present": sum(1 for _, ok in files if ok),
        "missing": sorted(name for name, ok in files if not ok),
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["download"]:
        from flashinfer.artifacts import download_artifacts

        download_artifacts()
    elif argv[:1] != ["status"]:
        print("usage: cubins.py download|status", file=sys.stderr)
        return 2
    try:
        found = status()
    except Exception as exc:  # FlashInfer raises several types when the checksums are unreachable
        print(f"cubins: FlashInfer cannot list its artifacts: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(found))
    if found["missing"] or not found["present"]:
        missing = found["missing"]
        print(f"cubins: {len(missing)} artifacts missing in {found['dir']}: {', '.join(missing[:10])}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
