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
QUERY = (REPO / "tests/fixtures/nvidia-smi-h200-2026-12-03/nvidia-smi-query-health.csv").read_text()
# a GPU host's docker before the gpu_host role registered the nvidia runtime, and after (the entry
# daemon.json gets, as docker prints it)
RUNTIMES = (REPO / "tests/fixtures/docker-20.10.24/info-runtimes.json").read_text().strip()
NVIDIA_RUNTIMES = RUNTIMES[:-1] + ',"nvidia":{"path":"nvidia-container-runtime"}}'
DF = "Filesystem 1-blocks Used Available Capacity Mounted on\n/dev/sda1 1000000000000 400000000000 600000000000 40% /"
# booted at 1,000,000 (now 1,010,000, up 10,000 s); the last good deploy 5,000 s after boot
CLOCK = "1010000\n10000.00\n1005000"
SPECS = preflight.specs.load(REPO / "roles")
FIELDS = {"become": "ansible_become", "user": "ansible_user", **preflight.rules.SETTING_VARIABLES}


def _settings(**fields) -> preflight.Settings:
    """A host's settings from its variables (named by the Settings field they fill): a one-GPU profile,
    as the recorded H200, unless a field says otherwise."""
    hv = {FIELDS[k]: v for k, v in {"gpu_count": 1, **fields}.items()}
    settings, errors = preflight.Settings.from_vars(hv, SPECS)
    assert errors == []
    return settings


GPUS, RUNTIMES_OK = Section(0, QUERY), Section(0, NVIDIA_RUNTIMES)
TOOLKIT, NO_XID = Section(0, "/usr/bin/nvidia-container-runtime"), Section(0, "")


def _probe(smi: str | None = RECORDED, smi_rc: int = 0, uid: str = "0", df: str = DF, docker: Section | None = None,
           gpus: Section | None = GPUS, runtimes: Section | None = RUNTIMES_OK, toolkit: Section | None = TOOLKIT,
           clock: str = CLOCK, xid: Section | None = NO_XID):  # fmt: skip
    sections = {"uid": Section(0, uid), "df": Section(0, df)}
    if smi is not None:
        sections["nvidia-smi"] = Section(smi_rc, smi)
        sections |= {"gpus": gpus} if gpus is not None else {}
        sections |= {"runtimes": runtimes} if runtimes is not None else {}
        sections |= {"toolkit": toolkit} if toolkit is not None else {}
        sections |= {"clock": Section(0, clock), "xid": xid} if xid is not None else {}
    if docker is not None:
        sections["docker"] = docker
    return HostProbe(sections=sections)


def _refusals(settings: preflight.Settings, probe: HostProbe) -> dict[str, str]:
    return {r.rule: r.message for r in preflight.judge_host(settings, probe)}


def test_the_probe_script_runs_in_sh_and_frames_each_answer(tmp_path: Path) -> None:
    """The script as shipped, with the arguments a GPU host's settings give it, run by sh with a
    stand-in nvidia-smi that fails and a kernel log with Xid lines before and after the last good
    deploy: each command's exit status and output are kept apart, the failing one does not hide the
    others, only the Xid lines travel, and the host's clock places the record."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver' >&2\nexit 9\n"
    )
    smi.chmod(0o755)
    klog = tmp_path / "kern.log"
    before = "[    5.000000] NVRM: Xid (PCI:0000:00:06): 79, pid=1, GPU has fallen off the bus."
    after = "[99999999.000000] NVRM: Xid (PCI:0000:00:06): 48, pid=1, DBE"
    klog.write_text(f"[    1.000000] Linux version 6.1\n{before}\n[    6.000000] eth0: link up\n{after}\n")
    state = tmp_path / "state"
    state.mkdir()
    (state / "sglang.last-good.json").write_text("{}")  # written now: long after 5 s from boot
    settings = _settings(disk_path=str(tmp_path), min_free_gb=0, nvidia_smi=str(smi), check_runtime=False,
                         kernel_log=["cat", str(klog)], state_dir=str(state))  # fmt: skip
    assert settings.probe_args() == [str(tmp_path), str(smi), "-", f"{state}/sglang.last-good.json", "cat", str(klog)]
    out = subprocess.run(
        ["sh", "-c", preflight.SCRIPT, "preflight", *settings.probe_args()], capture_output=True, text=True, check=True
    ).stdout
    probe = preflight.parse_probe({"rc": 0, "stdout": "Welcome to gpu-host-01\n" + out})
    assert list(probe.sections) == ["uid", "df", "nvidia-smi", "gpus", "clock", "xid"]
    assert probe.sections["uid"].out.isdigit()
    failed = Section(9, "NVIDIA-SMI has failed because it could not communicate with the driver")
    assert probe.sections["nvidia-smi"] == failed and probe.sections["gpus"] == failed
    assert probe.sections["df"].rc == 0 and probe.sections["df"].out.splitlines()[0].startswith("Filesystem")
    assert probe.sections["xid"] == Section(0, f"{before}\n{after}")
    now, up, mtime = probe.sections["clock"].out.split()
    assert int(mtime) == int((state / "sglang.last-good.json").stat().st_mtime) and float(up) > 0 and int(now) >= int(mtime)
    said = _refusals(settings, probe)
    assert said == {
        "nvidia_driver": "nvidia-smi -q failed (rc 9): NVIDIA-SMI has failed because it could not communicate "
                         "with the driver. Install the NVIDIA driver, or set sglang_gpu_host_prepare: false for hosts without GPUs.",
        "gpu_arch": "nvidia-smi --query-gpu failed (rc 9): NVIDIA-SMI has failed because it could not communicate with the driver.",
        "xid_since_last_good": f"1 Xid event(s): GPU at PCI 0000:00:06: Xid 48 (double-bit ECC error) in the kernel log since the "
                               f"last good deploy: {after}. Have the GPU checked (nvidia-smi -q, the kernel log); once it is "
                               "sound, reboot the host (its kernel log starts empty) or list the code in gpu_host_xid_ignore.",
    }  # fmt: skip
    (state / "sglang.last-good.json").unlink()  # no record yet: every event since boot counts
    out = subprocess.run(["sh", "-c", preflight.SCRIPT, "preflight", *settings.probe_args()],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    probe = preflight.parse_probe({"rc": 0, "stdout": out})
    assert probe.sections["clock"].out.split()[2] == "none"
    assert _refusals(settings, probe)["xid_since_last_good"].startswith("2 Xid event(s): GPU at PCI 0000:00:06: Xid 79")


def test_what_the_probe_asks_follows_the_hosts_settings() -> None:
    """Docker's runtimes and the toolkit on GPU hosts the role checks them on, its version on hosts
    gpu_host does not prepare; the kernel log only where gpu_host counts Xid events."""
    record = "/var/lib/sglang-deploy/sglang.last-good.json"
    assert _settings().probe_args() == ["/var/lib", "nvidia-smi", "runtimes", record, "dmesg"]
    assert _settings(gpu_host_prepare=False).probe_args() == ["/var/lib", "-", "version"]
    assert _settings(check_xid=False, check_gpus=False).probe_args() == ["/var/lib", "nvidia-smi", "-"]
    assert _settings(check_health=False, check_runtime=False).probe_args() == ["/var/lib", "nvidia-smi", "-"]
    assert _settings(kernel_log=[]).probe_args() == ["/var/lib", "nvidia-smi", "runtimes"]
    named = _settings(state_dir="/srv/state", container_name="glm5", kernel_log=["journalctl", "-k"])
    assert named.probe_args()[3:] == ["/srv/state/glm5.last-good.json", "journalctl", "-k"]


def test_the_recorded_h200_passes_every_rule() -> None:
    smi = preflight.parse_q(RECORDED)
    assert (smi.driver_version, smi.driver_major, len(smi.gpus)) == ("580.159.04", 580, 1)
    assert (smi.memory_mib, smi.mig, smi.fabric) == ([143771], ["Disabled"], ["N/A / N/A"])
    assert preflight.judge_host(_settings(gpu_count=1, min_memory_gib=140), _probe()) == []


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
    said = _refusals(_settings(**settings), _probe(smi=text))
    assert list(said) == [rule]
    assert said[rule].startswith(message)


def test_an_nvswitch_fabric_that_completed_passes_and_one_that_failed_does_not() -> None:
    block = "State                                          : N/A\n        Status                                         : N/A"
    assert block in RECORDED
    ok = RECORDED.replace(block, block.replace("N/A", "Completed", 1).replace(": N/A", ": Success"))
    bad = RECORDED.replace(block, block.replace("N/A", "Completed", 1).replace(": N/A", ": Failure"))
    assert preflight.parse_q(ok).fabric == ["Completed / Success"]
    assert _refusals(_settings(), _probe(smi=ok)) == {}
    assert "Completed / Failure" in _refusals(_settings(), _probe(smi=bad))["fabric_up"]


def test_disk_sudo_and_docker_rules() -> None:
    full = DF.replace("600000000000", "39999999999")
    said = _refusals(_settings(min_free_gb=40), _probe(df=full))
    assert said == {"free_disk": "40.0 GB free on /var/lib (sglang_preflight_disk_path), at least 40 GB are needed "
                    "(sglang_preflight_min_free_gb: the image, its archive while it loads, the kernel cache). Free space "
                    "(docker image prune), or lower the variable if you know the image is smaller."}  # fmt: skip
    assert _refusals(_settings(min_free_gb=39.9), _probe(df=full)) == {}  # 39.999999999 GB: compared unrounded
    assert "gave no free space (rc 0): df: /nope: No such file" in _refusals(
        _settings(), _probe(df="df: /nope: No such file or directory"))["free_disk"]  # fmt: skip
    sudo = _refusals(_settings(become=True, user="deploy"), _probe(uid="1000"))
    assert sudo == {"become_makes_root": "ansible_become is on but commands run as uid 1000: give deploy sudo to root "
                    "(the roles manage docker, /etc/docker and state files)."}  # fmt: skip
    assert _refusals(_settings(become=False), _probe(uid="1000")) == {}
    no_gpu = _settings(gpu_host_prepare=False)
    assert _refusals(no_gpu, _probe(smi=None, docker=Section(0, "20.10.24"))) == {}
    down = _refusals(no_gpu, _probe(smi=None, docker=Section(1, "Cannot connect to the Docker daemon")))
    assert down["docker_answers"].startswith("docker does not answer: Cannot connect to the Docker daemon. Start the")


def test_settings_come_from_inventory_values_with_the_defaults_of_their_specs() -> None:
    """No default is restated in Python: unset, each setting has the one its role's defaults or
    preflight/variables.yml give it; set, it is coerced as its spec's type says."""
    s, errors = preflight.Settings.from_vars({}, SPECS)
    assert errors == [] and s == preflight.Settings(
        become=False, user="the SSH user", gpu_host_prepare=True, disk_path="/var/lib", min_free_gb=40.0,
        min_driver=580, gpu_count=8, min_memory_gib=0.0, gpu_arch="", nvidia_smi="nvidia-smi", check_health=True,
        check_xid=True, xid_ignore=[], kernel_log=["dmesg"], check_gpus=True, check_runtime=True,
        manage_daemon_config=True, install_toolkit=True, offline=False, state_dir="/var/lib/sglang-deploy",
        container_name="sglang",
    )  # fmt: skip
    s, errors = preflight.Settings.from_vars({
        "ansible_become": "yes", "ansible_user": "ops", "sglang_gpu_host_prepare": "false",
        "sglang_preflight_disk_path": "/data", "sglang_preflight_min_free_gb": "12.5", "sglang_preflight_min_driver": "590",
        "sglang_gpu_count": "4", "sglang_gpu_min_memory_gib": "90", "sglang_gpu_arch": 120, "gpu_host_xid_ignore": ["13"],
        "gpu_host_offline": "yes", "sglang_preflight_unused": "x",
    }, SPECS)  # fmt: skip
    assert errors == []
    assert (s.become, s.user, s.gpu_host_prepare, s.disk_path, s.min_free_gb, s.min_driver, s.gpu_count) == (
        True, "ops", False, "/data", 12.5, 590, 4,
    )  # fmt: skip
    assert (s.min_memory_gib, s.gpu_arch, s.xid_ignore, s.offline) == (90.0, "120", [13], True)
    assert preflight.Settings.from_vars({"sglang_preflight_min_free_gb": ""}, SPECS)[0].min_free_gb == 40.0


def test_an_invalid_setting_is_refused_naming_the_variable_and_what_it_may_hold() -> None:
    """The rollout's own variables (preflight/variables.yml) are validated for every host, by Ansible's
    argument-spec validator; an invalid one is read as its default, so the other rules still judge."""
    hv = {"sglang_engine": "vllm", "sglang_gpu_count": "eight", "gpu_host_check_xid": "maybe", "sglang_rollout_keep_runs": "x"}
    s, errors = preflight.Settings.from_vars(hv, SPECS)
    assert (s.gpu_count, s.check_xid) == (8, True)
    assert errors[1].startswith(  # then Ansible lists the valid words, in a set's order
        "argument 'gpu_host_check_xid' is of type str and we were unable to convert to bool: The value 'maybe' is not a "
        "valid boolean."
    )
    assert errors[:1] + errors[2:] == [
        "argument 'sglang_gpu_count' is of type str and we were unable to convert to int: \"'eight'\" cannot be converted to an int",
        "value of sglang_engine must be one of: sglang, test-engine, got: vllm",
        "argument 'sglang_rollout_keep_runs' is of type str and we were unable to convert to int: \"'x'\" cannot be converted to an int",
    ]  # fmt: skip
    said = preflight.judge_host(s, _probe(), invalid=errors[2:3])
    assert [(r.rule, r.message) for r in said] == [
        ("settings", "invalid setting(s): value of sglang_engine must be one of: sglang, test-engine, got: vllm."),
        ("gpu_count", "nvidia-smi sees 1 GPU(s), the profile needs 8 (sglang_gpu_count, the tensor-parallel size): a GPU "
                      "is missing or fell off the bus (nvidia-smi -q, dmesg Xid 79), or the host is in the wrong group."),
    ]  # fmt: skip


def test_an_unreachable_host_is_judged_on_that_alone_and_a_failed_probe_is_said() -> None:
    gone = preflight.parse_probe(
        {"unreachable": True, "msg": "ssh: connect to host 10.0.0.5 port 22: No route to host"}
    )
    assert [(r.rule, r.message) for r in preflight.judge_host(_settings(), gone, ["sglang_x"], ["bad"])] == [
        ("reachable", "could not be reached (SSH, or the connection failed): ssh: connect to host 10.0.0.5 port 22: "
                      "No route to host"),
    ]  # fmt: skip
    assert preflight.parse_probe(None).unreachable
    failed = preflight.parse_probe({"rc": 1, "failed": True, "stdout": "", "stderr": "sudo: a password is required"})
    assert not failed.unreachable
    assert [r.message for r in preflight.judge_host(_settings(), failed)] == [
        "the probe failed (rc 1): sudo: a password is required"
    ]


def test_misspelt_variables_are_named_with_the_closest_known_one() -> None:
    known = {"sglang_server_kv_cache_dtype", "sglang_gate_port"} | SPECS.ours
    names = ["sglang_server_kv_cahce_dtype", "sglang_zzz", "ansible_host", "sglang_gate_port", "other_var"]
    assert preflight.unknown_variables(names, known) == [
        "sglang_server_kv_cahce_dtype (did you mean sglang_server_kv_cache_dtype?)", "sglang_zzz",
    ]  # fmt: skip
    said = preflight.judge_host(_settings(), _probe(), ["sglang_zzz"])
    assert [r.rule for r in said] == ["known_variables"] and said[0].message.startswith(
        "unknown variable(s): sglang_zzz."
    )
    assert "sglang_server_kv_cache_dtype" in SPECS.known and "sglang_rollout_canary_done" in SPECS.known


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
    assert _refusals(_settings(gpu_host_prepare=False), probe) == {}
    # a GPU host's answer without nvidia-smi, and an answer with no frame at all, are refused
    said = _refusals(_settings(), probe)
    assert said == {"probe_complete": "the host's answer to the preflight probe has no nvidia-smi, gpus, runtimes, toolkit, "
                    "clock, xid section (got: uid, df, docker); run the probe by hand to see why: ansible HOST -m "
                    "rollout_probe"}  # fmt: skip
    bare = preflight.parse_probe({"rc": 0, "stdout": "Last login: today\r\n"})
    assert _refusals(_settings(), bare)["probe_complete"].startswith(
        "the host's answer to the preflight probe has no uid, df, nvidia-smi, gpus, runtimes, toolkit, clock, xid section "
        "(got: nothing framed)"
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
    said = _refusals(_settings(gpu_host_prepare=False), _probe(smi=None))
    assert said["docker_answers"] == (
        "docker does not answer: no answer. Start the docker engine (scripts/setup.sh does it here) or set "
        "sglang_gpu_host_prepare: true to install it."
    )
    two = preflight.judge_host(_settings(), _probe(), ["sglang_a", "gpu_host_b (did you mean gpu_host_c?)"])
    assert [(r.rule, r.message) for r in two] == [("known_variables", (
        "unknown variable(s): sglang_a, gpu_host_b (did you mean gpu_host_c?). No role reads them, so they would be "
        "silently ignored. The supported names are in roles/*/defaults/main.yml and preflight/variables.yml."
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
    assert _refusals(_settings(), _probe(smi=mig)) == {"mig_off": (
        "MIG is enabled on 1 GPU(s): tensor parallelism needs whole GPUs; disable it "
        "(nvidia-smi -mig 0, then a GPU reset) before deploying."
    )}  # fmt: skip
    supported = RECORDED.replace(
        "State                                          : N/A",
        "State                                          : Not Supported",
        1,
    )
    assert _refusals(_settings(), _probe(smi=supported)) == {}  # PCIe cards without NVSwitch
    two = RECORDED + RECORDED.split("GPU 00000000:", 1)[1].join(["\nGPU 00000001:", ""])
    two = two.replace(
        "State                                          : N/A",
        "State                                          : In Progress",
    )
    assert _refusals(_settings(), _probe(smi=two))["fabric_up"] == (
        "the NVSwitch fabric is not ready on 2 GPU(s) (nvidia-smi -q Fabric State / Status: In Progress / N/A): start "
        "the fabric manager (systemctl enable --now nvidia-fabricmanager; its version must match the driver's) and "
        "wait for State Completed, Status Success."
    )
    exact_gib = 143771 / 1024  # the recorded card, to the MiB
    assert _refusals(_settings(min_memory_gib=exact_gib), _probe()) == {}
    assert "gpu_memory" in _refusals(_settings(min_memory_gib=exact_gib + 0.001), _probe())


def test_become_as_root_passes_and_settings_read_ansible_truth_words() -> None:
    assert _refusals(_settings(become=True, user="deploy"), _probe(uid="0")) == {}
    for word, value in (("1", True), ("Yes", True), ("on", True), ("true", True), ("0", False), ("no", False)):
        assert preflight.Settings.from_vars({"ansible_become": word}, SPECS)[0].become is value, word
    failed = preflight.parse_probe({"rc": 1, "stdout": "", "stderr": "sudo: a password is required"})
    assert [r.rule for r in preflight.judge_host(_settings(), failed)] == ["probe"]


@pytest.mark.parametrize(
    ("gpu_arch", "refused"),
    [("90", False), ("sm_90", False), ("9.0", False), ("", False), ("120", True), ("100", True)],
)
def test_the_gpus_arch_against_the_profiles_from_the_recorded_query(gpu_arch: str, refused: bool) -> None:
    said = _refusals(_settings(gpu_arch=gpu_arch), _probe())
    want = f"sm_{gpu_arch}" if refused else ""
    assert said == ({"gpu_arch": f"its GPUs are sm_90 (NVIDIA H200), the profile expects {want} (sglang_gpu_arch): put the "
                     "host in its GPU profile's group, or correct sglang_gpu_arch."} if refused else {})  # fmt: skip


def test_a_host_with_gpus_of_two_archs_is_refused_whatever_the_profile() -> None:
    rtx = QUERY.strip().splitlines()[1].replace("NVIDIA H200", "NVIDIA RTX PRO 6000 Blackwell Server Edition")
    rtx = rtx.replace("00000000:00:06.0, 9.0", "00000000:3B:00.0, 12.0")
    mixed = Section(0, QUERY.strip() + "\n" + rtx.replace("0, NVIDIA", "1, NVIDIA", 1) + "\n")
    for arch in ("", "90", "120"):
        assert _refusals(_settings(gpu_arch=arch), _probe(gpus=mixed)) == {"gpu_arch": (
            "its GPUs are of 2 compute capabilities (sm_120 (NVIDIA RTX PRO 6000 Blackwell Server Edition), sm_90 "
            "(NVIDIA H200)): one host serves one GPU profile."
        )}  # fmt: skip
    assert _refusals(_settings(gpu_host_prepare=False), _probe(smi=None, docker=Section(0, "20.10.24"))) == {}


XID_79 = "[ 4999.900000] NVRM: Xid (PCI:0000:00:06): 79, pid=2394, name=python3, GPU has fallen off the bus."
XID_48 = "[ 5000.000000] NVRM: Xid (PCI:0000:00:06): 48, pid=1, name=python3, DBE (0x1)"
XID_13 = "[ 6000.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics Exception"


def test_xid_events_since_the_last_good_deploy_are_refused_naming_the_gpu() -> None:
    log = Section(0, "\n".join([XID_79, XID_48, XID_13]))
    said = _refusals(_settings(), _probe(xid=log))  # the record: 5,000 s after boot (CLOCK)
    assert said == {"xid_since_last_good": (
        f"2 Xid event(s): GPU0: Xid 48 (double-bit ECC error) in the kernel log since the last good deploy: {XID_48}; "
        f"GPU at PCI 0000:3b:00: Xid 13 (graphics engine exception) in the kernel log since the last good deploy: {XID_13}. "
        "Have the GPU checked (nvidia-smi -q, the kernel log); once it is sound, reboot the host (its kernel log starts "
        "empty) or list the code in gpu_host_xid_ignore."
    )}  # fmt: skip
    assert _refusals(_settings(xid_ignore=[48, 13]), _probe(xid=log)) == {}
    assert _refusals(_settings(check_xid=False), _probe(xid=log)) == {}
    assert _refusals(_settings(check_health=False), _probe(xid=log)) == {}
    no_record = _refusals(_settings(), _probe(xid=log, clock="1010000\n10000.00\nnone"))["xid_since_last_good"]
    assert no_record.startswith(f"3 Xid event(s): GPU0: Xid 79 (GPU has fallen off the bus) in the kernel log since boot: {XID_79}; ")
    older = _refusals(_settings(), _probe(xid=log, clock="1010000\n10000.00\n900000"))["xid_since_last_good"]
    assert older.startswith("3 Xid event(s)")  # a record from before this boot: every event of this boot counts
    assert _refusals(_settings(), _probe(xid=Section(0, ""))) == {}


def test_many_xid_events_read_as_three_and_a_count_and_a_kernel_log_or_clock_that_cannot_be_read_is_said() -> None:
    many = Section(0, "\n".join(XID_13.replace("6000.0", f"{6000 + i}.0") for i in range(5)))
    said = _refusals(_settings(), _probe(xid=many))["xid_since_last_good"]
    assert said.startswith("5 Xid event(s): GPU at PCI 0000:3b:00: Xid 13") and said.count("Xid 13 (") == 3
    assert " (and 2 more). Have the GPU checked" in said
    denied = Section(1, "dmesg: read kernel buffer failed: Operation not permitted")
    assert _refusals(_settings(), _probe(xid=denied)) == {"xid_since_last_good": (
        "cannot read the kernel log for Xid events (dmesg: rc 1, dmesg: read kernel buffer failed: Operation not "
        "permitted): run with become, or set gpu_host_check_xid: false."
    )}  # fmt: skip
    for clock in ("", "1010000", "x\n1\n2"):
        assert _refusals(_settings(), _probe(xid=Section(0, XID_13), clock=clock)) == {"xid_since_last_good": (
            f"the host's clock could not be read (date +%s, /proc/uptime): {' '.join(clock.split())!r}."
        )}  # fmt: skip


NO_TOOLKIT = Section(1, "")
NO_DOCKER = Section(127, "sh: 1: docker: not found")


@pytest.mark.parametrize(
    ("settings", "runtimes", "toolkit", "message"),
    [
        ({}, RUNTIMES, NO_TOOLKIT, None),  # the role installs the toolkit and registers the runtime
        ({}, NO_DOCKER, NO_TOOLKIT, None),  # ... and installs docker
        ({"manage_daemon_config": False}, NVIDIA_RUNTIMES, Section(0, "/usr/bin/nvidia-container-runtime"), None),
        ({"check_runtime": False, "manage_daemon_config": False, "install_toolkit": False}, RUNTIMES, NO_TOOLKIT, None),
        ({"check_gpus": False, "manage_daemon_config": False}, RUNTIMES, NO_TOOLKIT, None),
        ({"manage_daemon_config": False}, RUNTIMES, Section(0, "/usr/bin/nvidia-container-runtime"),
         "docker has no nvidia runtime (runtimes: io.containerd.runc.v2, io.containerd.runtime.v1.linux, runc) and "
         "gpu_host_manage_daemon_config is false: run 'nvidia-ctk runtime configure --runtime=docker' on the host and "
         "reload docker, or set gpu_host_manage_daemon_config: true."),
        ({"manage_daemon_config": False}, NO_DOCKER, Section(0, "/usr/bin/nvidia-container-runtime"),
         "docker has no nvidia runtime (docker info: sh: 1: docker: not found) and gpu_host_manage_daemon_config is false"),
        ({"offline": True}, NVIDIA_RUNTIMES, NO_TOOLKIT,
         "nvidia-container-runtime is not installed and the rollout will not install it (gpu_host_offline is true): "
         "install nvidia-container-toolkit on the host (from your mirror or OS image)."),
        ({"install_toolkit": False, "manage_daemon_config": False}, "{not json", NO_TOOLKIT,
         "nvidia-container-runtime is not installed and the rollout will not install it (gpu_host_install_toolkit is "
         "false): install nvidia-container-toolkit on the host (from your mirror or OS image); docker has no nvidia "
         "runtime (docker info: {not json) and gpu_host_manage_daemon_config is false"),
    ],
)  # fmt: skip
def test_the_nvidia_container_runtime_is_there_or_the_role_will_set_it_up(settings, runtimes, toolkit, message) -> None:
    answer = runtimes if isinstance(runtimes, Section) else Section(0, runtimes)
    said = _refusals(_settings(**settings), _probe(runtimes=answer, toolkit=toolkit))
    if message is None:
        assert said == {}
    else:
        assert list(said) == ["nvidia_runtime"] and said["nvidia_runtime"].startswith(message), said


def test_specs_are_read_from_the_roles_and_variables_yml_each_time_they_load() -> None:
    """Loaded inside the test (not at import), as the action plugins load them in a run: the roles'
    plain defaults are defaults, templated ones are not (only the role resolves them), a name
    without a spec passes as it is, and an empty value is unset."""
    preflight.specs.load.cache_clear()
    specs = preflight.specs.load(REPO / "roles")
    assert {"sglang_server_kv_cache_dtype", "gpu_host_xid_since_file"} <= specs.role_variables
    assert specs.ours >= {"sglang_engine", "sglang_gpu_arch", "sglang_preflight_min_free_gb"}
    assert specs.run_state == preflight.specs.RUN_STATE and "sglang_rollout_canary_done" in specs.run_state
    assert specs.known == specs.ours | specs.role_variables | specs.run_state | set(specs.options)
    assert specs.defaults["gpu_host_nvidia_smi"] == "nvidia-smi" and specs.defaults["sglang_gpu_count"] == 8
    assert "gpu_host_expected_gpu_count" not in specs.defaults  # "{{ sglang_gpu_count | default(8) }}"
    assert specs.options["sglang_server_kv_cache_dtype"]["choices"] == ["auto", "fp8_e4m3", "fp8_e5m2", "bf16"]
    values, errors = specs.typed(
        {"no_spec_here": {"a": "1"}, "gpu_host_nvidia_smi": "", "gpu_host_expected_gpu_count": "4"},
        ["no_spec_here", "gpu_host_nvidia_smi", "gpu_host_expected_gpu_count", "sglang_gpu_arch"],
    )
    assert errors == []
    assert values == {"no_spec_here": {"a": "1"}, "gpu_host_nvidia_smi": "nvidia-smi", "gpu_host_expected_gpu_count": 4,
                      "sglang_gpu_arch": ""}  # fmt: skip
    values, errors = specs.typed({"no_spec_here": "x", "sglang_gpu_count": "many"}, ["no_spec_here", "sglang_gpu_count"])
    assert values == {"no_spec_here": "x", "sglang_gpu_count": 8} and len(errors) == 1


def test_edges_of_the_probe_answer_and_of_the_limits() -> None:
    """What mutation testing found unread: a section keeps its last line's trailing characters, an
    answer without msg or stdout reads as empty, limits are inclusive, the fallbacks read whole."""
    sections = preflight.probe.parse_sections("@@preflight a rc=0\nline  \n@@preflight b rc=1\nends X\n\n")
    assert sections == {"a": Section(0, "line  "), "b": Section(1, "ends X")}
    assert preflight.parse_probe({"unreachable": True}) == HostProbe(unreachable=True, message="")
    assert preflight.parse_probe({"failed": True, "rc": 1}) == HostProbe(message="the probe failed (rc 1): ")
    exact = DF.replace("600000000000", "40000000000")  # 40 GB to the byte
    assert _refusals(_settings(), _probe(df=exact)) == {}
    assert "free_disk" in _refusals(_settings(), _probe(df=DF.replace("600000000000", "39999999999")))
    assert _refusals(_settings(become=True, user="ops"), _probe(uid=""))["become_makes_root"].startswith(
        "ansible_become is on but commands run as uid ?: give ops sudo to root"
    )
    assert _refusals(_settings(min_memory_gib=141), _probe())["gpu_memory"] == (
        "its smallest GPU has 143771 MiB, the profile needs 141 GiB (sglang_gpu_min_memory_gib): this host belongs in "
        "another GPU profile."
    )
    two = preflight.judge_host(_settings(), _probe(), invalid=["a", "b"])
    assert [r.message for r in two if r.rule == "settings"] == ["invalid setting(s): a; b."]


@pytest.mark.parametrize(
    ("probe", "rule", "prefix", "cut"),
    [
        ({"smi": None, "docker": Section(1, "d" * 400)}, "docker_answers", "docker does not answer: ", 300),
        ({"df": "e" * 400}, "free_disk", "df -P -B1 /var/lib (sglang_preflight_disk_path) gave no free space (rc 0): ", 200),
        ({"smi_rc": 9, "smi": "f" * 400}, "nvidia_driver", "nvidia-smi -q failed (rc 9): ", 200),
        ({"gpus": Section(9, "g" * 400)}, "gpu_arch", "nvidia-smi --query-gpu failed (rc 9): ", 200),
        ({"xid": Section(0, XID_13), "clock": "h" * 400}, "xid_since_last_good",
         "the host's clock could not be read (date +%s, /proc/uptime): '", 200),
    ],
)  # fmt: skip
def test_long_answers_are_cut_where_the_message_says(probe: dict, rule: str, prefix: str, cut: int) -> None:
    settings = {"gpu_host_prepare": False} if rule == "docker_answers" else {}
    said = _refusals(_settings(**settings), _probe(**probe))[rule]
    assert said.startswith(prefix) and said[len(prefix) :].startswith(said[len(prefix)] * cut)
    assert not said[len(prefix) :].startswith(said[len(prefix)] * (cut + 1))


def test_xid_edges_exactly_three_events_no_clock_section_and_a_record_line_missing() -> None:
    three = Section(0, "\n".join(XID_13.replace("6000.0", f"{6000 + i}.0") for i in range(3)))
    assert " more)" not in _refusals(_settings(), _probe(xid=three))["xid_since_last_good"]
    four = Section(0, "\n".join(XID_13.replace("6000.0", f"{6000 + i}.0") for i in range(4)))
    assert " (and 1 more). " in _refusals(_settings(), _probe(xid=four))["xid_since_last_good"]
    no_clock = HostProbe(sections={k: v for k, v in _probe(xid=Section(0, XID_13)).sections.items() if k != "clock"})
    assert preflight.rules.xid_since_last_good(_settings(), no_clock) == (
        "the host's clock could not be read (date +%s, /proc/uptime): ''."
    )
    two_lines = _refusals(_settings(), _probe(xid=Section(0, XID_79), clock="1010000\n10000.00"))
    assert "in the kernel log since boot" in two_lines["xid_since_last_good"]  # no third line: no record


def test_runtime_edges_no_toolkit_answer_and_a_docker_that_failed_with_json() -> None:
    no_toolkit = HostProbe(sections={k: v for k, v in _probe().sections.items() if k != "toolkit"})
    assert preflight.rules.nvidia_runtime(_settings(manage_daemon_config=False), no_toolkit) is None
    failed = _refusals(_settings(manage_daemon_config=False), _probe(runtimes=Section(1, NVIDIA_RUNTIMES)))
    assert failed["nvidia_runtime"].startswith(f"docker has no nvidia runtime (docker info: {NVIDIA_RUNTIMES})")
    long = _refusals(_settings(manage_daemon_config=False), _probe(runtimes=Section(1, "r" * 400)))["nvidia_runtime"]
    assert "r" * 200 in long and "r" * 201 not in long


def test_refusals_name_up_to_eight_hosts_by_default() -> None:
    old = preflight.Refusal("nvidia_driver", "driver old")
    assert preflight.group_refusals({f"h{i}": [old] for i in range(1, 9)}) == [
        "h1, h2, h3, h4, h5, h6, h7, h8: driver old"
    ]
    assert preflight.group_refusals({f"h{i}": [old] for i in range(1, 10)}) == [
        "h1, h2, h3, h4, h5, h6, h7, h8 and 1 more: driver old"
    ]
