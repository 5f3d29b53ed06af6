"""Names the hosts a rollout lost when Ansible itself stops the run.

Why a callback: when every host of a serial batch becomes unreachable (a canary batch of one
host that vanishes, the likeliest case), Ansible ends the whole playbook at once ("NO MORE
HOSTS LEFT"): no rescue, no always, none of the rollout play's batch-end tasks and no summary
play run. Only callbacks still see the end of the run. This one (plugins/callback, named by
ansible.cfg's callback_plugins; always on, no callbacks_enabled needed) turns each lost host's "in progress" record
(playbooks/tasks/mark_stage.yml) into an "unreachable" record with its last known stage through
rolloutreport, the one writer of records and summaries the rollout's own tasks use, rewrites
rollout-summary.json and .md from the run's records with the summary's template, and prints what
the operator must know. The next run's preflight finds the host from that record and finishes it first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.template import Templar, trust_as_template

try:
    import rolloutreport
except ImportError as exc:  # ansible-playbook from outside the bundle's virtualenv: Ansible skips this plugin, saying
    raise ImportError(
        f"ansible-playbook runs on a Python without the bundle's packages ({exc}): activate the bundle's "
        "virtualenv (. .venv/bin/activate; bash scripts/setup.sh makes it) and run it again"
    ) from exc

DOCUMENTATION = """
name: rollout_lost
type: aggregate
short_description: record and name the hosts a rollout lost when Ansible stops the run
description:
  - Turns the "in progress" records of unreachable hosts into "unreachable" records and rewrites
    the rollout summary, when no task of the rollout could do it any more.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "rollout_lost"
    CALLBACK_NEEDS_ENABLED = False  # always on: a rollout must never end without naming a lost host

    def __init__(self) -> None:
        super().__init__()
        self._play: Any = None
        self._lost: dict[str, str] = {}  # host -> the task it was lost in

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._play = play  # Ansible stops in the play that lost the batch: the last one started

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._lost.setdefault(result._host.get_name(), result._task.get_name())

    def _templar(self, host: str) -> tuple[Templar, dict[str, Any]] | None:
        play = self._play
        vm = play.get_variable_manager() if play is not None else None
        if vm is None:
            return None
        inventory = vm._inventory
        target = inventory.get_host(host) if inventory is not None else None
        if target is None:
            return None
        variables = vm.get_vars(play=play, host=target)
        return Templar(loader=play._loader, variables=variables), variables

    def v2_playbook_on_stats(self, stats: Any) -> None:
        if not self._lost:
            return
        for host, task in sorted(self._lost.items()):
            found = self._templar(host)
            if found is None:
                continue
            templar, variables = found
            try:
                run_dir = Path(
                    templar.template(trust_as_template("{{ sglang_rollout_reports_dir }}/{{ sglang_rollout_run_id }}"))
                )
            except Exception:  # not a rollout run (no such variables): nothing of ours to record
                continue
            path = run_dir / "hosts" / f"{host}.json"
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # lost before its first stage (preflight): no record to complete
            if record.get("outcome") != "in progress":
                continue  # recorded already (the batch survived and the rollout recorded it lost)
            lost = rolloutreport.mark_lost(record, task)
            rolloutreport.write_record(run_dir, lost)
            override = variables.get("sglang_rollout_state_file", "")
            rolloutreport.merge_record(rolloutreport.state_path(run_dir, templar.template(override)), lost)
            summary = self._rewrite_summary(run_dir, templar, variables)
            metrics_file = templar.template(variables.get("sglang_rollout_metrics_file"))
            metrics = rolloutreport.metrics_path(run_dir, metrics_file)
            if metrics is not None:  # the fleet's metrics say the host is lost too
                state = rolloutreport.read_state(rolloutreport.state_path(run_dir, templar.template(override)))
                rolloutreport.write_fleet_metrics(metrics, summary, state)
            canaries = self._canaries(templar)
            # a lost canary is a failed canary (as the canary play's own message says it): no wave started
            profile = next((g or "(default)" for g, h in canaries.items() if h == host), None)
            said = "ROLLOUT STOPPED"
            if profile is not None:
                said = f"CANARY FAILED: the canary of GPU profile {profile} failed, no wave started; {said}"
            self._display.error(
                f"{said}: {host} became unreachable during {record.get('stage') or '?'} ({task}). "
                f"Its record and the summary: {run_dir}. The next run finishes {host} first "
                "(re-gates the config it runs, or rolls it back) before touching any other host.",
                wrap_text=False,
            )

    @staticmethod
    def _canaries(templar: Templar) -> dict[str, str]:
        """The run's canary of each GPU profile (preflight's pick, on the controller's hostvars), so a
        lost canary reads as the failed canary it is; {} when preflight picked none."""
        try:
            found = templar.template(
                trust_as_template("{{ hostvars['localhost'].sglang_rollout_canaries | default({}) }}")
            )
        except Exception:  # no preflight facts in this run: no canaries to name
            return {}
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

    @staticmethod
    def _waves(templar: Templar) -> list[list[str]]:
        """The waves preflight planned (on the controller's hostvars), so a summary rewritten after a
        lost host still shows them; [] when preflight planned none."""
        try:
            planned = "{{ (hostvars['localhost'].sglang_rollout_waves | default({})).waves | default([]) }}"
            found = templar.template(trust_as_template(planned))
        except Exception:  # no preflight facts in this run: no waves to show
            return []
        return [[str(h) for h in w] for w in found] if isinstance(found, list) else []

    def _rewrite_summary(self, run_dir: Path, templar: Templar, variables: dict[str, Any]) -> dict[str, Any]:
        records = rolloutreport.read_records(run_dir)
        inventory = self._play.get_variable_manager()._inventory
        # the whole run's hosts (--limit applies), not the batch Ansible had narrowed the inventory to
        all_hosts = [h.get_name() for h in inventory.get_hosts("sglang_servers", ignore_restrictions=True)]
        override = templar.template(variables.get("sglang_rollout_state_file", ""))
        state = rolloutreport.read_state(rolloutreport.state_path(run_dir, override))
        summary = rolloutreport.summarize(
            records, all_hosts, run_dir.name, finished=False, canaries=self._canaries(templar), state=state,
            waves=self._waves(templar),
        )  # fmt: skip
        templar.available_variables = {**variables, "sglang_summary": summary}
        template = Path(__file__).resolve().parents[2] / "playbooks" / "templates" / "rollout-summary.md.j2"
        rolloutreport.write_summary(run_dir, summary, str(templar.template(trust_as_template(template.read_text()))))
        return summary
