"""The rollout's waves, planned before any host changes: batches of ``sglang_rollout_serial`` sizes
that never take more than ``sglang_rollout_max_out_per_profile`` hosts of one GPU profile
(``sglang_gate_baseline_group``) out of rotation at once.

Why a plan: Ansible's ``serial`` cuts the play's hosts into batches in host order, blind to what a
host is; a 25 % wave in inventory order can take every B200 of a small profile down together, and
that profile serves nothing meanwhile. Here the waves are filled in host order with each profile
capped, then the wave play runs them as planned: its hosts in the plan's order (group
``sglang_rollout_waves``) and its ``serial`` the plan's sizes (playbooks/rollout.yml). Percentages
read as Ansible reads them (rules.Share): the serial sizes of the run's hosts, a profile's cap of
that profile's hosts in the run.

Play keywords (``serial``, ``max_fail_percentage``) are templated once per play, with no host's
variables; so preflight resolves the settings here from every host's variables (any group_vars,
host_vars or -e, Ansible's precedence; the defaults of preflight/variables.yml the lowest) and the
plays read the result from the controller's hostvars.

A host an earlier run left out of rotation (``out``: the fleet state's drained hosts, with why) is
out before this run takes any: it goes first among the hosts of the waves, so it counts against
its profile's cap in the earliest wave, and no wave takes another host of its profile out while it
is still waiting (it is back once its own turn passes). It is not picked as a canary: a host the
put-back play could not return (no last good config, or not healthy) would make its own fault read
as the image's, and stop every profile.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .rules import Share, parse_serial, parse_share

SERIAL = "sglang_rollout_serial"
MAX_FAIL = "sglang_rollout_max_fail_percentage"
CAP = "sglang_rollout_max_out_per_profile"
PROFILE = "sglang_gate_baseline_group"
# What the plan reads of each host, typed and defaulted by preflight/variables.yml
SETTINGS = (SERIAL, MAX_FAIL, CAP)


@dataclass(frozen=True)
class Plan:
    """The waves of a run, in the order they run, and what decided them."""

    waves: list[list[str]]
    serial: list[Share]
    max_fail_percentage: int
    caps: dict[str, int]  # profile -> most of its hosts in one wave
    profile_hosts: dict[str, int]  # profile -> its hosts in the run (canaries and pending included)
    profiles: dict[str, str]  # host -> profile, for the hosts of the waves
    # wave hosts out of rotation before the run, put first: host -> why (the fleet state's words)
    out_first: dict[str, str] = field(default_factory=dict)

    @property
    def sizes(self) -> list[int]:
        """The wave play's ``serial``: the planned batches, in the planned host order."""
        return [len(w) for w in self.waves]

    def as_dict(self) -> dict[str, Any]:
        """What preflight keeps on the controller (``sglang_rollout_waves``) for the plays and summary."""
        return {
            "waves": self.waves,
            "sizes": self.sizes,
            "hosts": [h for w in self.waves for h in w],
            "serial": [str(s) if s.percent is not None else s.count for s in self.serial],
            "max_fail_percentage": self.max_fail_percentage,
            "caps": self.caps,
            "profile_hosts": self.profile_hosts,
            "per_wave": [dict(Counter(self.profiles[h] for h in w)) for w in self.waves],
            "out_first": list(self.out_first),
            "text": self.describe(),
        }

    def describe(self) -> list[str]:
        """The plan as preflight shows it: the settings, then one line per wave with its hosts and how
        many of each profile it takes out of rotation."""
        total = sum(self.profile_hosts.values())
        caps = ", ".join(f"{_name(p)} {n} of {self.profile_hosts[p]}" for p, n in self.caps.items())
        head = (
            f"Waves after the canaries: {len(self.waves)} (sglang_rollout_serial "
            f"{', '.join(str(s) for s in self.serial)} of {total} hosts; at most per GPU profile, "
            f"sglang_rollout_max_out_per_profile: {caps or '-'})"
        )
        lines = [head]
        if self.out_first:
            said = ", ".join(f"{h} ({why})" if why else h for h, why in self.out_first.items())
            lines.append(f"out of rotation since an earlier run, first in the waves: {said}")
        for i, wave in enumerate(self.waves, 1):
            counts = Counter(self.profiles[h] for h in wave)
            lines.append(f"wave {i}: {', '.join(wave)} ({', '.join(f'{_name(p)} {n}' for p, n in counts.items())})")
        return lines


def _name(profile: str) -> str:
    return profile or "(no baseline group)"


def plan_waves(
    hosts: Sequence[tuple[str, str]], serial: Sequence[Share], caps: Mapping[str, int], total: int
) -> list[list[str]]:
    """``hosts`` (name, profile) in the order they should go, cut into waves: the i-th wave holds at
    most ``serial[i]`` of ``total`` hosts (the last size repeats) and at most ``caps[profile]`` hosts
    of each profile. Each wave takes, in order, every host that still fits; a host that does not
    fit waits for the next wave, ahead of the hosts behind it. Every wave takes at least one host
    (sizes and caps are at least 1), so the plan ends."""
    if not serial:
        raise ValueError(f"{SERIAL}: no sizes")
    left = list(hosts)
    waves: list[list[str]] = []
    while left:
        size = serial[min(len(waves), len(serial) - 1)].of(total)
        wave: list[str] = []
        taken: Counter[str] = Counter()
        rest = []
        for name, profile in left:
            if len(wave) < size and taken[profile] < max(1, caps.get(profile, 1)):
                wave.append(name)
                taken[profile] += 1
            else:
                rest.append((name, profile))
        waves.append(wave)
        left = rest
    return waves


def _one_value(variable: str, by_host: Mapping[str, Any], scope: str) -> Any:
    """The value every host of ``by_host`` holds; ValueError naming the hosts when they differ (a play
    keyword has one value per play)."""
    seen: dict[str, list[str]] = {}
    for host, value in by_host.items():
        seen.setdefault(repr(value), []).append(host)
    if len(seen) > 1:
        said = "; ".join(f"{v} on {', '.join(h[:4])}{' and more' if len(h) > 4 else ''}" for v, h in seen.items())
        raise ValueError(f"{variable} must be one value for {scope}, the hosts hold {said}: set it once for them")
    return next(iter(by_host.values()))


def plan(
    run_hosts: Sequence[str],
    settings: Mapping[str, Mapping[str, Any]],
    done: Sequence[str] = (),
    out: Mapping[str, str] | None = None,
) -> Plan:
    """The plan of a run: ``run_hosts`` in order, ``settings`` each host's typed values of SETTINGS and
    its profile (PROFILE, "" for none), ``done`` the hosts earlier plays roll (pending, canaries),
    which no wave takes but which count in the percentages, ``out`` the hosts out of rotation since
    an earlier run, with why (put first, in run order). ValueError names the variable when a setting is not a
    count or percentage, or differs between hosts that must share it."""
    if not run_hosts:
        return Plan([], [Share(count=1)], 0, {}, {}, {})
    serial = parse_serial(_one_value(SERIAL, {h: settings[h][SERIAL] for h in run_hosts}, "the whole run"))
    max_fail = int(_one_value(MAX_FAIL, {h: settings[h][MAX_FAIL] for h in run_hosts}, "the whole run"))
    profiles = {h: str(settings[h].get(PROFILE) or "") for h in run_hosts}
    profile_hosts = dict(Counter(profiles.values()))
    caps = {}
    for profile in profile_hosts:
        members = {h: settings[h][CAP] for h in run_hosts if profiles[h] == profile}
        share = parse_share(_one_value(CAP, members, f"GPU profile {profile or '(none)'}"), CAP)
        caps[profile] = share.of(profile_hosts[profile])
    skip, out = set(done), dict(out or {})
    todo = [h for h in run_hosts if h not in skip]
    first = {h: str(out[h] or "") for h in todo if h in out}
    ordered = [*first, *(h for h in todo if h not in first)]
    waves = plan_waves([(h, profiles[h]) for h in ordered], serial, caps, len(run_hosts))
    return Plan(waves, serial, max_fail, caps, profile_hosts, {h: profiles[h] for w in waves for h in w}, first)
