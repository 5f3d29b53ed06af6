"""Preflight's rules: each reads one thing of a host (its settings, its probe) and refuses it with
the variable and the fix, or passes it. They run on the controller, all hosts at once
(plugins/action/rollout_preflight.py), before any host changes; docs/preflight.md lists them.

A host's settings are read with the types and defaults written once in the roles' argument specs
and defaults and in preflight/variables.yml (preflight/specs.py): no default is restated here.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .gpu_facts import SmiLog, after_boot, arch, kernel_log_unreadable, parse_q, parse_query, parse_xid, xid_failures
from .probe import HostProbe, Section
from .settings import PREFIXES
from .specs import Specs

# Each setting preflight reads: the variable it comes from (a host's value, else the default its
# role or preflight/variables.yml gives it).
SETTING_VARIABLES = {
    "gpu_host_prepare": "sglang_gpu_host_prepare",
    "disk_path": "sglang_preflight_disk_path",
    "min_free_gb": "sglang_preflight_min_free_gb",
    "min_driver": "sglang_preflight_min_driver",
    "gpu_count": "sglang_gpu_count",
    "min_memory_gib": "sglang_gpu_min_memory_gib",
    "gpu_arch": "sglang_gpu_arch",
    "nvidia_smi": "gpu_host_nvidia_smi",
    "check_health": "gpu_host_check_health",
    "check_xid": "gpu_host_check_xid",
    "xid_ignore": "gpu_host_xid_ignore",
    "kernel_log": "gpu_host_kernel_log_command",
    "check_gpus": "gpu_host_check_gpus",
    "check_runtime": "gpu_host_check_runtime",
    "manage_daemon_config": "gpu_host_manage_daemon_config",
    "install_toolkit": "gpu_host_install_toolkit",
    "offline": "gpu_host_offline",
    "state_dir": "sglang_server_state_dir",
    "container_name": "sglang_server_container_name",
}
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Settings:
    """A host's preflight settings: its variables, typed and defaulted by their specs."""

    become: bool
    user: str
    gpu_host_prepare: bool
    disk_path: str
    min_free_gb: float
    min_driver: int
    gpu_count: int
    min_memory_gib: float
    gpu_arch: str
    nvidia_smi: str
    check_health: bool
    check_xid: bool
    xid_ignore: list[int]
    kernel_log: list[str]
    check_gpus: bool
    check_runtime: bool
    manage_daemon_config: bool
    install_toolkit: bool
    offline: bool
    state_dir: str
    container_name: str

    @classmethod
    def from_vars(cls, hv: Mapping[str, Any], specs: Specs) -> tuple[Settings, list[str]]:
        """The settings of a host (``hv``: its variables) and the errors of every setting preflight
        validates: those it reads and the rollout's own (preflight/variables.yml). An invalid value
        is named in the errors and read as its default."""
        names = [*SETTING_VARIABLES.values(), *sorted(specs.ours - set(SETTING_VARIABLES.values()))]
        values, errors = specs.typed(hv, names)
        errors += share_errors(values)  # counts or percentages: beyond what an argument spec can say
        return cls(
            become=str(hv.get("ansible_become")).strip().lower() in _TRUE,  # Ansible's truth words, or a bool
            user=str(hv.get("ansible_user") or "the SSH user"),
            **{f: values[v] for f, v in SETTING_VARIABLES.items()},
        ), errors

    @property
    def last_good(self) -> str:
        """The sglang_server role's record of the host's last good deploy (its modification time is
        when the host last passed a gate): Xid events count from it, as the gpu_host role counts them."""
        return f"{self.state_dir}/{self.container_name}.last-good.json"

    @property
    def xid_checked(self) -> bool:
        return self.gpu_host_prepare and self.check_health and self.check_xid

    @property
    def runtime_checked(self) -> bool:
        return self.gpu_host_prepare and self.check_gpus and self.check_runtime

    def probe_args(self) -> list[str]:
        """The probe script's arguments (preflight/probe.py, SCRIPT) for this host."""
        docker = "runtimes" if self.runtime_checked else "-" if self.gpu_host_prepare else "version"
        args = [self.disk_path, self.nvidia_smi if self.gpu_host_prepare else "-", docker]
        return [*args, self.last_good, *self.kernel_log] if self.xid_checked and self.kernel_log else args


# The rollout's settings that are a number of hosts: a count, or a percentage of a total (the run's
# hosts for the serial sizes, a GPU profile's hosts for the cap), read the way Ansible reads
# `serial`: a percentage rounds down, and is at least one host. An argument spec cannot say
# "a positive int or an 'N%' string", so the rule is here, once; the wave planner
# (preflight/waves.py) reads the values through it.
SHARE_ALLOWED = 'a count of hosts (a positive integer: 2) or a percentage ("1%" to "100%")'
SHARE_SETTINGS = {
    "sglang_rollout_serial": f'{SHARE_ALLOWED}, or a list of them ([1, 5, "25%"]; the last repeats)',
    "sglang_rollout_max_out_per_profile": SHARE_ALLOWED,
}


@dataclass(frozen=True)
class Share:
    """A number of hosts: ``count`` hosts, or ``percent`` % of a total (Ansible's serial rounding)."""

    count: int | None = None
    percent: int | None = None

    def of(self, total: int) -> int:
        """How many hosts of ``total``: a percentage rounds down, never below one (as Ansible's
        ``serial`` does, so a percentage means the same here as in a play keyword)."""
        if self.count is not None:
            return self.count
        return max(1, (self.percent or 0) * total // 100)

    def __str__(self) -> str:
        return f"{self.percent}%" if self.percent is not None else str(self.count)


def parse_share(value: Any, variable: str) -> Share:
    """One count or percentage; ValueError naming ``variable`` and what it may hold."""
    text = str(value).strip()
    bad = ValueError(f"{variable}: {value!r} is not {SHARE_SETTINGS.get(variable, SHARE_ALLOWED)}")
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise bad
    number = text[:-1].strip() if text.endswith("%") else text
    if not number.isdigit():
        raise bad
    if text.endswith("%"):
        if not 1 <= int(number) <= 100:
            raise bad
        return Share(percent=int(number))
    if int(number) < 1:
        raise bad
    return Share(count=int(number))


def parse_serial(value: Any) -> list[Share]:
    """``sglang_rollout_serial``: one share or a non-empty list of them (the last one repeats)."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ValueError(f"sglang_rollout_serial: [] is not {SHARE_SETTINGS['sglang_rollout_serial']}")
    return [parse_share(item, "sglang_rollout_serial") for item in items]


def share_errors(values: Mapping[str, Any]) -> list[str]:
    """The error of each share setting in ``values`` (a host's typed settings) that is not one."""
    errors = []
    for name in SHARE_SETTINGS:
        if name in values:
            try:
                parse_serial(values[name]) if name == "sglang_rollout_serial" else parse_share(values[name], name)
            except ValueError as exc:
                errors.append(str(exc))
    return errors


@dataclass(frozen=True)
class Refusal:
    rule: str
    message: str


Rule = Callable[[Settings, HostProbe], "str | None"]


def _smi(probe: HostProbe) -> SmiLog | None:
    """nvidia-smi's answer, when it gave one (rc 0)."""
    section = probe.get("nvidia-smi")
    return _parse_q(section.out) if section is not None and section.rc == 0 else None


@functools.lru_cache(maxsize=16)
def _parse_q(text: str) -> SmiLog:
    """Read once per host, whichever rules read it (an 8-GPU answer is about 2,000 lines)."""
    return parse_q(text)


def _gpus(probe: HostProbe) -> list[dict[str, str | None]]:
    """nvidia-smi's per-GPU query, when it answered (rc 0)."""
    section = probe.get("gpus")
    return parse_query(section.out) if section is not None and section.rc == 0 else []


def probe_complete(s: Settings, probe: HostProbe) -> str | None:
    """Every answer the other rules read is there: a rule with nothing to read would pass silently."""
    wanted = ["uid", "df", *(["nvidia-smi", "gpus"] if s.gpu_host_prepare else ["docker"])]
    wanted += ["runtimes", "toolkit"] if s.runtime_checked else []
    wanted += ["clock", "xid"] if s.xid_checked and s.kernel_log else []
    missing = [name for name in wanted if probe.get(name) is None]
    if not missing:
        return None
    got = ", ".join(probe.sections) or "nothing framed"
    return (
        f"the host's answer to the preflight probe has no {', '.join(missing)} section (got: {got}); "
        "run the probe by hand to see why: ansible HOST -m rollout_probe"
    )


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
    smi = _parse_q(section.out)
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
    if smi is None or len(smi.gpus) >= s.gpu_count:
        return None
    return (
        f"nvidia-smi sees {len(smi.gpus)} GPU(s), the profile needs {s.gpu_count} (sglang_gpu_count, the "
        "tensor-parallel size): a GPU is missing or fell off the bus (nvidia-smi -q, dmesg Xid 79), or the host is "
        "in the wrong group."
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


def gpu_arch(s: Settings, probe: HostProbe) -> str | None:
    """Every GPU of the host is of the compute capability its profile expects (``sglang_gpu_arch``:
    sm_120 for RTX PRO 6000, sm_100 for B200): the image's kernels, the cache key and the rendered
    flags are per arch, so a host in the wrong profile group fails at its turn, or serves wrongly."""
    section = probe.get("gpus")
    if section is None or not s.gpu_host_prepare:
        return None
    if section.rc != 0:
        return f"nvidia-smi --query-gpu failed (rc {section.rc}): {section.out.strip()[:200]}."
    found = {arch(g.get("compute_cap")): g.get("name") or "?" for g in parse_query(section.out)}
    shown = ", ".join(f"sm_{a} ({name})" for a, name in sorted(found.items()))
    if len(found) > 1:
        return f"its GPUs are of {len(found)} compute capabilities ({shown}): one host serves one GPU profile."
    want = arch(s.gpu_arch)
    if not want or set(found) <= {want}:
        return None
    return (
        f"its GPUs are {shown}, the profile expects sm_{want} (sglang_gpu_arch): put the host in its GPU "
        "profile's group, or correct sglang_gpu_arch."
    )


def xid_since_last_good(s: Settings, probe: HostProbe) -> str | None:
    """Xid events since the host's last good deploy (its last-good record; since boot without one),
    counted as the gpu_host role counts them at the host's turn (gpu_facts.xid_failures), seen here
    before any host of the fleet is drained."""
    section = probe.get("xid")
    if not s.xid_checked or section is None:
        return None
    if section.rc != 0:
        return kernel_log_unreadable(s.kernel_log, section.rc, section.out) + "."
    clock = (probe.get("clock") or Section(0, "")).out.split()
    try:
        after = after_boot(float(clock[2]) if len(clock) > 2 and clock[2] != "none" else None,
                           float(clock[0]), float(clock[1]))  # fmt: skip
    except (IndexError, ValueError):
        return f"the host's clock could not be read (date +%s, /proc/uptime): {' '.join(clock)[:200]!r}."
    failures = xid_failures(parse_xid(section.out), _gpus(probe), after, s.xid_ignore)
    if not failures:
        return None
    more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
    return (
        f"{len(failures)} Xid event(s): {'; '.join(failures[:3])}{more}. Have the GPU checked (nvidia-smi -q, the "
        "kernel log); once it is sound, reboot the host (its kernel log starts empty) or list the code in "
        "gpu_host_xid_ignore."
    )


def nvidia_runtime(s: Settings, probe: HostProbe) -> str | None:
    """Docker can hand GPUs to containers: its runtimes include ``nvidia`` and the toolkit's
    ``nvidia-container-runtime`` is installed, or the gpu_host role will make it so (it installs the
    toolkit unless ``gpu_host_offline``, and registers the runtime in daemon.json). What the role can
    neither find nor make fails at the host's turn; here it stops the run before any host changes."""
    runtimes, toolkit = probe.get("runtimes"), probe.get("toolkit")
    if not s.runtime_checked or runtimes is None or toolkit is None:
        return None
    try:
        names = sorted(json.loads(runtimes.out)) if runtimes.rc == 0 else None
    except (ValueError, TypeError):
        names = None
    said = f"runtimes: {', '.join(names)}" if names is not None else f"docker info: {runtimes.out.strip()[:200]}"
    problems = []
    if toolkit.rc != 0 and not (s.install_toolkit and not s.offline):
        why = "gpu_host_offline is true" if s.install_toolkit else "gpu_host_install_toolkit is false"
        problems.append(
            f"nvidia-container-runtime is not installed and the rollout will not install it ({why}): install "
            "nvidia-container-toolkit on the host (from your mirror or OS image)"
        )
    if "nvidia" not in (names or []) and not s.manage_daemon_config:
        problems.append(
            f"docker has no nvidia runtime ({said}) and gpu_host_manage_daemon_config is false: run "
            "'nvidia-ctk runtime configure --runtime=docker' on the host and reload docker, or set "
            "gpu_host_manage_daemon_config: true"
        )
    return "; ".join(problems) + "." if problems else None


RULES: dict[str, Rule] = {
    "probe_complete": probe_complete,
    "become_makes_root": become_makes_root,
    "docker_answers": docker_answers,
    "free_disk": free_disk,
    "nvidia_driver": nvidia_driver,
    "mig_off": mig_off,
    "gpu_count": gpu_count,
    "gpu_memory": gpu_memory,
    "fabric_up": fabric_up,
    "gpu_arch": gpu_arch,
    "xid_since_last_good": xid_since_last_good,
    "nvidia_runtime": nvidia_runtime,
}


def unknown_variables(names: Iterable[Any], known: Iterable[str]) -> list[str]:
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


def judge_host(
    settings: Settings, probe: HostProbe, unknown: list[str] | None = None, invalid: list[str] | None = None
) -> list[Refusal]:
    """Every refusal of one host: unreachable (nothing else can be judged), misspelt variables,
    invalid settings (``invalid``: Settings.from_vars' errors), then each rule in RULES' order."""
    if probe.unreachable:
        return [Refusal("reachable", f"could not be reached (SSH, or the connection failed): {probe.message}".strip())]
    out = []
    if unknown:
        out.append(Refusal("known_variables", (
            f"unknown variable(s): {', '.join(unknown)}. No role reads them, so they would be silently ignored. "
            "The supported names are in roles/*/defaults/main.yml and preflight/variables.yml."
        )))  # fmt: skip
    if invalid:
        out.append(Refusal("settings", f"invalid setting(s): {'; '.join(invalid)}."))
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
