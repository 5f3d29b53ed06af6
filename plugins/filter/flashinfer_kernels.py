"""FlashInfer's kernels, as the roles judge them (the rules live in the packages, once).

``argv | sglang_kernel_build(version)``: what a server start compiles kernels for
(``sglangflags.kernel_build``); the cache role compares it with the builds its volume's manifest
lists: a new SGLang release or other kernel settings under the same FlashInfer is a cold start.

``labels | flashinfer_cubins_refusal(host, image, gpu_arch, no_download, folders)``: why an image
without FlashInfer's kernel binaries cannot serve on an air-gapped B200-class host
(``preflight.cubins.refusal``), or "".
"""

from __future__ import annotations

from typing import Any

try:
    import sglangflags
    from preflight import cubins
except ImportError as exc:  # the controller runs outside the bundle's virtualenv
    raise ImportError(
        "the roles need the bundle's packages (sglangflags, preflight) on the Ansible controller: "
        "run ansible-playbook from the bundle's virtualenv (bash scripts/setup.sh && . .venv/bin/activate)"
    ) from exc


def sglang_kernel_build(argv: list[str], version: str) -> dict[str, str]:
    build = sglangflags.kernel_build(str(version), [str(a) for a in argv])
    return {"id": build.id, "about": build.about}


def flashinfer_cubins_refusal(
    labels: dict[str, str], host: str, image: str, gpu_arch: Any, no_download: bool, folders: list[str] | None = None
) -> str:
    return cubins.refusal(str(host), str(image), gpu_arch, bool(no_download), dict(labels or {}), folders or []) or ""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sglang_kernel_build": sglang_kernel_build, "flashinfer_cubins_refusal": flashinfer_cubins_refusal}
