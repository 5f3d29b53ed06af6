"""Asks a host what preflight judges, in one shell probe (preflight/probe.py), and returns it.

Why an action plugin and not a module: the probe is a shell script sent over the connection as
``ansible.builtin.raw`` sends its command (become applied the same way): one SSH round trip, no
module uploaded and no Python started on the host, which at 200 hosts is most of what preflight
costs the hosts. It reads only (id, df, nvidia-smi -q, docker version), in check mode too.
"""

from __future__ import annotations

import shlex
from typing import Any

from ansible.plugins.action import ActionBase

import preflight  # the bundle's package: run ansible-playbook from its virtualenv

DOCUMENTATION = """
module: rollout_probe
short_description: ask a host, in one shell round trip, what preflight judges
options:
  disk_path: {description: the path whose free space is measured (df), type: str, default: /var/lib}
  nvidia_smi:
    description: the nvidia-smi command; empty on hosts without GPUs (not asked)
    type: str
    default: nvidia-smi
  docker: {description: ask the docker engine for its version, type: bool, default: false}
"""

ARGUMENT_SPEC = {
    "disk_path": {"type": "str", "default": "/var/lib"},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "docker": {"type": "bool", "default": False},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars or {})
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)  # Ansible's own errors
        argv = ["sh", "-c", preflight.SCRIPT, "preflight", args["disk_path"] or "/var/lib",
                args["nvidia_smi"] or "-", "docker" if args["docker"] else "-"]  # fmt: skip
        answer = self._low_level_execute_command(shlex.join(argv))
        result.update(
            changed=False, rc=answer.get("rc"), stdout=answer.get("stdout", ""), stderr=answer.get("stderr", "")
        )
        if answer.get("rc"):
            result.update(
                failed=True, msg=f"the probe exited {answer.get('rc')}: {str(answer.get('stderr', ''))[:300]}"
            )
        return result
