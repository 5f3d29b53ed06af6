"""Preflight's rules: each reads one thing of a host (its settings, its probe) and refuses it with
the variable and the fix, or passes it. They run on the controller, all hosts at once
(plugins/action/rollout_preflight.py), before any host changes; docs/preflight.md lists them.

The defaults here are the documented ones (roles/README.md, "Preflight"): the variables are shared
by the rollout's plays, not one role's, so no role's defaults/main.yml holds them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .probe import HostProbe, Smi, parse_smi
from .settings import PREFIXES

ENGINES = ("sglang", "test-engine")
# Variables with the rollout's prefixes that no role's defaults define: the rollout's own, read by
# playbooks/ (preflight, rollout, summary) and plugins/. A name missing here is called misspelt.
SHARED = frozenset({
    "sglang_engine", "sglang_image", "sglang_gpu_count", "sglang_gpu_arch", "sglang_gpu_host_prepare",
    "sglang_test_engine_env", "sglang_reports_dir", "sglang_run_id", "sglang_rollout_serial",
    "sglang_rollout_max_fail_percentage", "sglang_rollout_run_id", "sglang_rollout_pending",
    "sglang_preflight_min_free_gb", "sglang_preflight_disk_path", "sglang_preflight_min_driver",
    "sglang_rollout_host_lock_stale_s", "sglang_rollout_state_file", "sglang_rollout_left_drained",
    "sglang_gpu_min_memory_gib", "sglang_rollout_keep_runs", "sglang_rollout_rollback",
    "sglang_rollout_hosts", "sglang_rollout_canaries", "sglang_rollout_canary_done",
    "sglang_rollout_image_in_flight", "sglang_metrics_textfile_dir", "sglang_rollout_metrics_file",
})  # fmt: skip
# libyaml's loader where PyYAML has it
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _bool(v: Any) -> bool:
    return v.strip().lower() in ("1", "true", "yes", "on") if isinstance(v, str) else bool(v)


@dataclass(frozen=True)
class Settings:
    """A host's preflight settings (its inventory variables, with the documented defaults)."""

    engine: str = "sglang"
    become: bool = False
    user: str = "the SSH user"
    gpu_host_prepare: bool = True
    disk_path: str = "/var/lib"
    min_free_gb: float = 40.0
    min_driver: int = 580
    gpu_count: int = 1
    min_memory_gib: float = 0.0

    @classmethod
    def from_vars(cls, hv: Mapping[str, Any]) -> Settings:
        def get(name: str, default: Any) -> Any:
            value = hv.get(name)
            return default if value is None or value == "" else value

        return cls(
            engine=str(get("sglang_engine", cls.engine)),
            become=_bool(get("ansible_become", False)),
            user=str(get("ansible_user", cls.user)),
            gpu_host_prepare=_bool(get("sglang_gpu_host_prepare", True)),
            disk_path=str(get("sglang_preflight_disk_path", cls.disk_path)),
            min_free_gb=float(get("sglang_preflight_min_free_gb", cls.min_free_gb)),
            min_driver=int(get("sglang_preflight_min_driver", cls.min_driver)),
            gpu_count=int(get("sglang_gpu_count", cls.gpu_count)),
            min_memory_gib=float(get("sglang_gpu_min_memory_gib", cls.min_memory_gib)),
        )


@dataclass(frozen=True)
class Refusal:
    rule: str
    message: str


Rule = Callable[[Settings, HostProbe], "str | None"]


def _smi(probe: HostProbe) -> Smi | None:
    """nvidia-smi's answer, when it gave one (rc 0)."""
    section = probe.get("nvidia-smi")
    return parse_smi(section.out) if section is not None and section.rc == 0 else None


def probe_complete(s: Settings, probe: HostProbe) -> str | None:
    """Every answer the other rules read is there: a rule with nothing to read would pass silently."""
    wanted = ["uid", "df", "nvidia-smi" if s.gpu_host_prepare else "docker"]
    missing = [name for name in wanted if probe.get(name) is None]
    if not missing:
        return None
    got = ", ".join(probe.sections) or "nothing framed"
    return (
        f"the host's answer to the preflight probe has no {', '.join(missing)} section (got: {got}); "
        "run the probe by hand to see why: ansible HOST -m rollout_probe -a 'docker=true'"
    )


def engine_choice(s: Settings, probe: HostProbe) -> str | None:
    if s.engine in ENGINES:
        return None
    return f"sglang_engine must be one of: {', '.join(ENGINES)}; got {s.engine!r}"


def become_makes_root(s: Settings, probe: HostProbe) -> str | None:
    uid = probe.get("uid")
    if not s.become or uid is None or uid.out.strip() == "0":
        return None
    return (
        f"ansible_become is on but commands run as uid {uid.out.strip() or '?'}: give {s.user} sudo to root "
        "(the roles manage docker, /etc/docker and state files)."
    )


def docker_answers(s: Settings, probe: HostProbe) -> str | None:
    docker = probe.get("docker")
    if s.gpu_host_prepare or (docker is not None and docker.rc == 0):
        return None
    said = docker.out.strip()[:300] if docker is not None else "no answer"
    return (
        f"docker does not answer: {said}. Start the docker engine (scripts/setup.sh does it here) or set "
        "sglang_gpu_host_prepare: true to install it."
    )


def free_disk(s: Settings, probe: HostProbe) -> str | None:
    df = probe.get("df")
    if df is None:
        return None
    try:
        free_gb = int(df.out.strip().splitlines()[-1].split()[3]) / 1e9  # compared unrounded
    except (IndexError, ValueError):
        said = df.out.strip()[:200]
        return f"df -P -B1 {s.disk_path} (sglang_preflight_disk_path) gave no free space (rc {df.rc}): {said}"
    if free_gb >= s.min_free_gb:
        return None
    return (
        f"{free_gb:.1f} GB free on {s.disk_path} (sglang_preflight_disk_path), "
        f"at least {s.min_free_gb:g} GB are needed "
        "(sglang_preflight_min_free_gb: the image, its archive while it loads, the kernel cache). Free space "
        "(docker image prune), or lower the variable if you know the image is smaller."
    )


def nvidia_driver(s: Settings, probe: HostProbe) -> str | None:
    section = probe.get("nvidia-smi")
    if not s.gpu_host_prepare or section is None:
        return None
    if section.rc != 0:
        return (
            f"nvidia-smi -q failed (rc {section.rc}): {section.out.strip()[:200]}. Install the NVIDIA driver, or set "
            "sglang_gpu_host_prepare: false for hosts without GPUs."
        )
    smi = parse_smi(section.out)
    if smi.driver_major >= s.min_driver:
        return None
    return (
        f"NVIDIA driver {smi.driver_version} is older than {s.min_driver} (sglang_preflight_min_driver: CUDA 13 images "
        "need driver 580 or newer); upgrade the driver first."
    )


def mig_off(s: Settings, probe: HostProbe) -> str | None:
    smi = _smi(probe)
    enabled = [m for m in smi.mig if m == "Enabled"] if smi else []
    if not enabled:
        return None
    return (
        f"MIG is enabled on {len(enabled)} GPU(s): tensor parallelism needs whole GPUs; disable it "
        "(nvidia-smi -mig 0, then a GPU reset) before deploying."
    )


def gpu_count(s: Settings, probe: HostProbe) -> str | None:
    smi = _smi(probe)
    if smi is None or smi.gpus >= s.gpu_count:
        return None
    return (
        f"nvidia-smi sees {smi.gpus} GPU(s), the profile needs {s.gpu_count} (sglang_gpu_count, the tensor-parallel "
        "size): a GPU is missing or fell off the bus (nvidia-smi -q, dmesg Xid 79), or the host is in the wrong group."
    )


def gpu_memory(s: Settings, probe: HostProbe) -> str | None:
    smi = _smi(probe)
    if smi is None:
        return None
    smallest = min(smi.memory_mib or [0])
    if smallest >= s.min_memory_gib * 1024:
        return None
    return (
        f"its smallest GPU has {smallest} MiB, the profile needs {s.min_memory_gib:g} GiB (sglang_gpu_min_memory_gib): "
        "this host belongs in another GPU profile."
    )


def fabric_up(s: Settings, probe: HostProbe) -> str | None:
    """NVSwitch hosts (HGX/DGX) have no GPU-to-GPU path until the fabric manager programmed the
    switches (NCCL hangs at the first all-reduce); PCIe cards (the RTX PRO 6000 hosts) say N/A."""
    smi = _smi(probe)
    bad = (
        [f for f in smi.fabric if not f.startswith(("N/A / ", "Not Supported / ")) and f != "Completed / Success"]
        if smi
        else []
    )
    if not bad:
        return None
    return (
        f"the NVSwitch fabric is not ready on {len(bad)} GPU(s) (nvidia-smi -q Fabric State / Status: "
        f"{'; '.join(dict.fromkeys(bad))}): start the fabric manager (systemctl enable --now nvidia-fabricmanager; its "
        "version must match the driver's) and wait for State Completed, Status Success."
    )


RULES: dict[str, Rule] = {
    "probe_complete": probe_complete,
    "engine_choice": engine_choice,
    "become_makes_root": become_makes_root,
    "docker_answers": docker_answers,
    "free_disk": free_disk,
    "nvidia_driver": nvidia_driver,
    "mig_off": mig_off,
    "gpu_count": gpu_count,
    "gpu_memory": gpu_memory,
    "fabric_up": fabric_up,
}


def role_default_names(roles_dir: Path) -> set[str]:
    """Every variable defined in ``roles_dir/*/defaults/main.yml``."""
    names: set[str] = set()
    for path in sorted(roles_dir.glob("*/defaults/main.yml")):
        names.update(yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER) or {})
    return names


def unknown_variables(names: Iterable[Any], known: set[str]) -> list[str]:
    """Each name with the rollout's prefixes that nothing defines, with the closest known name:
    Ansible silently ignores a variable no role reads (``sglang_server_kv_cahce_dtype``)."""
    known_sorted = sorted(known)
    out = []
    for name in sorted({str(n) for n in names}):
        if not name.startswith(PREFIXES) or name in known:
            continue
        close = difflib.get_close_matches(name, known_sorted, n=1, cutoff=0.75)
        out.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return out


def judge_host(settings: Settings, probe: HostProbe, unknown: list[str] | None = None) -> list[Refusal]:
    """Every refusal of one host: unreachable (nothing else can be judged), misspelt variables, then
    each rule in RULES' order."""
    if probe.unreachable:
        return [Refusal("reachable", f"could not be reached (SSH, or the connection failed): {probe.message}".strip())]
    out = []
    if unknown:
        out.append(Refusal("known_variables", (
            f"unknown variable(s): {', '.join(unknown)}. No role reads them, so they would be silently ignored. "
            "The supported names are in roles/*/defaults/main.yml and roles/README.md."
        )))  # fmt: skip
    if probe.message:  # the probe itself failed (sudo refused...): nothing to judge the rules on
        return [*out, Refusal("probe", probe.message)]
    for name, rule in RULES.items():
        said = rule(settings, probe)
        if said:
            out.append(Refusal(name, said))
    return out


def group_refusals(refusals: Mapping[str, list[Refusal]], show_hosts: int = 8) -> list[str]:
    """One line per distinct refusal with the hosts it names (the first ``show_hosts`` of them and a
    count): 200 hosts with one old driver read as one line, not 200."""
    by_message: dict[str, list[str]] = {}
    for host, found in refusals.items():
        for refusal in found:
            by_message.setdefault(refusal.message, []).append(host)
    lines = []
    for message, hosts in by_message.items():
        names = ", ".join(hosts[:show_hosts]) + (
            f" and {len(hosts) - show_hosts} more" if len(hosts) > show_hosts else ""
        )
        lines.append(f"{names}: {message}")
    return lines
