"""Builds and writes the run's summary from its host records (rolloutreport), on the controller.

The Markdown is the summary template (playbooks/templates/rollout-summary.md.j2) rendered with
``sglang_summary``; the ``rollout_lost`` callback renders the same template when Ansible stops
the run. Returns the summary as ``summary`` (registered, not a fact: Ansible 2.24 stops injecting
facts as variables) for the printed text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase
from ansible.template import Templar, trust_as_template

# the bundle's packages: an action plugin is loaded when its task starts, and a failed import there
# reads as "Unexpected Exception, this is probably a bug" with a traceback; this says what to do
try:
    import rolloutreport
    from rolloutreport import fleet_lock
except ImportError as exc:  # ansible-playbook from outside the bundle's virtualenv
    raise AnsibleError(
        f"ansible-playbook runs on a Python without the bundle's packages ({exc}): activate the bundle's "
        "virtualenv (. .venv/bin/activate; bash scripts/setup.sh makes it) and run it again"
    ) from None

DOCUMENTATION = """
module: rollout_summary
short_description: write rollout-summary.json and .md from the run's host records
options:
  dir: {description: the run's report folder (reports/RUN_ID), required: true, type: path}
  hosts: {description: every host of the run (--limit applies), required: true, type: list, elements: str}
  finished: {description: the last summary of the run, type: bool, default: false}
  canaries: {description: the canary of each GPU profile (profile -> host), type: dict, default: {}}
  waves:
    description: the waves preflight planned after the canaries, in order (preflight/waves.py)
    type: list
    elements: list
    default: []
  state_file: {description: the fleet state file (default DIR/../fleet-state.json), type: path}
  metrics_file:
    description: >-
      node_exporter textfile of the fleet's state (default DIR/../metrics/sglang_rollout.prom; "" for none);
      written with every summary of a real run (rolloutreport/metrics.py)
    type: str
  keep_runs:
    description: >-
      at the run's last summary, keep this many newest run folders beside DIR (older ones are removed,
      never one the fleet state names); 0 keeps all
    type: int
    default: 0
"""

ARGUMENT_SPEC = {
    "dir": {"type": "path", "required": True},
    "hosts": {"type": "list", "elements": "str", "required": True},
    "finished": {"type": "bool", "default": False},
    "canaries": {"type": "dict", "default": {}},
    "waves": {"type": "list", "elements": "list", "default": []},
    "state_file": {"type": "path"},
    "metrics_file": {"type": "str"},
    "keep_runs": {"type": "int", "default": 0},
}
TEMPLATE = Path(__file__).resolve().parents[2] / "playbooks" / "templates" / "rollout-summary.md.j2"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)  # Ansible's own errors
        run_dir = Path(args["dir"])
        records = rolloutreport.read_records(run_dir)
        state_file = rolloutreport.state_path(run_dir, args.get("state_file"))
        state = rolloutreport.read_state(state_file)
        summary = rolloutreport.summarize(
            records, args["hosts"], run_dir.name, args["finished"], args["canaries"], state, args["waves"]
        )
        summary["lock_events"] = fleet_lock.read_log(run_dir)  # whose rollout lock this run took over or broke
        if args["finished"]:  # the image in flight has landed when every host moved
            check_mode = bool(task_vars.get("ansible_check_mode", False))
            state = rolloutreport.finish_run(state_file, summary, check_mode) or state
            # a --check run removes nothing: it says what the real run would remove
            pruned = rolloutreport.prune_runs(
                run_dir.parent, args["keep_runs"], run_dir.name, state, dry_run=check_mode
            )
            summary["history"] = {"keep_runs": args["keep_runs"], "removed": pruned, "check_mode": check_mode}
        markdown = render_markdown(self._loader, task_vars, summary)
        rolloutreport.write_summary(run_dir, summary, markdown)
        metrics = rolloutreport.metrics_path(run_dir, args.get("metrics_file"))
        if metrics is not None and not task_vars.get("ansible_check_mode", False):
            state = rolloutreport.read_state(rolloutreport.state_path(run_dir, args.get("state_file")))
            rolloutreport.write_fleet_metrics(metrics, summary, state)
        result.update(changed=False, summary=summary)
        return result


def render_markdown(loader: Any, variables: dict[str, Any], summary: dict[str, Any]) -> str:
    """The summary template with ``sglang_summary`` (the rollout_lost callback renders it the same way)."""
    templar = Templar(loader=loader, variables={**variables, "sglang_summary": summary})
    return str(templar.template(trust_as_template(TEMPLATE.read_text())))
