"""Static checks of the rollout: the example inventory passing preflight, and its gate thresholds
staying equal to validate/configs/reference.yml. (Syntax checks with both inventories, yamllint and
ansible-lint's production profile are the lint stage of scripts/test.sh: one place, run once.)"""

from __future__ import annotations

import configparser
import math
import shutil
from pathlib import Path

import pytest
import yaml
from roles_testlib import BIN, REPO, ansible_playbook, example_gpu_hosts, load_yaml

DEMO_VAULT_PASSWORD = "example-only-change-me"  # documented in inventory/example/group_vars/all/vault.yml


def _example_preflight(tmp_path: Path, *extra: str, inventory: str = "inventory/example"):
    """Preflight of inventory/example as written (ansible_become: true, no override), every host
    played by this machine (local connection, already root: become needs no sudo). Preflight reaches
    each host, so each "host" answers nvidia-smi with the recorded H200's output
    (tests/fixtures/nvidia-smi-h200-*) edited to its profile's GPUs, and the free-disk floor is this
    machine's, not a GPU host's."""
    password = tmp_path / "vault-pass"
    password.write_text(DEMO_VAULT_PASSWORD + "\n")
    return ansible_playbook(
        "-i",
        inventory,
        "playbooks/preflight.yml",
        "--vault-password-file",
        str(password),
        "-e",
        "ansible_connection=local",
        "-e",
        f'{{"ansible_python_interpreter": "{BIN / "python"}"}}',
        *example_gpu_hosts(tmp_path),
        "-e",
        "sglang_preflight_min_free_gb=1",
        "-e",
        f"sglang_reports_dir={tmp_path / 'reports'}",  # its own rollout lock: other tests run this inventory too
        *extra,
    )


def test_example_inventory_passes_preflight(tmp_path: Path) -> None:
    """The documented production settings are valid (preflight only asserts: nothing is contacted)."""
    run = _example_preflight(tmp_path)
    assert run.rc == 0, run.out
    assert run.recap["gpu-host-08.example.internal"]["failed"] == 0
    # one canary per GPU profile (sglang_gate_baseline_group): the first host of each group
    assert "(item=rtx_pro_6000: gpu-host-01.example.internal)" in run.out
    assert "(item=b200: b200-host-01.example.internal)" in run.out


def test_example_preflight_stops_every_host_on_one_bad_value(tmp_path: Path) -> None:
    run = _example_preflight(
        tmp_path,
        "-l",
        "gpu-host-01.example.internal,gpu-host-02.example.internal,localhost",
        "-e",
        "sglang_server_kv_cache_dtype=fp9",
    )
    assert run.rc != 0
    assert "sglang_server_kv_cache_dtype must be one of: auto, fp8_e4m3, fp8_e5m2, bf16" in run.out


def test_one_hosts_own_bad_setting_stops_preflight_though_its_group_shares_the_rest(tmp_path: Path) -> None:
    """Preflight checks the roles' settings on one host per distinct set of settings: a host with a
    host_vars setting of its own is a set of its own, and its bad value stops every host."""
    inv = tmp_path / "example"
    shutil.copytree(REPO / "inventory" / "example", inv)
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "gpu-host-05.example.internal.yml").write_text("sglang_server_kv_cache_dtype: fp9\n")
    run = _example_preflight(tmp_path, inventory=str(inv))
    assert run.rc != 0
    flat = " ".join(run.out.split())
    assert "fatal: [gpu-host-05.example.internal]: FAILED!" in run.out
    assert "value of sglang_server_kv_cache_dtype must be one of: auto, fp8_e4m3, fp8_e5m2, bf16, got: fp9" in flat
    # checked: the first host of each group and gpu-host-05, a set of its own; the others skip the checks
    # (Ansible names the hosts of an include in the order their results came back: compare as a set)
    included = [line.split(" for ", 1)[1] for line in run.out.splitlines() if "check_settings.yml for " in line]
    assert len(included) == 1, run.out
    checked = {h.strip() for h in included[0].split(",")}
    assert checked == {"gpu-host-01.example.internal", "gpu-host-05.example.internal", "b200-host-01.example.internal"}
    assert all(counts["changed"] == 0 for counts in run.recap.values())
    assert "PLAY [Roll out" not in run.out


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isinf(a) and math.isinf(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_example_gate_thresholds_match_the_reference_config() -> None:
    reference = REPO / "validate" / "configs" / "reference.yml"
    if not reference.is_file():
        pytest.skip("validate/configs/reference.yml is not there yet")
    example = load_yaml(REPO / "inventory" / "example" / "group_vars" / "all" / "main.yml")["sglang_gate_config"]
    assert _same(example, load_yaml(reference))
    assert example["throughput"]["min_total_tok_s"] == 1846
    assert example["stability"]["concurrency"] == [256, 512, 1024]
    # GLM-5's accuracy floor (the published source is written beside it), on by default
    acc = example["accuracy"]
    assert (acc["enabled"], acc["min_accuracy"], acc["max_invalid"], acc["questions"]) == (True, 0.9, 0.05, 200)
    local = load_yaml(REPO / "validate" / "configs" / "test-engine.yml")["accuracy"]
    assert (local["enabled"], local["min_accuracy"]) == (True, 0.95)  # inventory/local reads this file


def test_misspelt_variable_stops_preflight_with_a_suggestion(tmp_path: Path) -> None:
    run = _example_preflight(
        tmp_path, "-l", "gpu-host-01.example.internal,localhost", "-e", "sglang_server_kv_cahce_dtype=fp8_e4m3"
    )
    assert run.rc != 0
    assert "sglang_server_kv_cahce_dtype (did you mean sglang_server_kv_cache_dtype?)" in run.out


def _tasks(node, inherited_become=None):
    """Every task dict of a task list, with the become it inherits from its blocks."""
    for task in node or []:
        if not isinstance(task, dict):
            continue
        become = task.get("become", inherited_become)
        for key in ("block", "rescue", "always"):
            if key in task:
                yield from _tasks(task[key], become)
        yield task, become


def test_controller_side_tasks_never_become() -> None:
    """With ansible_become: true for the hosts (inventory/example), a task delegated to the
    controller must not sudo there: the operator's machine needs no sudo for the gate or reports."""
    files = sorted((REPO / "roles").glob("*/tasks/*.yml")) + sorted((REPO / "playbooks").rglob("*.yml"))
    checked, offenders = 0, []
    for path in files:
        doc = load_yaml(path) or []
        is_play = path.parent.name == "playbooks" and all(isinstance(p, dict) and "hosts" in p for p in doc)
        plays = doc if is_play else None
        lists = [p.get("tasks") for p in plays] if plays else [doc]
        for tasks in lists:
            for task, become in _tasks(tasks):
                if task.get("delegate_to") in ("localhost", "127.0.0.1"):
                    checked += 1
                    if become is not False:
                        offenders.append(f"{path.relative_to(REPO)}: {task.get('name')}")
    assert checked >= 15, checked  # the gate, reports, summary and readiness probes are all found
    assert offenders == []


def test_example_preflight_refuses_what_the_image_tags_release_refuses(tmp_path: Path) -> None:
    """inventory/example's image is tagged 0.5.23: preflight checks against that release's flag table."""
    run = _example_preflight(
        tmp_path, "-l", "gpu-host-01.example.internal,localhost", "-e", "sglang_server_attention_backend=cutlass_mla"
    )
    assert run.rc != 0
    assert (
        "sglang_server_attention_backend=cutlass_mla is refused by SGLang 0.5.23 --attention-backend (allowed:"
        in run.out
    )


def test_molecule_scenarios_keep_the_bundles_connection_settings() -> None:
    """molecule writes its own ansible.cfg, so each scenario restates the bundle's: the scenarios'
    SSH hosts must notice a silent host as a fleet does (timeout, keepalives) and take one round trip
    per task (pipelining). A setting changed in ansible.cfg and not here would test another bundle."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible.cfg")
    want = {
        ("defaults", "timeout"): cfg["defaults"]["timeout"],
        ("ssh_connection", "ssh_args"): cfg["ssh_connection"]["ssh_args"],
        ("ssh_connection", "pipelining"): cfg["ssh_connection"]["pipelining"],
    }
    assert "ServerAliveInterval=" in want["ssh_connection", "ssh_args"]  # what the copies are for
    scenarios = sorted((REPO / "molecule").glob("*/molecule.yml"))
    assert len(scenarios) >= 4, scenarios
    for path in scenarios:
        options = yaml.safe_load(path.read_text())["provisioner"]["config_options"]
        got = {(section, key): options.get(section, {}).get(key) for section, key in want}
        # YAML reads `true` as a boolean, ansible.cfg's text says `true`: only booleans are normalised
        got = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in got.items()}
        assert got == want, path
