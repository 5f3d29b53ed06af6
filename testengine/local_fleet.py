"""An inventory of test-engine "hosts" on this machine, for the rollout's tests and benchmark.

Each host is a local connection with its own container, port, cache volume and state folder
(the caller's host variables); the group variables are the embedded local default's
(inventory/local) with the test engine's image from the local Docker engine and the test
engine's gate config. The figures such a fleet gives are this machine's and the TEST
ENGINE's, never a GPU fleet's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
IMAGE = "local/sglang-test-engine:release-a"


def gate_config(**over: Any) -> dict[str, Any]:
    """validate/configs/test-engine.yml with top-level sections replaced by ``over``."""
    return {**yaml.safe_load((REPO / "validate/configs/test-engine.yml").read_text()), **over}


def overlay_sections(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with each section of ``over`` merged into base's section of that name (a non-section
    value replaces): how a lighter gate for tests is laid over the whole config."""
    return {**base, **{k: ({**base.get(k, {}), **v} if isinstance(v, dict) else v) for k, v in over.items()}}


def short_gate_config(**over: Any) -> dict[str, Any]:
    """gate_config() with its load phases measured once (testengine/short-gate.yml, merged section by
    section), then top-level sections replaced by ``over``: for tests of the rollout's mechanics, not of
    the gate."""
    short = yaml.safe_load((REPO / "testengine/short-gate.yml").read_text())
    return {**overlay_sections(gate_config(), short), **over}


def write_inventory(
    directory: Path, hosts: dict[str, dict[str, Any]], serial: list[int | str], **group_vars: Any
) -> Path:
    """hosts.yml (group sglang_servers), group_vars/all/main.yml and rollout.yml under ``directory``."""
    (directory / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"sglang_servers": {"hosts": hosts}}}}))
    local = yaml.safe_load((REPO / "inventory/local/group_vars/all/main.yml").read_text())
    for key in ("sglang_image_archive_path", "sglang_image_archive_on_host"):  # the image is already local
        local.pop(key, None)
    local.update(sglang_image=IMAGE, sglang_image_source="local", sglang_gate_config=gate_config())
    local.update(group_vars)
    (directory / "group_vars/all/main.yml").write_text(yaml.safe_dump(local))
    # the serial sizes alone cut the waves: these fleets are one GPU profile of a few hosts, where
    # the default cap (25 % of a profile) would make every wave one host
    rollout = {
        "sglang_rollout_serial": serial,
        "sglang_rollout_max_fail_percentage": 0,
        "sglang_rollout_max_out_per_profile": "100%",
    }
    (directory / "group_vars/all/rollout.yml").write_text(yaml.safe_dump(rollout))
    return directory
