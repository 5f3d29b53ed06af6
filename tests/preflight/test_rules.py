# ruff: noqa: E501  (messages are asserted whole: long literals)
"""Preflight's probe and rules (preflight/): the real probe script run by sh here, each rule's
verdict on the recorded H200's `nvidia-smi -q` (tests/fixtures/nvidia-smi-h200-2026-12-02) and on
edits of it, and the settings sets that decide which hosts the roles' checks run on."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import preflight
from preflight.probe import MARK, HostProbe, Section

REPO = Path(__file__).resolve().parents[2]
RECORDED = (REPO / "tests/fixtures/nvidia-smi-h200-2026-12-02/nvidia-smi-q.txt").read_text()
DF = "Filesystem 1-blocks Used Available Capacity Mounted on\n/dev/sda1 1000000000000 400000000000 600000000000 40% /"


def _probe(smi: str | None = RECORDED, smi_rc: int = 0, uid: str = "0", df: str = DF, docker: Section | None = None):
    sections = {"uid": Section(0, uid), "df": Section(0, df)}
    if smi is not None:
        sections["nvidia-smi"] = Section(smi_rc, smi)
    if docker is not None:
        sections["docker"] = docker
    return HostProbe(sections=sections)


def _refusals(settings: preflight.Settings, probe: HostProbe) -> dict[str, str]:
    return {r.rule: r.message for r in preflight.judge_host(settings, probe)}


def test_the_probe_script_runs_in_sh_and_frames_each_answer(tmp_path: Path) -> None:
    """The script as shipped, run by sh with a stand-in nvidia-smi that fails: each command's exit
    status and output are kept apart, and the failing one does not hide the others."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver' >&2\nexit 9\n"
    )
    smi.chmod(0o755)
    out = subprocess.run(
        ["sh", "-c", preflight.SCRIPT, "preflight", str(tmp_path), str(smi), "-"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    probe = preflight.parse_probe({"rc": 0, "stdout": "Welcome to gpu-host-01\n" + out})
    assert set(probe.sections) == {"uid", "df", "nvidia-smi"}
    assert probe.sections["uid"].out.isdigit()
    assert probe.sections["nvidia-smi"] == Section(
        9, "NVIDIA-SMI has failed because it could not communicate with the driver"
    )
    assert probe.sections["df"].rc == 0 and probe.sections["df"].out.splitlines()[0].startswith("Filesystem")
    said = _refusals(preflight.Settings(min_free_gb=0), probe)
    assert said == {"nvidia_driver": "nvidia-smi -q failed (rc 9): NVIDIA-SMI has failed because it could not communicate "
                    "with the driver. Install the NVIDIA driver, or set sglang_gpu_host_prepare: false for hosts without GPUs."}  # fmt: skip


def test_the_recorded_h200_passes_every_rule() -> None:
    smi = preflight.parse_q(RECORDED)
    assert (smi.driver_version, smi.driver_major, len(smi.gpus)) == ("580.159.04", 580, 1)
    assert (smi.memory_mib, smi.mig, smi.fabric) == ([143771], ["Disabled"], ["N/A / N/A"])
    assert preflight.judge_host(preflight.Settings(gpu_count=1, min_memory_gib=140), _probe()) == []


@pytest.mark.parametrize(
    ("edit", "settings", "rule", "message"),
    [
        (("580.159.04", "570.86.15"), {}, "nvidia_driver",
         "NVIDIA driver 570.86.15 is older than 580 (sglang_preflight_min_driver: CUDA 13 images need driver 580 or newer); "
         "upgrade the driver first."),
        (("", ""), {"min_driver": 581}, "nvidia_driver", "NVIDIA driver 580.159.04 is older than 581"),
        (("Current                                        : Disabled", "Current                                        : Enabled"),
         {}, "mig_off", "MIG is enabled on 1 GPU(s): tensor parallelism needs whole GPUs; disable it"),
        (("", ""), {"gpu_count": 2}, "gpu_count",
         "nvidia-smi sees 1 GPU(s), the profile needs 2 (sglang_gpu_count, the tensor-parallel size): a GPU is missing"),
        (("", ""), {"min_memory_gib": 141}, "gpu_memory",
         "its smallest GPU has 143771 MiB, the profile needs 141 GiB (sglang_gpu_min_memory_gib): this host belongs"),
        (("State                                          : N/A", "State                                          : In Progress"),
         {}, "fabric_up", "the NVSwitch fabric is not ready on 1 GPU(s) (nvidia-smi -q Fabric State / Status: In Progress / N/A)"),
    ],
)  # fmt: skip
def test_each_gpu_rule_refuses_its_own_fault_and_names_the_variable(edit, settings, rule, message) -> None:
    text = RECORDED.replace(edit[0], edit[1], 1) if edit[0] else RECORDED
    assert text != RECORDED or not edit[0]
    said = _refusals(preflight.Settings(**settings), _probe(smi=text))
    assert list(said) == [rule]
    assert said[rule].startswith(message)


def test_an_nvswitch_fabric_that_completed_passes_and_one_that_failed_does_not() -> None:
    block = "State                                          : N/A\n        Status                                         : N/A"
    assert block in RECORDED
    ok = RECORDED.replace(block, block.replace("N/A", "Completed", 1).replace(": N/A", ": Success"))
    bad = RECORDED.replace(block, block.replace("N/A", "Completed", 1).replace(": N/A", ": Failure"))
    assert preflight.parse_q(ok).fabric == ["Completed / Success"]
    assert _refusals(preflight.Settings(), _probe(smi=ok)) == {}
    assert "Completed / Failure" in _refusals(preflight.Settings(), _probe(smi=bad))["fabric_up"]


def test_disk_sudo_docker_and_engine_rules() -> None:
    full = DF.replace("600000000000", "39999999999")
    said = _refusals(preflight.Settings(min_free_gb=40), _probe(df=full))
    assert said == {"free_disk": "40.0 GB free on /var/lib (sglang_preflight_disk_path), at least 40 GB are needed "
                    "(sglang_preflight_min_free_gb: the image, its archive while it loads, the kernel cache). Free space "
                    "(docker image prune), or lower the variable if you know the image is smaller."}  # fmt: skip
    assert _refusals(preflight.Settings(min_free_gb=39.9), _probe(df=full)) == {}  # 39.999999999 GB: compared unrounded
    assert "gave no free space (rc 0): df: /nope: No such file" in _refusals(
        preflight.Settings(), _probe(df="df: /nope: No such file or directory"))["free_disk"]  # fmt: skip
    sudo = _refusals(preflight.Settings(become=True, user="deploy"), _probe(uid="1000"))
    assert sudo == {"become_makes_root": "ansible_become is on but commands run as uid 1000: give deploy sudo to root "
                    "(the roles manage docker, /etc/docker and state files)."}  # fmt: skip
    assert _refusals(preflight.Settings(become=False), _probe(uid="1000")) == {}
    no_gpu = preflight.Settings(gpu_host_prepare=False)
    assert _refusals(no_gpu, _probe(smi=None, docker=Section(0, "20.10.24"))) == {}
    down = _refusals(no_gpu, _probe(smi=None, docker=Section(1, "Cannot connect to the Docker daemon")))
    assert down["docker_answers"].startswith("docker does not answer: Cannot connect to the Docker daemon. Start the")
    assert _refusals(preflight.Settings(engine="vllm"), _probe()) == {
        "engine_choice": "sglang_engine must be one of: sglang, test-engine; got 'vllm'"
    }


def test_settings_come_from_inventory_values_with_the_documented_defaults() -> None:
    assert preflight.Settings.from_vars({}) == preflight.Settings()
    s = preflight.Settings.from_vars({
        "sglang_engine": "test-engine", "ansible_become": "yes", "ansible_user": "ops", "sglang_gpu_host_prepare": "false",
        "sglang_preflight_disk_path": "/data", "sglang_preflight_min_free_gb": "12.5", "sglang_preflight_min_driver": "590",
        "sglang_gpu_count": "8", "sglang_gpu_min_memory_gib": "90", "sglang_preflight_unused": "x",
    })  # fmt: skip
    assert s == preflight.Settings("test-engine", True, "ops", False, "/data", 12.5, 590, 8, 90.0)
    assert preflight.Settings.from_vars({"sglang_preflight_min_free_gb": ""}).min_free_gb == 40.0


def test_an_unreachable_host_is_judged_on_that_alone_and_a_failed_probe_is_said() -> None:
    gone = preflight.parse_probe(
        {"unreachable": True, "msg": "ssh: connect to host 10.0.0.5 port 22: No route to host"}
    )
    assert [(r.rule, r.message) for r in preflight.judge_host(preflight.Settings(engine="bad"), gone, ["sglang_x"])] == [
        ("reachable", "could not be reached (SSH, or the connection failed): ssh: connect to host 10.0.0.5 port 22: "
                      "No route to host"),
    ]  # fmt: skip
    assert preflight.parse_probe(None).unreachable
    failed = preflight.parse_probe({"rc": 1, "failed": True, "stdout": "", "stderr": "sudo: a password is required"})
    assert not failed.unreachable
    assert [r.message for r in preflight.judge_host(preflight.Settings(), failed)] == [
        "the probe failed (rc 1): sudo: a password is required"
    ]


def test_misspelt_variables_are_named_with_the_closest_known_one() -> None:
    known = {"sglang_server_kv_cache_dtype", "sglang_gate_port"} | preflight.rules.SHARED
    names = ["sglang_server_kv_cahce_dtype", "sglang_zzz", "ansible_host", "sglang_gate_port", "other_var"]
    assert preflight.unknown_variables(names, known) == [
        "sglang_server_kv_cahce_dtype (did you mean sglang_server_kv_cache_dtype?)", "sglang_zzz",
    ]  # fmt: skip
    said = preflight.judge_host(preflight.Settings(), _probe(), ["sglang_zzz"])
    assert [r.rule for r in said] == ["known_variables"] and said[0].message.startswith(
        "unknown variable(s): sglang_zzz."
    )
    assert "sglang_server_kv_cache_dtype" in preflight.rules.role_default_names(REPO / "roles")


def test_refusals_read_once_per_distinct_message_with_their_hosts() -> None:
    old = preflight.Refusal("nvidia_driver", "driver old")
    disk = preflight.Refusal("free_disk", "disk full")
    refusals = {f"h{i:02d}": [old] for i in range(1, 11)} | {"h11": [old, disk]}
    lines = preflight.group_refusals(refusals, show_hosts=3)
    assert lines == ["h01, h02, h03 and 8 more: driver old", "h11: disk full"]
    assert preflight.group_refusals({"a": [disk]}) == ["a: disk full"]


class _Templating(dict):
    """hostvars of one host: templates on access, as Ansible's does; a value "!" fails to template."""

    def __getitem__(self, key):
        value = super().__getitem__(key)
        if value == "!":
            raise ValueError("'undefined_thing' is undefined")
        return value


def test_hosts_with_the_same_settings_are_one_set_and_any_difference_makes_its_own() -> None:
    group = {"sglang_server_port": 30000, "sglang_gate_config": {"deadline_s": 600}, "gpu_host_x": [1, 2]}
    hostvars = {
        "a": _Templating(group | {"ansible_host": "10.0.0.1", "sglang_rollout_run_id": "r1"}),
        "b": _Templating(group | {"ansible_host": "10.0.0.2", "sglang_rollout_run_id": "r2"}),
        "c": _Templating(group | {"sglang_server_port": 30001}),
        "d": _Templating(group | {"sglang_gate_config": {"deadline_s": 601}}),
        "e": _Templating(group | {"flashinfer_cache_x": "!"}),
        "f": _Templating(group | {"flashinfer_cache_x": "!"}),
        "g": _Templating(group),
    }
    assert preflight.settings_key(hostvars["a"]) == preflight.settings_key(hostvars["g"])
    assert preflight.representatives(list(hostvars), hostvars) == {
        "a": ["a", "b", "g"], "c": ["c"], "d": ["d"], "e": ["e", "f"],
    }  # fmt: skip


def test_the_marker_is_the_one_the_script_prints() -> None:
    assert re.search(rf"printf '%s %s rc=%s\\n%s\\n' \"{MARK}\"", preflight.SCRIPT)


def test_crlf_answers_over_ssh_with_become_are_read_and_a_missing_answer_is_refused() -> None:
    """Over SSH with become Ansible runs the probe on a pty: CRLF lines (seen on the benchmark's
    sshd). Before this was read, no section matched and every rule passed with nothing to read."""
    out = (
        "@@preflight uid rc=0\r\n0\r\n@@preflight df rc=0\r\n"
        + DF.replace("\n", "\r\n")
        + "\r\n@@preflight docker rc=0\r\n20.10.24\r\n"
    )
    probe = preflight.parse_probe({"rc": 0, "stdout": out})
    assert probe.sections == {"uid": Section(0, "0"), "df": Section(0, DF), "docker": Section(0, "20.10.24")}
    assert _refusals(preflight.Settings(gpu_host_prepare=False), probe) == {}
    # a GPU host's answer without nvidia-smi, and an answer with no frame at all, are refused
    said = _refusals(preflight.Settings(), probe)
    assert said == {"probe_complete": "the host's answer to the preflight probe has no nvidia-smi section (got: uid, df, docker); "
                    "run the probe by hand to see why: ansible HOST -m rollout_probe -a 'docker=true'"}  # fmt: skip
    bare = preflight.parse_probe({"rc": 0, "stdout": "Last login: today\r\n"})
    assert _refusals(preflight.Settings(), bare)["probe_complete"].startswith(
        "the host's answer to the preflight probe has no uid, df, nvidia-smi section (got: nothing framed)"
    )


def test_a_probe_that_never_ran_or_failed_says_so_in_its_own_words() -> None:
    """Each way a probe comes back without sections reads as its own message (mutation testing
    found these unread)."""
    assert preflight.parse_probe(None) == HostProbe(unreachable=True, message="the probe did not run on this host")
    rc_only = preflight.parse_probe({"rc": 2, "stdout": "", "stderr": "sh: 1: set: Illegal option -o pipefail"})
    assert rc_only == HostProbe(message="the probe failed (rc 2): sh: 1: set: Illegal option -o pipefail")
    msg_only = preflight.parse_probe({"failed": True, "rc": 0, "stdout": "", "msg": "non-zero return code"})
    assert msg_only == HostProbe(message="the probe failed (rc 0): non-zero return code")
    assert preflight.parse_probe({"rc": 0, "stdout": ""}) == HostProbe()  # answered nothing: probe_complete says so


def test_no_docker_answer_and_several_unknown_variables_read_whole() -> None:
    said = _refusals(preflight.Settings(gpu_host_prepare=False), _probe(smi=None))
    assert said["docker_answers"] == (
        "docker does not answer: no answer. Start the docker engine (scripts/setup.sh does it here) or set "
        "sglang_gpu_host_prepare: true to install it."
    )
    two = preflight.judge_host(preflight.Settings(), _probe(), ["sglang_a", "gpu_host_b (did you mean gpu_host_c?)"])
    assert [(r.rule, r.message) for r in two] == [("known_variables", (
        "unknown variable(s): sglang_a, gpu_host_b (did you mean gpu_host_c?). No role reads them, so they would be "
        "silently ignored. The supported names are in roles/*/defaults/main.yml and roles/README.md."
    ))]  # fmt: skip


def test_a_dict_setting_written_in_another_key_order_is_the_same_setting() -> None:
    a = _Templating({"sglang_gate_config": {"deadline_s": 600, "runs": 3}, "sglang_server_env": {"A": "1", "B": "2"}})
    b = _Templating({"sglang_server_env": {"B": "2", "A": "1"}, "sglang_gate_config": {"runs": 3, "deadline_s": 600}})
    assert preflight.settings_key(a) == preflight.settings_key(b)
    assert preflight.representatives(["a", "b"], {"a": a, "b": b}) == {"a": ["a", "b"]}


def test_values_json_cannot_write_and_different_template_errors_keep_hosts_apart() -> None:
    """A value JSON cannot write (a vault string, a path) keys on its text, and a setting that fails
    to template keys on its error: two hosts differing only there are two sets, each checked."""
    a = _Templating({"sglang_model_dir": Path("/models/a")})
    b = _Templating({"sglang_model_dir": Path("/models/b")})
    assert preflight.settings_key(a) != preflight.settings_key(b)
    assert preflight.settings_key(a) == preflight.settings_key(_Templating({"sglang_model_dir": Path("/models/a")}))

    class _Fails(dict):
        def __init__(self, error: str) -> None:
            super().__init__({"sglang_server_port": "x"})
            self.error = error

        def __getitem__(self, key):
            raise ValueError(self.error)

    one, other = _Fails("'port_a' is undefined"), _Fails("'port_b' is undefined")
    assert preflight.representatives(["h1", "h2"], {"h1": one, "h2": other}) == {"h1": ["h1"], "h2": ["h2"]}


def test_gpu_messages_read_whole_and_the_limits_are_inclusive() -> None:
    mig = RECORDED.replace(
        "Current                                        : Disabled",
        "Current                                        : Enabled",
        1,
    )
    assert _refusals(preflight.Settings(), _probe(smi=mig)) == {"mig_off": (
        "MIG is enabled on 1 GPU(s): tensor parallelism needs whole GPUs; disable it "
        "(nvidia-smi -mig 0, then a GPU reset) before deploying."
    )}  # fmt: skip
    supported = RECORDED.replace(
        "State                                          : N/A",
        "State                                          : Not Supported",
        1,
    )
    assert _refusals(preflight.Settings(), _probe(smi=supported)) == {}  # PCIe cards without NVSwitch
    two = RECORDED + RECORDED.split("GPU 00000000:", 1)[1].join(["\nGPU 00000001:", ""])
    two = two.replace(
        "State                                          : N/A",
        "State                                          : In Progress",
    )
    assert _refusals(preflight.Settings(), _probe(smi=two))["fabric_up"] == (
        "the NVSwitch fabric is not ready on 2 GPU(s) (nvidia-smi -q Fabric State / Status: In Progress / N/A): start "
        "the fabric manager (systemctl enable --now nvidia-fabricmanager; its version must match the driver's) and "
        "wait for State Completed, Status Success."
    )
    exact_gib = 143771 / 1024  # the recorded card, to the MiB
    assert _refusals(preflight.Settings(min_memory_gib=exact_gib), _probe()) == {}
    assert "gpu_memory" in _refusals(preflight.Settings(min_memory_gib=exact_gib + 0.001), _probe())


def test_become_as_root_passes_and_settings_read_ansible_truth_words() -> None:
    assert _refusals(preflight.Settings(become=True, user="deploy"), _probe(uid="0")) == {}
    for word, value in (("1", True), ("Yes", True), ("on", True), ("true", True), ("0", False), ("no", False)):
        assert preflight.Settings.from_vars({"ansible_become": word}).become is value, word
    failed = preflight.parse_probe({"rc": 1, "stdout": "", "stderr": "sudo: a password is required"})
    assert [r.rule for r in preflight.judge_host(preflight.Settings(), failed)] == ["probe"]
