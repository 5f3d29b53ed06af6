#!/usr/bin/python
"""Ansible module sglang_container_state: is the server container up, crash-looping, or out of time?

Why: waiting for /health alone cannot tell "still loading" from "crashed and restarting":
a crash loop used to hold the rollout for the whole 30-90 minute deadline. This module
reads ``docker inspect`` on the host (read-only) and classifies the container, and it
carries a wall-clock deadline (an epoch computed once), so the role's wait is bounded by
time, not by a retry count. Stdlib only.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

DOCUMENTATION = r"""
module: sglang_container_state
short_description: Classify the server container (healthy, starting, dead or restarting) against a deadline
options:
  name: {type: str, required: true, description: Container name.}
  docker: {type: str, default: docker, description: docker CLI.}
  restart_count_start: {type: int, default: -1, description: RestartCount when the wait began (-1 = now).}
  deadline_epoch: {type: float, default: 0, description: Wall-clock deadline (epoch seconds); 0 = none.}
"""


def classify(inspect: dict[str, Any], restart_count_start: int, now: float, deadline_epoch: float) -> dict[str, Any]:
    """The container's state, and whether waiting for it can still succeed."""
    state = inspect.get("State") or {}
    status = state.get("Status", "unknown")
    restarts = int(inspect.get("RestartCount") or 0)
    start = restarts if restart_count_start < 0 else restart_count_start
    health = ((state.get("Health") or {}).get("Status")) or "none"
    why = ""
    if status in ("exited", "dead"):
        oom = ", OOM-killed" if state.get("OOMKilled") else ""
        why = f"the container {status} (exit code {state.get('ExitCode')}{oom})"
    elif state.get("Restarting") or status == "restarting":
        why = f"the container is restarting (exit code {state.get('ExitCode')}, {restarts} restarts)"
    elif restarts > start:
        why = f"the container restarted {restarts - start} time(s) while waiting (exit code {state.get('ExitCode')})"
    return {
        "status": status,
        "health": health,
        "exit_code": state.get("ExitCode"),
        "restart_count": restarts,
        "dead": bool(why),
        "why": why,
        "now": now,
        "expired": bool(deadline_epoch) and now > deadline_epoch,
        "left_s": round(deadline_epoch - now, 1) if deadline_epoch else None,
    }


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "docker": {"type": "str", "default": "docker"},
            "restart_count_start": {"type": "int", "default": -1},
            "deadline_epoch": {"type": "float", "default": 0},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        proc = subprocess.run(
            [p["docker"], "inspect", "--type", "container", p["name"]], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        module.fail_json(msg=f"docker inspect {p['name']}: {exc}")
    now = time.time()
    if proc.returncode != 0:
        module.exit_json(
            changed=False,
            status="missing",
            health="none",
            dead=True,
            why="the container does not exist",
            exit_code=None,
            restart_count=0,
            now=now,
            expired=bool(p["deadline_epoch"]) and now > p["deadline_epoch"],
        )
    data = json.loads(proc.stdout)[0]
    module.exit_json(changed=False, **classify(data, p["restart_count_start"], now, p["deadline_epoch"]))


if __name__ == "__main__":
    main()
