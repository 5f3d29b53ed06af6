"""molecule/fleet verify, the load balancer: HAProxy in front of the three hosts, driven by the drain
hooks (hooks/haproxy.py), and a client sending requests through it for the whole side effect (three
rollouts: one host failing its gate and rolled back, one lost mid-gate, the repair run).

Judged here, from the client's own record (molecule/resources/lb/client.py) and the hooks' log:
no client request failed, and a host was out of rotation only between its drain and its undrain;
and from the first rollout's log, that h1's host maintenance (a dockerd restart and the all-reduce,
its server stopped for it) ran inside its drain window."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

EPH = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
HOSTS = ("mol-fleet-h1", "mol-fleet-h2", "mol-fleet-h3")
# HAProxy marks a server UP at its next check after the undrain (inter 1s, rise 1) and the client
# samples every 0.25 s: a sample this long after an undrain may still show the old state.
SETTLE_S = 3.0


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def traffic_hooks() -> list[dict]:
    return _jsonl(EPH / "lb-hooks.jsonl")


@pytest.fixture(scope="module")
def traffic():
    return {
        "summary": json.loads((EPH / "lb-client" / "summary.json").read_text()),
        "requests": _jsonl(EPH / "lb-client" / "requests.jsonl"),
        "states": _jsonl(EPH / "lb-client" / "states.jsonl"),
        "hooks": traffic_hooks(),
    }


def _once(host) -> None:
    if host.backend.get_hostname() != HOSTS[0]:
        pytest.skip("a fleet-wide check: judged once, on mol-fleet-h1")


def windows(hooks: list[dict], name: str, end: float) -> list[tuple[float, float]]:
    """[drain called, undrain done] spans of one host; a drain never undrained lasts until ``end``."""
    spans: list[tuple[float, float]] = []
    opened: float | None = None
    for h in hooks:
        if h["host"] != name:
            continue
        if h["action"] == "drain" and opened is None:
            opened = h["started"]  # HAProxy drains at the call; "time" is after the sessions ended
        elif h["action"] == "undrain" and opened is not None:
            spans.append((opened, h["time"]))
            opened = None
    if opened is not None:
        spans.append((opened, end))
    return spans


def test_no_client_request_failed_through_three_rollouts(host, traffic):
    _once(host)
    s, reqs = traffic["summary"], traffic["requests"]
    assert s["requests"] == len(reqs) >= 300, s  # steady: a few per second for the whole side effect
    failed = [r for r in reqs if r["status"] != 200 or r["error"]]
    assert failed == [], failed[:5]
    assert s["failed"] == 0
    # the rollouts happened while it ran: the first request before the first drain, the last after
    # the last undrain
    starts = [r["start"] for r in reqs]
    assert min(starts) < traffic["hooks"][0]["time"] and max(starts) > traffic["hooks"][-1]["time"]
    # every host took requests, before and after the rollouts
    assert set(s["served_by"]) == set(HOSTS), s["served_by"]


def test_each_host_was_drained_and_put_back_by_the_hooks(host, traffic):
    """h1: drain, undrain (canary). h2: drain, undrain after its rollback (run 1); drain, never undrained
    (lost in run 2); the repair run's re-gate undrains it. h3: drain, undrain (run 3)."""
    _once(host)
    hooks = traffic["hooks"]
    by_host = {h: [e["action"] for e in hooks if e["host"] == h] for h in HOSTS}
    assert by_host["mol-fleet-h1"] == ["drain", "undrain"], hooks
    assert by_host["mol-fleet-h2"][:3] == ["drain", "undrain", "drain"], hooks
    assert by_host["mol-fleet-h2"][-1] == "undrain", hooks
    assert by_host["mol-fleet-h3"] == ["drain", "undrain"], hooks
    assert all(e["sessions_left"] == 0 for e in hooks if e["action"] == "drain"), hooks


def test_a_host_was_out_of_rotation_only_between_its_drain_and_its_undrain(host, traffic):
    _once(host)
    states, hooks = traffic["states"], traffic["hooks"]
    assert len(states) > 100 and not [s for s in states if "error" in s][:1]
    end = states[-1]["time"]
    out_of_window = []
    for name in HOSTS:
        spans = windows(hooks, name, end)
        for s in states:
            status = s.get(name, "")
            if status.startswith("UP"):
                continue
            if not any(a <= s["time"] <= b + SETTLE_S for a, b in spans):
                out_of_window.append((name, s["time"], status))
    assert out_of_window == [], (out_of_window[:10], hooks)
    # and it was really out while drained: HAProxy shows DRAIN (or DOWN while its server restarted)
    h1 = windows(hooks, "mol-fleet-h1", end)[0]
    inside = [s["mol-fleet-h1"] for s in states if h1[0] + 0.5 < s["time"] < h1[1] - 0.5]
    assert inside and all(not st.startswith("UP") for st in inside), inside
    # at the end, every host is back in rotation
    assert all(states[-1][name] == "UP" for name in HOSTS), states[-1]


def test_host_maintenance_ran_under_the_load_balancer_between_the_drain_and_the_undrain(host):
    """The first rollout found a dockerd restart pending on h1 and the all-reduce due (STAND-INS,
    host_vars/mol-fleet-h1.yml): both ran after h1's drain, its server stopped for the all-reduce,
    then release-b passed its gate (the commit is included only on a pass) before the undrain. Without
    this the checks above would hold vacuously for maintenance: here they judge a server really
    stopped under traffic (no client request failed: the drain came first)."""
    _once(host)
    log = (EPH / "rollout-release-b.log").read_text()
    h1 = "[mol-fleet-h1]"
    order = [
        ("TASK [sglang_server : Run the traffic hook command (drain)]", "changed: [mol-fleet-h1 -> localhost]"),
        ("TASK [sglang_server : Stop the drained server (its GPUs are needed)]", "changed: " + h1),
        ("TASK [gpu_host : Restart dockerd (gpu_host_docker_restart_command)]", "changed: " + h1),
        ("TASK [gpu_host : Report the all-reduce bandwidth]", "bus bandwidth 321.0 GB/s at 256 MB over 1 GPUs"),
        ("TASK [Commit what passed and put the host back in rotation]", "for mol-fleet-h1"),
        ("TASK [sglang_server : Run the traffic hook command (undrain)]", "changed: [mol-fleet-h1 -> localhost]"),
    ]
    at = 0
    for task, result in order:
        at = log.find(task, at)
        assert at >= 0, f"{task} missing after the step before it"
        end = log.find("TASK [", at + 1)
        assert result in log[at : end if end >= 0 else len(log)], (task, log[at : at + 1500])
    # and HAProxy had h1 out of rotation for all of it (the drain came before the server stopped)
    hooks = [h for h in traffic_hooks() if h["host"] == "mol-fleet-h1"]
    assert [h["action"] for h in hooks] == ["drain", "undrain"], hooks
