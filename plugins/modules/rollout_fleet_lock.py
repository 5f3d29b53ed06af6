"""Module ``rollout_fleet_lock``: the lock one rollout holds on each host it rolls, whoever starts it.

Why on the host: the hosts are the only thing two controllers (two checkouts, two inventories, two
operators) share, so the lock every controller sees is a file there:
``<sglang_server_state_dir>/rollout.lock`` (JSON: run id, a per-run token, user, controller
hostname, the run's start, when it was taken and its heartbeat, in the host's own clock).

Why ``flock`` around read-judge-write: taking a lock is "read who holds it, judge (free, ours,
stale, to be broken, held), write" and two runs must not both pass the judgement. An exclusive
``flock`` on ``rollout.lock.guard`` for those few milliseconds makes them one step on the host;
the kernel drops it when the module's process ends, so the guard itself can never be left held.
Writes go to a temporary file and ``os.replace``: a reader without the guard sees the old lock or
the new one, never half of one.

Why staleness is only the heartbeat's age: a lock says nothing about whether its controller
still runs that another controller could check (its process table is on another machine), so a
lock is stale only when its heartbeat, written by this module in this host's clock and compared
with this host's clock, is older than ``stale_s``. The run refreshes it (``state: heartbeat``).

Why ``wait_s`` waits only for a younger holder still taking its locks: two runs started at the
same moment may each take part of the hosts. Runs are totally ordered by (start, token), so both
agree who is older; the younger gives up on every host where it meets the older (it returns
``held`` at once, then releases what it took and stops), the older waits up to ``wait_s`` on each
host where it meets a younger one for that lock to go, then takes it. A lock is ``phase: taking``
until its run's judgement found it holds every host and marked it ``holding`` (``state: heartbeat,
phase: holding``): a run that won does not let go before its end, so the older does not wait for
it (else it would roll after it, one rollout queued behind another). Exactly one of them rolls.

States:

- ``present``: take it (``taken``), or find it ours (``ours``), or take over a stale one
  (``took_over``), or break the named run's (``broke``), or take back the lock of the run that this
  controller's fleet state says lost the host (``reclaimed``: that run recorded it unreachable and
  stopped, so it can never release it; the next run of the same controller goes on), or report who
  holds it (``held``).
- ``heartbeat``: refresh our heartbeat; fails when the lock is not ours any more (broken or taken
  over), so a run never changes a host it no longer holds.
- ``absent``: remove it if it is ours (``released``); another run's lock is left alone.

In check mode nothing is written and nothing waited for: ``present`` says what a real run would do.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: rollout_fleet_lock
short_description: take, refresh or release the rollout's lock on a host (atomic, heartbeat-stale)
description:
  - The lock one rollout holds on each host of the run, from preflight to the summary. See the
    module's docstring and roles/README.md ("One rollout per fleet").
options:
  dir: {description: the deploy state folder that holds rollout.lock, type: path, required: true}
  state: {description: what to do, type: str, choices: [present, heartbeat, absent], default: present}
  owner:
    description: this run (run_id, token, user, controller, started, started_epoch)
    type: dict
    required: true
  stale_s: {description: heartbeat age after which another run's lock is taken over, type: int, default: 10800}
  wait_s: {description: how long to wait for a younger run's lock to go, type: int, default: 0}
  break_run_id: {description: take over the lock of this run id whatever its heartbeat, type: str, default: ""}
  phase: {description: with state heartbeat, "holding" once the run holds every host, type: str, default: ""}
  lost_by:
    description: >-
      the runs this controller's fleet state says lost a host (recorded it unreachable): such a run stopped
      there and releases no lock any more (a batch lost whole ends the playbook at once), so its locks are
      taken back, on every host
    type: list
    elements: str
    default: []
"""

LOCK_NAME = "rollout.lock"
GUARD_NAME = "rollout.lock.guard"
OWNER_KEYS = ("run_id", "token", "user", "controller", "started", "started_epoch")


@dataclass
class Decision:
    """What ``present`` does with the lock it found: ``outcome`` and the other run's lock, if any."""

    outcome: str  # taken | ours | took_over | broke | held
    holder: dict[str, Any] = field(default_factory=dict)


def priority(lock: dict[str, Any]) -> tuple[float, str]:
    """The order of runs every controller agrees on: older start first, then the token (unique)."""
    try:
        started = float(lock.get("started_epoch", 0))
    except (TypeError, ValueError):
        started = 0.0
    return (started, str(lock.get("token", "")))


def age_s(lock: dict[str, Any], now: float) -> float:
    """Seconds since the lock's heartbeat, both in this host's clock; unreadable: infinitely old."""
    try:
        return now - float(lock["heartbeat"])
    except (KeyError, TypeError, ValueError):
        return float("inf")


def decide(
    current: dict[str, Any] | None,
    owner: dict[str, Any],
    now: float,
    stale_s: int,
    break_run_id: str,
    lost_by: Sequence[str] = (),
) -> Decision:
    """Judge the lock found on the host for this run (pure: the unit tests call it)."""
    if current is None:
        return Decision("taken")
    if current.get("token") == owner["token"]:
        return Decision("ours")
    if break_run_id and current.get("run_id") == break_run_id:
        return Decision("broke", current)
    if current.get("run_id") in lost_by:
        return Decision("reclaimed", current)
    if age_s(current, now) > stale_s:
        return Decision("took_over", current)
    return Decision("held", current)


def describe(lock: dict[str, Any], now: float | None = None) -> str:
    """One line naming a run's lock, as the operator reads it in a failure or a warning."""
    beat = ""
    if now is not None:
        age = age_s(lock, now)
        beat = ", heartbeat never" if age == float("inf") else f", heartbeat {int(age)} s ago"
    return (
        f"run {lock.get('run_id', '?')} ({lock.get('user', '?')}@{lock.get('controller', '?')}, "
        f"started {lock.get('started', '?')}{beat})"
    )


def read_lock(path: str) -> dict[str, Any] | None:
    """The lock at ``path``; an unreadable one reads as a lock with no heartbeat (stale at once)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"run_id": "?", "note": f"unreadable lock file {path}"}
    return data if isinstance(data, dict) else {"run_id": "?", "note": f"not a lock: {path}"}


def write_lock(path: str, lock: dict[str, Any]) -> None:
    """Write ``lock`` whole or not at all (temporary file in the same folder, fsync, rename)."""
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".rollout.lock.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(lock, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@contextlib.contextmanager
def guarded(folder: str) -> Iterator[None]:
    """Hold the host's guard (``flock``) while the lock is read, judged and written."""
    fd = os.open(os.path.join(folder, GUARD_NAME), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def _stamp(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def new_lock(owner: dict[str, Any], now: float, previous: dict[str, Any] | None, how: str) -> dict[str, Any]:
    """This run's lock; a taken-over or broken one is kept inside it, so the host itself says whose."""
    lock = {key: owner.get(key, "") for key in OWNER_KEYS}
    lock.update(taken=_stamp(now), heartbeat=now, heartbeat_at=_stamp(now), phase="taking")
    if previous is not None:
        lock[how] = {key: previous.get(key) for key in (*OWNER_KEYS, "heartbeat_at") if key in previous}
    return lock


def take(
    folder: str,
    owner: dict[str, Any],
    stale_s: int,
    wait_s: int,
    break_run_id: str,
    check: bool,
    lost_by: Sequence[str] = (),
) -> Decision:
    """``state: present``; waits up to ``wait_s`` while a younger run holds the lock (see the docstring)."""
    path = os.path.join(folder, LOCK_NAME)
    deadline = time.time() + max(wait_s, 0)
    if check and not os.path.isdir(folder):
        return Decision("taken")
    if not check:
        os.makedirs(folder, mode=0o750, exist_ok=True)
    while True:
        with contextlib.nullcontext() if check else guarded(folder):
            now = time.time()
            current = read_lock(path)
            decision = decide(current, owner, now, stale_s, break_run_id, lost_by)
            if decision.outcome == "held":
                decision.holder = {**decision.holder, "age_s": round(age_s(decision.holder, now), 1)}
                # wait only for a younger run still taking its locks: one that holds every host
                # (phase "holding", its judgement done) will not let go before its end
                younger = priority(decision.holder) > priority(owner)
                taking = decision.holder.get("phase") == "taking"
                if check or not younger or not taking or now >= deadline:
                    return decision
            elif check:
                return decision
            else:
                if decision.outcome == "ours" and current is not None:
                    lock = {**current, "heartbeat": now, "heartbeat_at": _stamp(now)}
                else:
                    lock = new_lock(owner, now, decision.holder or None, decision.outcome)
                write_lock(path, lock)
                return decision
        time.sleep(1.0)


def heartbeat(folder: str, owner: dict[str, Any], check: bool, phase: str = "") -> tuple[bool, dict[str, Any] | None]:
    """``state: heartbeat``: (still ours, the lock found); refreshed when ours (not in check mode),
    with ``phase`` "holding" once the run's judgement found it holds every host."""
    path = os.path.join(folder, LOCK_NAME)
    if check or not os.path.isdir(folder):
        current = read_lock(path)
        return (current is not None and current.get("token") == owner["token"], current)
    with guarded(folder):
        current = read_lock(path)
        if current is None or current.get("token") != owner["token"]:
            return False, current
        now = time.time()
        write_lock(
            path, {**current, "heartbeat": now, "heartbeat_at": _stamp(now), **({"phase": phase} if phase else {})}
        )
        return True, current


def release(folder: str, owner: dict[str, Any], check: bool) -> tuple[bool, dict[str, Any] | None]:
    """``state: absent``: (removed, the lock found); only this run's own lock is removed."""
    path = os.path.join(folder, LOCK_NAME)
    if not os.path.isdir(folder):
        return False, None
    if check:
        return False, read_lock(path)
    with guarded(folder):
        current = read_lock(path)
        if current is None or current.get("token") != owner["token"]:
            return False, current
        os.unlink(path)
        return True, current


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "state": {"type": "str", "default": "present", "choices": ["present", "heartbeat", "absent"]},
            "owner": {"type": "dict", "required": True},
            "stale_s": {"type": "int", "default": 10800},
            "wait_s": {"type": "int", "default": 0},
            "break_run_id": {"type": "str", "default": ""},
            "phase": {"type": "str", "default": "", "choices": ["", "holding"]},
            "lost_by": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    owner, folder, check = p["owner"], p["dir"], module.check_mode
    missing = [key for key in ("run_id", "token") if not owner.get(key)]
    if missing:
        module.fail_json(msg=f"rollout_fleet_lock: owner needs {', '.join(missing)}")
    if p["state"] == "present":
        decision = take(folder, owner, p["stale_s"], p["wait_s"], p["break_run_id"], check, p["lost_by"])
        module.exit_json(
            changed=decision.outcome in ("taken", "took_over", "broke", "reclaimed"),
            outcome=decision.outcome,
            holder=decision.holder,
            holder_text=describe(decision.holder, time.time()) if decision.holder else "",
            path=os.path.join(folder, LOCK_NAME),
        )
    if p["state"] == "heartbeat":
        ours, current = heartbeat(folder, owner, check, p["phase"])
        if not ours:
            module.fail_json(
                msg=(
                    f"this host's rollout lock ({os.path.join(folder, LOCK_NAME)}) is no longer run "
                    f"{owner['run_id']}'s: "
                    + (f"{describe(current, time.time())} holds it" if current else "it is gone")
                    + ". Another run took it over (stale heartbeat) or broke it (sglang_rollout_break_lock); "
                    "nothing more is changed on this host by this run."
                ),
                holder=current or {},
            )
        module.exit_json(changed=False, outcome="ours")
    removed, current = release(folder, owner, check)
    module.exit_json(changed=removed, outcome="released" if removed else "not_held", holder=current or {})


if __name__ == "__main__":
    main()
