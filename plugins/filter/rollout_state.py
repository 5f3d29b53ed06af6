"""Preflight's view of the fleet state file (rolloutreport/state.py): who an earlier run left
half-done (finished first by this run's repair play) and who it left out of the load balancer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

import rolloutreport  # the bundle's package: run ansible-playbook from its virtualenv


def _state(path: Any) -> dict[str, Any]:
    try:
        return rolloutreport.read_state(Path(str(path)))
    except ValueError as exc:  # damaged: never read as "nothing pending"
        raise AnsibleFilterError(f"{exc} (sglang_rollout_state_file)") from exc


def rollout_pending(path: Any) -> list[str]:
    """Hosts whose last real record is unreachable or still in progress."""
    return rolloutreport.pending_hosts(_state(path))


def rollout_left_drained(path: Any) -> dict[str, str]:
    """Hosts out of rotation since an earlier run, with why they were drained."""
    return rolloutreport.drained_hosts(_state(path))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"rollout_pending": rollout_pending, "rollout_left_drained": rollout_left_drained}
