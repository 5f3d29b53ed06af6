"""Counts the task executions of each host per rollout stage, for benchmarks/rollout.py.

Why: the controller's CPU per host is mostly Ansible's cost per task (a worker forked per host and
task, the task's variables templated, its result sent back), executed or skipped alike. The
benchmark splits its CPU by stage; this says how many task executions each stage had, so the
cost per task, and what a stage with fewer tasks would save, can be read off. A host's stage is
the value of the rollout's own marker (``sglang_rollout_stage``, playbooks/tasks/mark_stage.yml)
when the result comes back. Enabled by the benchmark only (ANSIBLE_CALLBACKS_ENABLED=bench_tasks),
it appends one JSON line per result to ``$ROLLOUT_BENCH_TASKS``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: bench_tasks
type: aggregate
short_description: one JSON line per task result (host, stage, task, status) for benchmarks/rollout.py
description: [Appends to the file named by the ROLLOUT_BENCH_TASKS environment variable.]
"""


AFTER = "records, summary, locks"  # the benchmark's name for the rollout's bookkeeping (_fleet_ssh.BETWEEN)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_tasks"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._out = open(os.environ["ROLLOUT_BENCH_TASKS"], "a", buffering=1)  # noqa: SIM115 - open for the run
        self._stage: dict[str, str] = {}

    def _write(self, result: Any, status: str) -> None:
        host = result._host.get_name()
        facts = (result._result or {}).get("ansible_facts") or {}
        if facts.get("sglang_rollout_stage"):
            self._stage[host] = str(facts["sglang_rollout_stage"])
        if facts.get("sglang_rollout_record"):  # the host's final record: what follows is bookkeeping
            self._stage[host] = AFTER
        stage = self._stage.get(host, "preflight")
        line = {"host": host, "stage": stage, "task": result._task.get_name(), "status": status}
        self._out.write(json.dumps(line) + "\n")

    def v2_runner_on_ok(self, result: Any) -> None:
        self._write(result, "ok")

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._write(result, "failed")

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._write(result, "skipped")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._write(result, "unreachable")

    def v2_runner_retry(self, result: Any) -> None:
        self._write(result, "retry")
