"""Writes a host's record of this run on the controller (rolloutreport: one schema, one writer).

Why an action plugin: the record is built from the host's variables as the rollout left them,
in Python, by the same functions the ``rollout_lost`` callback uses when Ansible stops the run,
so the three kinds of record (in progress, final, lost) cannot drift apart. Each real record
is also folded into the fleet state file (rolloutreport/state.py) that the next run reads. It runs on the
controller only (it writes a file there and touches no host), in check mode too: a ``--check``
run's records say ``check_mode: true`` and preflight ignores them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

# the bundle's packages: an action plugin is loaded when its task starts, and a failed import there
# reads as "Unexpected Exception, this is probably a bug" with a traceback; this says what to do
try:
    import rolloutreport
except ImportError as exc:  # ansible-playbook from outside the bundle's virtualenv
    raise AnsibleError(
        f"ansible-playbook runs on a Python without the bundle's packages ({exc}): activate the bundle's "
        "virtualenv (. .venv/bin/activate; bash scripts/setup.sh makes it) and run it again"
    ) from None

DOCUMENTATION = """
module: rollout_record
short_description: write a host's record of the rollout run on the controller
options:
  dir: {description: the run's report folder (reports/RUN_ID), required: true, type: path}
  state:
    description: >-
      in_progress (at O(stage)), final (the host's always), lost (became unreachable), rotation (no
      record: only the host's rotation in the fleet state file, O(in_rotation), O(why), O(by))
    choices: [in_progress, final, lost, rotation]
    required: true
    type: str
  host: {description: the host the record is of (default the current one), type: str}
  stage: {description: the stage the host enters (O(state=in_progress)), type: str}
  state_file:
    description: the fleet state file every real record is folded into (default DIR/../fleet-state.json)
    type: path
  in_rotation: {description: "O(state=rotation): the host takes traffic", type: bool, default: true}
  why: {description: "O(state=rotation): why it is out of rotation", type: str, default: ""}
  by: {description: "O(state=rotation): who drained it (a run id, or found drained)", type: str, default: ""}
"""

ARGUMENT_SPEC = {
    "dir": {"type": "path", "required": True},
    "state": {"type": "str", "required": True, "choices": ["in_progress", "final", "lost", "rotation"]},
    "host": {"type": "str"},
    "stage": {"type": "str"},
    "state_file": {"type": "path"},
    "in_rotation": {"type": "bool", "default": True},
    "why": {"type": "str", "default": ""},
    "by": {"type": "str", "default": ""},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)  # Ansible's own errors
        state = args["state"]
        run_dir = Path(str(args["dir"]))
        host = str(args.get("host") or task_vars["inventory_hostname"])
        check_mode = bool(task_vars.get("ansible_check_mode", False))
        if state == "rotation":  # the state file only: the host's record of this run is its own turn's
            path = rolloutreport.state_path(run_dir, args.get("state_file"))
            rolloutreport.set_rotation(
                path, host, run_dir.name, args["in_rotation"], args["why"], args["by"], check_mode
            )
            result.update(changed=False, path=str(path))
            return result
        hv = self._host_vars(host, task_vars)
        if state == "in_progress":
            record = rolloutreport.in_progress(host, run_dir.name, check_mode, hv, str(args.get("stage") or "?"))
        elif state == "final":
            record = rolloutreport.final(host, run_dir.name, check_mode, hv)
        else:
            record = rolloutreport.lost(host, run_dir.name, check_mode, hv)
        mark = str(args.get("stage") or "?") if state == "in_progress" else "done" if state == "final" else ""
        data = rolloutreport.write_record(run_dir, record, mark)
        rolloutreport.merge_record(rolloutreport.state_path(run_dir, args.get("state_file")), data)
        result.update(changed=False, path=str(rolloutreport.record_path(run_dir, host)), record=data)
        if state == "final":
            result["ansible_facts"] = {"sglang_rollout_record": data}
        return result

    def _host_vars(self, host: str, task_vars: dict[str, Any]) -> dict[str, Any]:
        """The variables a record reads, templated: the current host's from this task, another's from hostvars."""
        if host == task_vars.get("inventory_hostname"):
            return {k: self._templar.template(task_vars[k]) for k in rolloutreport.VARIABLES if k in task_vars}
        other = task_vars["hostvars"][host]
        return {k: other[k] for k in rolloutreport.VARIABLES if k in other}
