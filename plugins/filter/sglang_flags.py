"""The sglang_server role's filters: thin wrappers around the bundle's ``sglangargv`` package.

The rules and the renderer live in ``sglangargv/`` (typed, unit-tested, importable); this file
only names them for Ansible. Every error names the inventory variable (``sglang_server_<key>``)
and the allowed values, so a bad inventory stops in preflight before any host changes.
"""

from __future__ import annotations

from typing import Any

try:
    import sglangargv
except ImportError as exc:  # the controller runs outside the bundle's virtualenv
    raise ImportError(
        "the sglang_server role needs the bundle's sglangargv package on the Ansible controller: "
        "run ansible-playbook from the bundle's virtualenv (bash scripts/setup.sh && . .venv/bin/activate)"
    ) from exc


def sglang_server_argv(
    settings: dict[str, Any], sglang_version: Any = None, patch_record: Any = None, gpu_arch: Any = None
) -> dict[str, Any]:
    """``{argv, errors, warnings, radix_cache_disabled, radix_cache_reason, flag_table, env, kv_cache_fp8}``."""
    return sglangargv.render_argv(settings, sglang_version, patch_record, gpu_arch).as_dict()


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "sglang_server_deprecations": sglangargv.deprecations,
            "sglang_server_argv": sglang_server_argv,
            "sglang_server_str_values": sglangargv.env_strings,
        }
