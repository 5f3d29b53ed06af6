# ruff: noqa: E501  (messages are asserted whole: long literals)
"""The roles' settings rules beyond their argument specs (preflight/role_rules.py), each alone on
the roles' own defaults (templated as the roles template them) with one value changed, and whole
messages that name the variable, what it got and what it may hold."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from preflight import role_rules
from preflight.specs import role_options

REPO = Path(__file__).resolve().parents[2]
SPECS = {role: role_options(REPO / "roles" / role / "meta/argument_specs.yml", "validate") for role in role_rules.ROLES}
# The roles' defaults as Ansible templates them for a host of inventory/example's rtx_pro_6000 profile
DEFAULTS = {
    "gpu_host": {"gpu_host_prepare": True, "gpu_host_expected_gpu_count": 8, "gpu_host_expected_gpu_arch": "120"},
    "flashinfer_cache": {"flashinfer_cache_volume_prefix": "flashinfer-cache", "flashinfer_cache_mount_path": "/root/.cache/flashinfer"},
    "sglang_image": {"sglang_image_name": "registry.example.internal/sglang-glm5:0.5.23-cu130", "sglang_image_source": "registry",
                     "sglang_image_registry_login": False, "sglang_image_archive_path": "", "sglang_image_archive_on_host": False,
                     "sglang_image_archive_checksum_path": ""},
    "sglang_server": {"sglang_server_engine": "sglang", "sglang_server_gpu_count": 8, "sglang_server_container_name": "sglang",
                      "sglang_server_model_path": "zai-org/GLM-5-NVFP4", "sglang_server_tp_size": 8,
                      "sglang_server_network_mode": "bridge", "sglang_server_bind_address": "10.0.0.5",
                      "sglang_server_listen_host": "0.0.0.0", "sglang_server_api_key": "", "sglang_server_allow_open_without_key": False,
                      "sglang_server_ready_timeout_s": 1800, "sglang_server_ready_timeout_cold_s": 5400,
                      "sglang_server_ready_delay_s": 10, "sglang_server_test_engine_env": {}},
    "sglang_gate": {"sglang_gate_enabled": True, "sglang_gate_location": "host", "sglang_gate_host_dir": "/var/lib/sglang-deploy/gate",
                    "sglang_gate_secret_dir": "/dev/shm/sglang-gate", "sglang_gate_baseline_group": "rtx_pro_6000",
                    "sglang_gate_config": {"deadline_s": 3300}, "sglang_gate_port": 30000, "sglang_gate_timeout_s": 3420,
                    "sglang_gate_poll_s": 10, "sglang_gate_command": ["python3", "-m", "validate"]},
}  # fmt: skip
FLAGS = {"model_path": "zai-org/GLM-5-NVFP4", "tp_size": 8, "port": 30000, "listen_host": "0.0.0.0", "extra_args": []}


def _check(role: str, context: dict | None = None, **over) -> list[str]:
    """The role's values typed by its argument spec, as the settings_check action hands them over."""
    typed = ArgumentSpecValidator(SPECS[role]).validate({**DEFAULTS[role], **over})
    assert typed.error_messages == []
    context = {"settings": FLAGS, "sglang_version": ""} if role == "sglang_server" and context is None else context
    return role_rules.check(role, typed.validated_parameters, context)


@pytest.mark.parametrize("role", list(role_rules.ROLES))
def test_the_profiles_settings_pass(role: str) -> None:
    assert _check(role) == []


@pytest.mark.parametrize(
    ("role", "over", "errors"),
    [
        ("gpu_host", {"gpu_host_expected_gpu_count": 0}, ["sglang_gpu_count (gpu_host_expected_gpu_count) must be > 0 (got 0)"]),
        ("gpu_host", {"gpu_host_expected_gpu_count": 0, "gpu_host_prepare": False}, []),
        ("gpu_host", {"gpu_host_expected_gpu_arch": "blackwell"}, [
            'sglang_gpu_arch (gpu_host_expected_gpu_arch) must be compute capability digits such as 120 or 100 (got "blackwell")']),
        ("gpu_host", {"gpu_host_expected_gpu_arch": "sm_12.0"}, []),
        ("flashinfer_cache", {"flashinfer_cache_volume_prefix": "-cache"}, ['flashinfer_cache_volume_prefix must match [a-zA-Z0-9][a-zA-Z0-9_.-]* (got "-cache")']),
        ("flashinfer_cache", {"flashinfer_cache_mount_path": "cache"}, ['flashinfer_cache_mount_path must be absolute paths (got "cache")']),
        ("sglang_image", {"sglang_image_name": ""}, ['sglang_image (sglang_image_name) must be set (got "")']),
        ("sglang_image", {"sglang_image_source": "archive"}, ['sglang_image_source=archive needs sglang_image_archive_path (got "")']),
        ("sglang_image", {"sglang_image_registry_login": True, "sglang_image_registry_username": "u"},
         ["sglang_image_registry_login needs sglang_image_registry_username and sglang_image_registry_password"]),
        ("sglang_image", {"sglang_image_registry_login": True, "sglang_image_registry_username": "u", "sglang_image_registry_password": "p"}, []),
        ("sglang_image", {"sglang_image_source": "archive", "sglang_image_archive_path": "/nope/img.tar"}, [
            "sglang_image_archive_path: /nope/img.tar or its checksum /nope/img.tar.sha256 does not exist on the controller. "
            "Build it with the images/ tooling (or set sglang_image_archive_on_host)"]),
        ("sglang_image", {"sglang_image_source": "archive", "sglang_image_archive_path": "/nope/img.tar", "sglang_image_archive_on_host": True}, []),
        ("sglang_server", {"sglang_server_container_name": "sglang server"}, ['sglang_server_container_name must match [a-zA-Z0-9][a-zA-Z0-9_.-]* (got "sglang server")']),
        ("sglang_server", {"sglang_server_ready_delay_s": 0}, [
            "sglang_server_ready_timeout_s, sglang_server_ready_timeout_cold_s, sglang_server_ready_delay_s must be > 0 (got 1800, 5400, 0)"]),
        ("sglang_server", {"sglang_server_bind_address": "0.0.0.0"}, [
            "the server would answer on every address (sglang_server_bind_address=0.0.0.0) without an API key: set "
            "sglang_server_api_key (ansible-vault), bind to one address (e.g. the host's internal one), or set "
            "sglang_server_allow_open_without_key: true for a closed network"]),
        ("sglang_server", {"sglang_server_network_mode": "host"}, [
            "the server would answer on every address (sglang_server_listen_host=0.0.0.0) without an API key: set "
            "sglang_server_api_key (ansible-vault), bind to one address (e.g. the host's internal one), or set "
            "sglang_server_allow_open_without_key: true for a closed network"]),
        ("sglang_server", {"sglang_server_bind_address": "::", "sglang_server_api_key": "sk-x"}, []),
        ("sglang_server", {"sglang_server_bind_address": "::", "sglang_server_allow_open_without_key": True}, []),
        ("sglang_server", {"sglang_server_engine": "test-engine", "sglang_server_test_engine_env": {"TEST_ENGINE_FAULT": "x", "HOME": "/"}},
         ["sglang_test_engine_env may only hold TEST_ENGINE_* keys (got ['HOME', 'TEST_ENGINE_FAULT'])"]),
        ("sglang_server", {"sglang_server_test_engine_env": {"HOME": "/"}}, []),  # read by the test engine only
        ("sglang_gate", {"sglang_gate_host_dir": "gate"}, [
            'with sglang_gate_location: host, sglang_gate_host_dir and sglang_gate_secret_dir must be absolute paths (got "gate", "/dev/shm/sglang-gate")']),
        ("sglang_gate", {"sglang_gate_host_dir": "gate", "sglang_gate_location": "controller"}, []),
        ("sglang_gate", {"sglang_gate_baseline_group": ""}, [
            "sglang_gate_baseline_group must name the hosts one speed reference stands for (letters, digits, _ . -; e.g. "
            'the GPU profile group, rtx_pro_6000), got "". Set it in the profile\'s group_vars: it is never guessed']),
        ("sglang_gate", {"sglang_gate_config": {}, "sglang_gate_timeout_s": 3330}, [
            "sglang_gate_config must be a non-empty dict in the schema of validate/configs/*.yml (got 0 keys)"]),
        ("sglang_gate", {"sglang_gate_config": {}, "sglang_gate_baseline_group": "", "sglang_gate_enabled": False}, []),
        ("sglang_gate", {"sglang_gate_port": 65536}, ["sglang_gate_port must be in 1..65535 (got 65536)"]),
        ("sglang_gate", {"sglang_gate_port": 0}, ["sglang_gate_port must be in 1..65535 (got 0)"]),
        ("sglang_gate", {"sglang_gate_port": 65535}, []),
        ("sglang_gate", {"sglang_gate_poll_s": 0}, ["sglang_gate_timeout_s, sglang_gate_poll_s must be > 0 (got 3420, 0)"]),
        ("sglang_gate", {"sglang_gate_timeout_s": 3329}, [
            "sglang_gate_timeout_s (3329) must be at least the gate's deadline_s (3300) + 30 s, so the gate writes its report "
            "before Ansible gives up on it (leave sglang_gate_timeout_s unset: it follows deadline_s)"]),
        ("sglang_gate", {"sglang_gate_timeout_s": 3330}, []),
        ("sglang_gate", {"sglang_gate_timeout_s": 629, "sglang_gate_config": {"deadline_s": 600}}, [
            "sglang_gate_timeout_s (629) must be at least the gate's deadline_s (600) + 30 s, so the gate writes its report "
            "before Ansible gives up on it (leave sglang_gate_timeout_s unset: it follows deadline_s)"]),
        ("sglang_gate", {"sglang_gate_command": []}, ["sglang_gate_command must be a non-empty argv list"]),
    ],
)  # fmt: skip
def test_each_rule_refuses_its_own_fault_naming_the_variable(role: str, over: dict, errors: list[str]) -> None:
    assert _check(role, **over) == errors


def test_the_server_rules_include_the_command_lines_against_the_images_release() -> None:
    """sglangargv's rules (the renderer's too) run in the same check; with the release preflight
    knows (the image tag's), that release's flag table refuses what its launch_server would."""
    assert _check("sglang_server", {"settings": {**FLAGS, "tp_size": 3}}) == [
        "sglang_server_tp_size=3 must divide sglang_gpu_count=8; allowed values: 1, 2, 4, 8"
    ]
    refused = _check(
        "sglang_server", {"settings": {**FLAGS, "attention_backend": "cutlass_mla"}, "sglang_version": "0.5.23"}
    )
    assert len(refused) == 1 and refused[0].startswith(
        "sglang_server_attention_backend=cutlass_mla is refused by SGLang 0.5.23 --attention-backend (allowed:"
    )
    assert (
        _check("sglang_server", {"settings": {**FLAGS, "attention_backend": "cutlass_mla"}, "sglang_version": ""}) == []
    )


@pytest.mark.parametrize(
    ("role", "over", "errors"),
    [
        ("flashinfer_cache", {"flashinfer_cache_volume_prefix": None}, ['flashinfer_cache_volume_prefix must match [a-zA-Z0-9][a-zA-Z0-9_.-]* (got "")']),
        ("sglang_server", {"sglang_server_ready_delay_s": 1}, []),
        ("gpu_host", {"gpu_host_expected_gpu_count": 1}, []),
        ("gpu_host", {"gpu_host_expected_gpu_arch": None}, []),
        ("sglang_server", {"sglang_server_bind_address": None}, [
            "the server would answer on every address (sglang_server_bind_address=) without an API key: set "
            "sglang_server_api_key (ansible-vault), bind to one address (e.g. the host's internal one), or set "
            "sglang_server_allow_open_without_key: true for a closed network"]),
        ("sglang_server", {"sglang_server_engine": "test-engine", "sglang_server_test_engine_env": {"TEST_ENGINE_FAULT": "x"}}, []),
        ("sglang_gate", {"sglang_gate_port": 1}, []),
    ],
)  # fmt: skip
def test_edges_of_each_rule(role: str, over: dict, errors: list[str]) -> None:
    assert _check(role, **over) == errors


def test_an_archive_needs_its_checksum_beside_it_or_where_the_variable_says(tmp_path: Path) -> None:
    archive = tmp_path / "img.tar"
    archive.write_text("x")
    over = {"sglang_image_source": "archive", "sglang_image_archive_path": str(archive)}
    assert _check("sglang_image", **over) == [
        f"sglang_image_archive_path: {archive} or its checksum {archive}.sha256 does not exist on the controller. "
        "Build it with the images/ tooling (or set sglang_image_archive_on_host)"
    ]
    elsewhere = tmp_path / "sums" / "img.sha256"
    elsewhere.parent.mkdir()
    elsewhere.write_text("0" * 64)
    assert _check("sglang_image", **over, sglang_image_archive_checksum_path=str(elsewhere)) == []
    (tmp_path / "img.tar.sha256").write_text("0" * 64)
    assert _check("sglang_image", **over) == []
    archive.unlink()
    assert _check("sglang_image", **over)[0].startswith(f"sglang_image_archive_path: {archive} or its checksum")
