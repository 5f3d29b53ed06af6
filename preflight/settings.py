"""Which hosts' role settings preflight checks: one per distinct set of settings.

Why: the roles' settings checks (roles/*/tasks/validate.yml, with each role's argument spec) are
Ansible tasks, and at 200 hosts each task costs the controller a fork per host. A fleet's hosts
share their settings by group (group_vars: one GPU profile per group), so checking one host per
distinct set checks every host: the checks read only variables with the rollout's prefixes
(sglang_, flashinfer_cache_, gpu_host_) and the roles' defaults derived from them. Two hosts whose
prefixed variables template to the same values get the same verdict; a setting that differs per
host (a port, or a name templated from inventory_hostname) makes its host a set of its own.
The roles' defaults that derive from inventory_hostname or ansible_host (helper container names,
the health-check address) are names the roles build safe, not settings the checks judge.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from .specs import RUN_STATE

PREFIXES = ("sglang_", "flashinfer_cache_", "gpu_host_")


def settings_key(hv: Mapping[str, Any]) -> str:
    """A digest of a host's prefixed variables, templated (``hv`` is Ansible's hostvars of the host,
    which templates on access); a value that does not template keys on its error, so it stays apart."""
    values: dict[str, str] = {}
    for name in sorted(str(k) for k in hv):
        if not name.startswith(PREFIXES) or name in RUN_STATE:
            continue
        try:
            values[name] = json.dumps(hv[name], sort_keys=True, default=str)
        except Exception as exc:  # an undefined variable in a template: the check will say so
            values[name] = f"<does not template: {exc}>"
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


def representatives(hosts: Iterable[str], hostvars: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """The first host of each distinct set of settings, with the hosts it stands for (itself first)."""
    groups: dict[str, list[str]] = {}
    for host in hosts:
        groups.setdefault(settings_key(hostvars[host]), []).append(host)
    return {members[0]: members for members in groups.values()}
