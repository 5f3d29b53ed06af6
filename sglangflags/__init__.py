"""SGLang's ``launch_server`` flags per release: the committed tables and the one reader of them.

``sglangflags/tables/sglang-<version>.json`` holds every flag a release's ``launch_server``
accepts (its value, choices, deprecation, and the ``--no-*`` form of each optional boolean),
read from that release's wheel by ``images/flags/extract.py``; ``environment`` lists the
``SGLANG_*`` switches the release reads (its ``environ.py``).

An importable package (stdlib only) because three places read it: the roles' filter plugin
on the Ansible controller, the test engine in its minimal image, and the tests. Each words
the problems its own way (an inventory variable for the roles, argparse's message for the
test engine).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TABLES = Path(__file__).resolve().parent / "tables"


def version_key(text: str) -> tuple[int, ...]:
    """'0.5.12.post1' -> (0, 5, 12, 1); '0.5.12' -> (0, 5, 12, 0); () when not a version."""
    m = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?post(\d+))?", str(text))
    return tuple(int(g) for g in m.groups(default="0")) if m else ()


def load(version: str, tables: Path = TABLES) -> tuple[dict[str, Any] | None, str]:
    """The release's own table, else the newest older one (with a note); None (and why) if none fits."""
    found = {p.name[len("sglang-") : -len(".json")]: p for p in tables.glob("sglang-*.json")}
    want = version_key(version)
    if not want or not found:
        return None, f"no flag table for SGLang {version!r} in {tables}"
    if str(version).strip() in found:
        return json.loads(found[str(version).strip()].read_text()), ""
    older = sorted((v for v in found if version_key(v) <= want), key=version_key)
    if not older:
        oldest = min(found, key=version_key)
        return None, f"SGLang {version} is older than every supported release (oldest table: {oldest})"
    return json.loads(
        found[older[-1]].read_text()
    ), f"SGLang {version} has no flag table: checked against {older[-1]}'s"


@dataclass(frozen=True)
class Problem:
    """One thing the release's launch_server says about a flag of the argv."""

    kind: str  # "unknown" | "choice" (refused) | "deprecated" | "deprecated_value" (warnings)
    flag: str
    value: str | None = None
    detail: str = ""  # allowed choices, the new flag, or the value a deprecated one becomes


def check(argv: list[str], table: dict[str, Any], skip_prefix: str = "") -> list[Problem]:
    """Every flag must exist in the release, and each value be one of its choices."""
    flags = table["flags"]
    deprecated_values = table.get("deprecated_values") or {}
    out: list[Problem] = []
    i = 0
    while i < len(argv):
        token = str(argv[i])
        i += 1
        if not token.startswith("--") or (skip_prefix and token.startswith(skip_prefix)):
            continue
        flag, eq, inline = token.partition("=")
        entry = flags.get(flag)
        if entry is None:
            out.append(Problem("unknown", flag))
            continue
        value = inline if eq else None
        if entry.get("value") and value is None and i < len(argv):
            value = str(argv[i])
            i += 1
        if entry.get("deprecated"):
            out.append(Problem("deprecated", flag, value, entry.get("new_flag") or ""))
        choices = entry.get("choices")
        if value is not None and isinstance(choices, list) and choices and value not in [str(c) for c in choices]:
            out.append(Problem("choice", flag, value, ", ".join(str(c) for c in choices)))
        renamed = (deprecated_values.get(flag) or {}).get(value or "")
        if renamed:
            out.append(Problem("deprecated_value", flag, value, renamed))
    return out


# The launch_server flags whose values decide which kernels a start compiles or tunes (FlashInfer JIT
# modules, its autotune results, DeepGEMM, Triton): the attention and MoE backends, the KV-cache and
# weight formats, the speculative (MTP) draft, the parallel layout and CUDA-graph sizes (autotune shapes),
# the all-reduce fusion, and the model itself. Two starts that differ in one of these (or in the SGLang
# release) need modules the other did not build, even under the same FlashInfer.
KERNEL_FLAGS = (
    "--model-path", "--attention-backend", "--prefill-attention-backend", "--decode-attention-backend",
    "--dsa-prefill-backend", "--dsa-decode-backend", "--nsa-prefill-backend", "--nsa-decode-backend",
    "--moe-runner-backend", "--moe-a2a-backend", "--kv-cache-dtype", "--quantization", "--dtype",
    "--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
    "--speculative-num-draft-tokens", "--speculative-moe-runner-backend", "--tp-size", "--ep-size", "--dp-size",
    "--enable-dp-attention", "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode", "--disable-cuda-graph",
    "--enable-flashinfer-allreduce-fusion", "--flashinfer-allreduce-fusion-backend",
    "--disable-shared-experts-fusion",
)  # fmt: skip


@dataclass(frozen=True)
class KernelBuild:
    """What a start compiles for: ``id`` to compare (release + digest of the kernel flags), ``about`` to read."""

    id: str
    about: str


def kernel_build(version: str, argv: list[str]) -> KernelBuild:
    """The kernel build of a ``launch_server`` argv under SGLang ``version``.

    The cache role records it in the volume's manifest when a start's gate passes, and counts a later
    start warm only when its build is there (a new release or profile under the same FlashInfer is a
    cold start, with the cold deadline). Flags are read as ``--flag value`` or ``--flag=value``; a
    boolean flag counts as ``true``; the order of flags does not matter."""
    chosen: dict[str, str] = {}
    tokens = list(argv)
    for i, token in enumerate(tokens):
        name, eq, inline = token.partition("=")
        if name not in KERNEL_FLAGS:
            continue
        if eq:
            chosen[name] = inline
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            chosen[name] = tokens[i + 1]
        else:
            chosen[name] = "true"
    about = ", ".join([f"sglang {version}", *(f"{k} {v}" for k, v in sorted(chosen.items()))])
    digest = hashlib.sha256(about.encode()).hexdigest()[:12]
    return KernelBuild(f"sglang{version}-{digest}", about)
