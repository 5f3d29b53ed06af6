"""plugins/callback/sglang_ara.py: ARA's callback under its own name, off until enabled, sending
JSON that ARA's API accepts (the end-to-end run: tests/roles/test_roles_local_rollout.py)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("sglang_ara", REPO / "plugins/callback/sglang_ara.py")
assert SPEC and SPEC.loader
sglang_ara = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(sglang_ara)


def test_infinite_and_nan_floats_become_text_that_strict_json_takes() -> None:
    config = yaml.safe_load((REPO / "validate/configs/test-engine.yml").read_text())
    assert config["throughput"]["request_rate"] == math.inf  # what made ARA answer 400 and drop results
    payload = {"content": {"item": config, "results": [{"rate": float("nan")}, (1.5, -math.inf)]}, "n": 3}
    out = sglang_ara.finite(payload)
    json.dumps(out, allow_nan=False)  # strict JSON, as ARA's API parses it
    assert out["content"]["item"]["throughput"]["request_rate"] == "inf"
    assert out["content"]["results"] == [{"rate": "nan"}, [1.5, "-inf"]]
    assert out["n"] == 3 and out["content"]["item"]["throughput"]["num_prompts"] == 64


def test_it_is_off_until_enabled_and_reads_aras_own_settings() -> None:
    assert sglang_ara.CallbackModule.CALLBACK_NEEDS_ENABLED is True
    assert sglang_ara.CallbackModule.CALLBACK_NAME == "sglang_ara"
    doc = yaml.safe_load(sglang_ara.DOCUMENTATION)
    assert doc["callback"] == "sglang_ara"
    client = doc["options"]["api_client"]
    assert client["default"] == "offline" and {"name": "ARA_API_CLIENT"} in client["env"]
    assert {"name": "ARA_API_SERVER"} in doc["options"]["api_server"]["env"]
