"""Catch misspelt inventory variables before any host changes.

Ansible silently ignores a variable no role reads, so ``sglang_server_kv_cahce_dtype: fp8_e4m3``
would deploy the default KV cache dtype. Preflight compares every variable that carries one of
the rollout's prefixes with the names the roles and playbooks define, and suggests the closest.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

PREFIXES = ("sglang_", "flashinfer_cache_", "gpu_host_")
# libyaml's loader where PyYAML has it: this runs once per host in preflight (200 hosts, 200 parses)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def role_default_names(roles_dir: str) -> set[str]:
    """Every variable defined in ``roles_dir/*/defaults/main.yml``."""
    names: set[str] = set()
    for path in sorted(Path(roles_dir).glob("*/defaults/main.yml")):
        names.update(yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER) or {})
    return names


def rollout_unknown_vars(names: Iterable[Any], roles_dir: str, shared: Iterable[Any] = ()) -> list[str]:
    """Messages for each prefixed name in ``names`` that neither a role default nor ``shared`` defines."""
    known = role_default_names(roles_dir) | {str(k) for k in shared}
    known_sorted = sorted(known)
    out = []
    for name in sorted({str(n) for n in names}):
        if not name.startswith(PREFIXES) or name in known:
            continue
        close = difflib.get_close_matches(name, known_sorted, n=1, cutoff=0.75)
        out.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return out


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"rollout_unknown_vars": rollout_unknown_vars}
