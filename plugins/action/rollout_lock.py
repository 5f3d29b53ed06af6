"""Action ``rollout_lock``: one rollout at a time per inventory, held by the ansible-playbook process.

Two operators (or a cron job and an operator) rolling the same fleet at once would interleave
batches, gate each other's servers under load and roll back each other's hosts. The lock is a
JSON file on the controller naming the ansible-playbook process that holds it (action plugins
run in a worker forked from that process, so it is ``os.getppid()``), its run id, user and start.

- ``state: present``: take the lock; if a *running* ansible-playbook holds it, fail naming that
  run. A lock whose process is gone (a rollout that stopped on a failed host never reaches the
  release) is stale: it is taken over, and the result says from which run.
- ``state: absent``: release it, only if this process holds it.

In check mode the lock is only read: a ``--check`` run changes nothing, so it may run beside a
real one, and it says so.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


def _running_ansible(pid: int) -> bool:
    """Whether ``pid`` is a live ansible-playbook (a recycled pid of another program is not)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"ansible" in cmdline


def _holder(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"pid": -1, "run_id": "?", "note": f"unreadable lock file {path}"}
    return data if isinstance(data, dict) else {"pid": -1, "run_id": "?"}


def _describe(holder: dict[str, Any]) -> str:
    return (
        f"run {holder.get('run_id', '?')} by {holder.get('user', '?')}@{holder.get('host', '?')}, "
        f"started {holder.get('started', '?')} (ansible-playbook pid {holder.get('pid', '?')})"
    )


ARGUMENT_SPEC = {
    "path": {"type": "path", "required": True},
    "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
    "run_id": {"type": "str", "default": ""},
}


class ActionModule(ActionBase):
    """See the module docstring."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)  # Ansible's own errors
        path, state = Path(args["path"]), args["state"]
        if not path.is_absolute():
            raise AnsibleActionFail(f"rollout_lock: path must be an absolute path (got {str(path)!r})")
        me = os.getppid()
        holder = _holder(path)
        held_by_other = holder is not None and holder.get("pid") != me and _running_ansible(int(holder.get("pid", -1)))

        if state == "absent":
            if holder is not None and holder.get("pid") == me and not self._task.check_mode:
                path.unlink(missing_ok=True)
                return {**result, "changed": True, "msg": f"released {path}"}
            return {**result, "changed": False, "msg": "not held by this run"}

        if held_by_other:
            msg = (
                f"Another rollout of this inventory is running: {_describe(holder)}. Its lock is {path}. "
                "Wait for it to finish; if that process is really gone, the lock is taken over automatically."
            )
            if self._task.check_mode:
                return {**result, "changed": False, "msg": "check mode, not locking: " + msg}
            raise AnsibleActionFail(msg)
        if self._task.check_mode:
            return {**result, "changed": False, "msg": f"check mode: {path} read, not taken"}

        mine = {
            "pid": me,
            "run_id": args["run_id"],
            "user": getpass.getuser(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        stale = holder is not None and holder.get("pid") != me
        if holder is None:
            try:  # O_EXCL: of two runs starting at once, exactly one creates the file
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                other = _describe(_holder(path) or {})
                raise AnsibleActionFail(
                    f"Another rollout of this inventory took {path} at the same moment: {other}"
                ) from None
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(mine, fh)
        else:
            tmp_path = path.with_name(path.name + f".{me}.tmp")
            tmp_path.write_text(json.dumps(mine), encoding="utf-8")
            os.replace(tmp_path, path)
            with contextlib.suppress(OSError):
                tmp_path.unlink()
        note = f"took over a stale lock of {_describe(holder)}: that process is gone" if stale else f"locked {path}"
        out = {**result, "changed": True, "msg": note, "stale": stale}
        if stale:  # shown without -v: the operator learns the last run ended without releasing it
            out["warnings"] = [*out.get("warnings", []), note]
        return out
