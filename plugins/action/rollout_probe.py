"""Asks a host what preflight judges, in one shell probe (preflight/probe.py), and returns it.

Why an action plugin and not a module: the probe is a shell script sent over the connection as
``ansible.builtin.raw`` sends its command (become applied the same way): one SSH round trip, no
module uploaded and no Python started on the host, which at 200 hosts is most of what preflight
costs the hosts. It reads only (id, df, nvidia-smi, docker, the kernel log's Xid lines), in check
mode too. What it asks follows the host's settings (preflight.Settings: GPU host or not, which
gpu_host checks are on, the kernel log command), read as the judge reads them.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

# the bundle's packages: an action plugin is loaded when its task starts, and a failed import there
# reads as "Unexpected Exception, this is probably a bug" with a traceback; this says what to do
try:
    import preflight
except ImportError as exc:  # ansible-playbook from outside the bundle's virtualenv
    raise AnsibleError(
        f"ansible-playbook runs on a Python without the bundle's packages ({exc}): activate the bundle's "
        "virtualenv (. .venv/bin/activate; bash scripts/setup.sh makes it) and run it again"
    ) from None

DOCUMENTATION = """
module: rollout_probe
short_description: ask a host, in one shell round trip, what preflight judges
options:
  roles_dir: {description: the roles whose specs and defaults type the host's settings, type: path}
"""

ARGUMENT_SPEC = {"roles_dir": {"type": "path", "default": str(Path(__file__).resolve().parents[2] / "roles")}}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)  # Ansible's own errors
        hv = task_vars["hostvars"][task_vars["inventory_hostname"]]  # templates on access
        settings, _ = preflight.Settings.from_vars(hv, preflight.specs.load(Path(args["roles_dir"])))
        argv = ["sh", "-c", preflight.SCRIPT, "preflight", *settings.probe_args()]
        answer = self._low_level_execute_command(shlex.join(argv))
        result.update(
            changed=False, rc=answer.get("rc"), stdout=answer.get("stdout", ""), stderr=answer.get("stderr", "")
        )
        if answer.get("rc"):
            result.update(
                failed=True, msg=f"the probe exited {answer.get('rc')}: {str(answer.get('stderr', ''))[:300]}"
            )
        return result
