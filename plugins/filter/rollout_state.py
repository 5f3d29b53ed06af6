"""Preflight's view of the fleet state file (rolloutreport/state.py): who an
earlier run left half-done (finished first by this run's repair play), who it left out of the load
balancer, and the image that run was moving the fleet to (the repair play deploys that one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    import rolloutreport
except ImportError as exc:  # ansible-playbook from outside the bundle's virtualenv: Ansible skips this plugin, saying
    raise ImportError(
        f"ansible-playbook runs on a Python without the bundle's packages ({exc}): activate the bundle's "
        "virtualenv (. .venv/bin/activate; bash scripts/setup.sh makes it) and run it again"
    ) from exc


def rollout_state_view(path: Any) -> dict[str, Any]:
    """``pending``: hosts whose last real record is unreachable or still in progress;
    ``left_drained``: hosts out of rotation since an earlier run, with why; ``image_in_flight``:
    the image (tag, ID, digest, run) a run that did not finish was deploying, else {}; ``lost_by``:
    the runs that lost a host (whose locks the next run takes back)."""
    try:
        state = rolloutreport.read_state(Path(str(path)))
    except (OSError, ValueError) as exc:  # damaged or unreadable: never read as "nothing pending"
        raise AnsibleFilterError(f"{exc} (sglang_rollout_state_file)") from exc
    return {
        "pending": rolloutreport.pending_hosts(state),
        "left_drained": rolloutreport.drained_hosts(state),
        "image_in_flight": dict(state.get("image_in_flight") or {}),
        "lost_by": rolloutreport.lost_runs(state),
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"rollout_state_view": rollout_state_view}
