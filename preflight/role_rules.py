"""The roles' settings rules: what each role's variables must hold beyond their argument spec.

One place for each rule. A variable's type, choices and default live in its role's
``meta/argument_specs.yml`` and ``defaults/main.yml`` (Ansible enforces them when the role's entry
point is included); what a spec cannot say lives here: ranges, patterns, one setting against
another, files the controller must have. Each role's ``tasks/validate.yml`` is one task of the
``settings_check`` action (plugins/action), which validates the role's variables against its spec
and hands the typed values to ``check``; preflight runs those tasks on one host per distinct set of
settings (playbooks/tasks/check_settings.yml) before any host changes, and each role again at its
start. The SGLang command line's rules are ``sglangargv``'s (the renderer applies them too).

Every message names the variable, what it got and what it may hold.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import sglangargv
from validate.config import GateConfig

# A docker object name (container, volume) and a report folder name: what docker and the gate accept.
_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
_NAME_TEXT = "[a-zA-Z0-9][a-zA-Z0-9_.-]*"
_ARCH = re.compile(r"(sm_)?[0-9.]*")
_OPEN = ("0.0.0.0", "::", "")  # addresses that publish a server on every interface
# the gate's own default deadline (validate/config.py), when its config sets none
_GATE_DEADLINE_S = int(GateConfig.model_fields["deadline_s"].default)
_GATE_MARGIN_S = 30  # the gate writes its report this long before Ansible's limit at the latest

Values = Mapping[str, Any]


def _json(value: Any) -> str:
    """A value as the inventory would write it (strings quoted)."""
    return f'"{value}"' if isinstance(value, str) else str(value)


def _named(v: Values, name: str) -> list[str]:
    value = v.get(name)
    if _NAME.fullmatch(str(value or "")):
        return []
    return [f"{name} must match {_NAME_TEXT} (got {_json(value)})"]


def _positive(v: Values, *names: str) -> list[str]:
    bad = [n for n in names if not (isinstance(v.get(n), int) and v[n] > 0)]
    if not bad:
        return []
    return [f"{', '.join(names)} must be > 0 (got {', '.join(_json(v.get(n)) for n in names)})"]


def _absolute(v: Values, *names: str, why: str = "") -> list[str]:
    if all(str(v.get(n) or "").startswith("/") for n in names):
        return []
    return [f"{why}{' and '.join(names)} must be absolute paths (got {', '.join(_json(v.get(n)) for n in names)})"]


def gpu_host(v: Values, context: Values) -> list[str]:
    errors = []
    count = v.get("gpu_host_expected_gpu_count")
    if v.get("gpu_host_prepare") and not (isinstance(count, int) and count > 0):
        errors.append(f"sglang_gpu_count (gpu_host_expected_gpu_count) must be > 0 (got {_json(count)})")
    if not _ARCH.fullmatch(str(v.get("gpu_host_expected_gpu_arch") or "")):
        errors.append(
            "sglang_gpu_arch (gpu_host_expected_gpu_arch) must be compute capability digits such as 120 or 100 "
            f"(got {_json(v.get('gpu_host_expected_gpu_arch'))})"
        )
    return errors


def flashinfer_cache(v: Values, context: Values) -> list[str]:
    return _named(v, "flashinfer_cache_volume_prefix") + _absolute(v, "flashinfer_cache_mount_path")


def sglang_image(v: Values, context: Values) -> list[str]:
    errors = []
    if not v.get("sglang_image_name"):
        errors.append(f"sglang_image (sglang_image_name) must be set (got {_json(v.get('sglang_image_name'))})")
    archive = str(v.get("sglang_image_archive_path") or "")
    if v.get("sglang_image_source") == "archive" and not archive:
        errors.append(f"sglang_image_source=archive needs sglang_image_archive_path (got {_json(archive)})")
    if v.get("sglang_image_registry_login") and not (
        v.get("sglang_image_registry_username") and v.get("sglang_image_registry_password")
    ):
        errors.append(
            "sglang_image_registry_login needs sglang_image_registry_username and sglang_image_registry_password"
        )
    if v.get("sglang_image_source") == "archive" and archive and not v.get("sglang_image_archive_on_host"):
        checksum = str(v.get("sglang_image_archive_checksum_path") or "") or f"{archive}.sha256"
        if not (Path(archive).is_file() and Path(checksum).is_file()):
            errors.append(
                f"sglang_image_archive_path: {archive} or its checksum {checksum} does not exist on the controller. "
                "Build it with the images/ tooling (or set sglang_image_archive_on_host)"
            )
    return errors


def sglang_server(v: Values, context: Values) -> list[str]:
    """``context``: ``settings``, the command line's settings as the role hands them to the renderer
    (roles/sglang_server/vars/main.yml), and ``sglang_version``, the release preflight knows (the
    image tag's), whose flag table then checks every rendered flag and value."""
    errors = sglangargv.check(
        dict(context.get("settings") or {}), v.get("sglang_server_gpu_count"), context.get("sglang_version")
    )
    bridge = v.get("sglang_server_network_mode") == "bridge"
    address_var = "sglang_server_bind_address" if bridge else "sglang_server_listen_host"
    address = v.get(address_var) or ""
    if not v.get("sglang_server_api_key") and not v.get("sglang_server_allow_open_without_key") and address in _OPEN:
        errors.append(
            f"the server would answer on every address ({address_var}={address}) without an API key: set "
            "sglang_server_api_key (ansible-vault), bind to one address (e.g. the host's internal one), or set "
            "sglang_server_allow_open_without_key: true for a closed network"
        )
    errors += _named(v, "sglang_server_container_name")
    errors += _positive(
        v, "sglang_server_ready_timeout_s", "sglang_server_ready_timeout_cold_s", "sglang_server_ready_delay_s"
    )
    env = v.get("sglang_server_test_engine_env") or {}
    if v.get("sglang_server_engine") == "test-engine" and any(not str(k).startswith("TEST_ENGINE_") for k in env):
        errors.append(f"sglang_test_engine_env may only hold TEST_ENGINE_* keys (got {sorted(map(str, env))})")
    return errors


def sglang_gate(v: Values, context: Values) -> list[str]:
    errors = []
    if v.get("sglang_gate_location") == "host":
        errors += _absolute(
            v, "sglang_gate_host_dir", "sglang_gate_secret_dir", why="with sglang_gate_location: host, "
        )
    config = v.get("sglang_gate_config") or {}
    if v.get("sglang_gate_enabled"):
        if not _NAME.fullmatch(str(v.get("sglang_gate_baseline_group") or "")):
            errors.append(
                "sglang_gate_baseline_group must name the hosts one speed reference stands for (letters, digits, _ . -;"
                f" e.g. the GPU profile group, rtx_pro_6000), got {_json(v.get('sglang_gate_baseline_group'))}. "
                "Set it in the profile's group_vars: it is never guessed"
            )
        if not config:
            errors.append(
                "sglang_gate_config must be a non-empty dict in the schema of validate/configs/*.yml "
                f"(got {len(config)} keys)"
            )
    port = v.get("sglang_gate_port")
    if not (isinstance(port, int) and 1 <= port <= 65535):
        errors.append(f"sglang_gate_port must be in 1..65535 (got {_json(port)})")
    errors += _positive(v, "sglang_gate_timeout_s", "sglang_gate_poll_s")
    deadline = int(config.get("deadline_s", _GATE_DEADLINE_S))  # a dict: the spec's type
    timeout = v.get("sglang_gate_timeout_s")
    if isinstance(timeout, int) and timeout < deadline + _GATE_MARGIN_S:
        errors.append(
            f"sglang_gate_timeout_s ({timeout}) must be at least the gate's deadline_s ({deadline}) + "
            f"{_GATE_MARGIN_S} s, so the gate writes its report before Ansible gives up on it (leave "
            "sglang_gate_timeout_s unset: it follows deadline_s)"
        )
    if not v.get("sglang_gate_command"):
        errors.append("sglang_gate_command must be a non-empty argv list")
    return errors


ROLES: dict[str, Callable[[Values, Values], list[str]]] = {
    "gpu_host": gpu_host,
    "sglang_image": sglang_image,
    "flashinfer_cache": flashinfer_cache,
    "sglang_server": sglang_server,
    "sglang_gate": sglang_gate,
}


def check(role: str, values: Values, context: Values | None = None) -> list[str]:
    """Every rule ``role``'s settings break (``values``: its variables, typed by its argument spec)."""
    return ROLES[role](values, context or {})
