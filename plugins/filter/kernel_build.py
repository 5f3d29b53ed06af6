"""``argv | sglang_kernel_build(version)``: what a server start compiles kernels for (sglangflags.kernel_build).

The cache role compares it with the builds its volume's manifest lists: a new SGLang release or other
kernel settings under the same FlashInfer is a cold start (the cold deadline), never "warm".
"""

from __future__ import annotations

from typing import Any

try:
    import sglangflags
except ImportError as exc:  # the controller runs outside the bundle's virtualenv
    raise ImportError(
        "the roles need the bundle's sglangflags package on the Ansible controller: "
        "run ansible-playbook from the bundle's virtualenv (bash scripts/setup.sh && . .venv/bin/activate)"
    ) from exc


def sglang_kernel_build(argv: list[str], version: str) -> dict[str, str]:
    build = sglangflags.kernel_build(str(version), [str(a) for a in argv])
    return {"id": build.id, "about": build.about}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sglang_kernel_build": sglang_kernel_build}
