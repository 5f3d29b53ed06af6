"""Names the hosts a rollout lost when Ansible itself stops the run.

Why a callback: when every host of a serial batch becomes unreachable (a canary batch of one
host that vanishes, the likeliest case), Ansible ends the whole playbook at once ("NO MORE
HOSTS LEFT"): no rescue, no always, none of the rollout play's batch-end tasks and no summary
play run. Only callbacks still see the end of the run. This one (loaded automatically from
playbooks/callback_plugins, no configuration) turns each lost host's "in progress" record
(playbooks/tasks/mark_stage.yml) into an "unreachable" record with its last known stage, the way
playbooks/tasks/record_lost.yml does when the batch survives, rewrites rollout-summary.json and
.md from the run's records with the summary's own templates, and prints what the operator must
know. The next run's preflight finds the host from that record and finishes it first.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.template import Templar, trust_as_template

DOCUMENTATION = """
name: rollout_lost
type: aggregate
short_description: record and name the hosts a rollout lost when Ansible stops the run
description:
  - Turns the "in progress" records of unreachable hosts into "unreachable" records and rewrites
    the rollout summary, when no task of the rollout could do it any more.
"""


def summarize(records: list[dict[str, Any]], all_hosts: list[str], run_id: str) -> dict[str, Any]:
    """The summary dict of playbooks/tasks/summary.yml ("Build the summary"), for a stopped run."""
    names = [r["host"] for r in records]

    def hosts(pred: Any) -> list[str]:
        return [r["host"] for r in records if pred(r)]

    return {
        "run_id": run_id,
        "finished": False,
        "hosts": records,
        "not_reached": [h for h in all_hosts if h not in names],
        "moved": hosts(lambda r: r["outcome"] == "ok" and r["gate"] == "pass"),
        "unchanged": hosts(lambda r: r["outcome"] == "ok" and r["gate"] != "pass"),
        "rolled_back": hosts(lambda r: r.get("rolled_back")),
        "put_back": hosts(lambda r: r.get("put_back")),
        "failed": hosts(lambda r: r["outcome"] == "failed"),
        "unreachable": hosts(lambda r: r["outcome"] == "unreachable"),
    }


def mark_lost(record: dict[str, Any], task: str) -> dict[str, Any]:
    """An "in progress" record as the record of a host lost during its stage (record_lost.yml's words)."""
    stage = record.get("stage") or "?"
    return {
        **record,
        "outcome": "unreachable",
        "image_after": f"(unknown: unreachable during {stage})",
        "failure": f"unreachable during {stage}",
        "failed_task": task,
        "messages": [
            f"unreachable during {stage}: the controller lost its connection. The next run finishes this host "
            "first (re-gates the config it runs, or rolls it back) before any other host."
        ],
    }


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
                continue  # recorded already (the batch survived and record_lost.yml ran)
            _write(path, json.dumps(mark_lost(record, task), indent=4, sort_keys=True) + "\n")
            self._rewrite_summary(run_dir, templar, variables)
            self._display.error(
                f"ROLLOUT STOPPED: {host} became unreachable during {record.get('stage') or '?'} ({task}). "
                f"Its record and the summary: {run_dir}. The next run finishes {host} first "
                "(re-gates the config it runs, or rolls it back) before touching any other host.",
                wrap_text=False,
            )

    def _rewrite_summary(self, run_dir: Path, templar: Templar, variables: dict[str, Any]) -> None:
        records = [json.loads(p.read_text()) for p in sorted((run_dir / "hosts").glob("*.json"))]
        inventory = self._play.get_variable_manager()._inventory
        # the whole run's hosts (--limit applies), not the batch Ansible had narrowed the inventory to
        all_hosts = [h.get_name() for h in inventory.get_hosts("sglang_servers", ignore_restrictions=True)]
        summary = summarize(records, all_hosts, run_dir.name)
        _write(run_dir / "rollout-summary.json", json.dumps(summary, indent=4, sort_keys=True) + "\n")
        templar.available_variables = {**variables, "sglang_summary": summary}
        template = Path(__file__).resolve().parents[1] / "templates" / "rollout-summary.md.j2"
        _write(run_dir / "rollout-summary.md", templar.template(trust_as_template(template.read_text())))


def _write(path: Path, text: str) -> None:
    """Write next to the target and rename: a reader never sees half a record."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o640)
    tmp.replace(path)
