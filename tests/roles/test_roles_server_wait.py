"""sglang_server's readiness wait: the container-state module's classification (dead, restarting,
restarted while waiting, the wall-clock deadline), on docker inspect shapes."""

from __future__ import annotations

import importlib.util
import sys

from roles_testlib import ROLES

_spec = importlib.util.spec_from_file_location(
    "sglang_container_state", ROLES / "sglang_server" / "library" / "sglang_container_state.py"
)
state = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = state
_spec.loader.exec_module(state)


def test_container_state_classifies_dead_restarting_and_the_deadline():
    up = {"State": {"Status": "running", "Health": {"Status": "starting"}}, "RestartCount": 0}
    s = state.classify(up, 0, now=100.0, deadline_epoch=200.0)
    assert (s["dead"], s["expired"], s["health"], s["left_s"]) == (False, False, "starting", 100.0)
    assert state.classify(up, 0, now=200.5, deadline_epoch=200.0)["expired"] is True
    exited = {"State": {"Status": "exited", "ExitCode": 2}, "RestartCount": 0}
    assert state.classify(exited, 0, 1, 0)["why"] == "the container exited (exit code 2)"
    looping = {"State": {"Status": "restarting", "Restarting": True, "ExitCode": 2}, "RestartCount": 3}
    assert state.classify(looping, 0, 1, 0)["why"] == "the container is restarting (exit code 2, 3 restarts)"
    bounced = {"State": {"Status": "running", "ExitCode": 137}, "RestartCount": 2}
    assert state.classify(bounced, 1, 1, 0)["why"] == "the container restarted 1 time(s) while waiting (exit code 137)"
    assert state.classify(bounced, -1, 1, 0)["dead"] is False  # restarts before the wait began do not count
    assert state.classify({"State": {"Status": "running"}}, 0, 1, 0)["health"] == "none"  # image without a health check
