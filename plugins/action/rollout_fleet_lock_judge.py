"""Action ``rollout_fleet_lock_judge``: one controller task judges every host's fleet-lock answer.

Why one task on the controller: whether this run may roll is a judgement over all hosts at once
(it must hold every one of them), and at 200 hosts a task per host costs the controller a fork
each; the rule and its messages live in rolloutreport/fleet_lock.py, tested there. It does not
fail: the play releases what a losing run took (per host) first, then stops with ``msg``. What the
run took over or broke goes to ``<reports>/<run id>/fleet-lock.json`` (who broke whose lock), which
the summary names; check mode writes nothing.
"""

from __future__ import annotations

import getpass
import socket
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase

from rolloutreport import fleet_lock  # the bundle's package: run ansible-playbook from its virtualenv

DOCUMENTATION = """
module: rollout_fleet_lock_judge
short_description: judge every host's rollout_fleet_lock answer; write what was taken over or broken
options:
  results: {description: host -> its registered rollout_fleet_lock result, type: dict, required: true}
  run_id: {description: this run's id, type: str, required: true}
  run_dir: {description: the run's report folder (fleet-lock.json goes there), type: path, required: true}
  stale_s: {description: the heartbeat age that makes a lock stale (named in the messages), type: int, required: true}
  break_run_id: {description: the run whose lock this run was told to break, type: str, default: ""}
"""

ARGUMENT_SPEC = {
    "results": {"type": "dict", "required": True},
    "run_id": {"type": "str", "required": True},
    "run_dir": {"type": "path", "required": True},
    "stale_s": {"type": "int", "required": True},
    "break_run_id": {"type": "str", "default": ""},
}


class ActionModule(ActionBase):
    """See the module docstring."""

    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)  # Ansible's own errors
        check = bool(self._task.check_mode)
        verdict = fleet_lock.judge(args["results"], args["run_id"], args["stale_s"], check, args["break_run_id"])
        if not check:
            fleet_lock.log_events(
                Path(args["run_dir"]), verdict, args["run_id"], getpass.getuser(), socket.gethostname()
            )
        out = {**result, **fleet_lock.as_result(verdict), "changed": False}
        if verdict.warnings:  # shown without -v: whose lock this run took over or broke
            out["warnings"] = [*out.get("warnings", []), *verdict.warnings]
        return out
