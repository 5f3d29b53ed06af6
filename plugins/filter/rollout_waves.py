"""The run's wave plan (preflight/waves.py), made in preflight on the controller: the rollout's
settings read from every host's variables (any group_vars, host_vars or -e: Ansible's precedence,
the defaults of preflight/variables.yml below them all), because the plays' ``serial`` and
``max_fail_percentage`` are templated once per play, where no host's variables are known."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

import preflight  # the bundle's package: run ansible-playbook from its virtualenv
from preflight import waves


def rollout_wave_plan(
    run_hosts: Sequence[str],
    hostvars: Mapping[str, Any],
    done: Sequence[str],
    roles_dir: str,
    out: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``run_hosts`` (preflight's, in inventory order) planned into waves; ``done``: the hosts the
    repair and canary plays roll; ``out``: the hosts out of rotation since an earlier run, with why.
    The dict ``waves.Plan.as_dict`` gives."""
    specs = preflight.specs.load(Path(roles_dir))
    settings: dict[str, dict[str, Any]] = {}
    for host in run_hosts:
        hv = hostvars[host]
        values, errors = specs.typed(hv, waves.SETTINGS)
        if errors:  # preflight's judge refused these already; a plan never reads a bad value as its default
            raise AnsibleFilterError(f"{host}: {'; '.join(errors)}")
        settings[str(host)] = {**values, waves.PROFILE: hv.get(waves.PROFILE)}
    try:
        names = [str(h) for h in run_hosts]
        left_out = {str(h): str(why) for h, why in (out or {}).items()}
        return waves.plan(names, settings, [str(h) for h in done], left_out).as_dict()
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"rollout_wave_plan": rollout_wave_plan}
