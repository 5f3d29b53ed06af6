"""hooks/haproxy.py against a stand-in of HAProxy's runtime API (a TCP server speaking its
one-command-per-connection protocol with `show stat` CSV as HAProxy 2.6 writes it). The real
HAProxy drives it in molecule's fleet scenario (molecule/fleet/tests/test_lb.py)."""

from __future__ import annotations

import json
import socketserver
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hooks"))
import haproxy

HEADER = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status"


@pytest.fixture
def lb():
    """Answers `set server` (an error for unknown servers) and `show stat`; sessions on the drained
    server end one per `show stat`."""
    state = {"commands": [], "scur": 2, "status": "UP"}

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            cmd = self.rfile.readline().decode().strip()
            state["commands"].append(cmd)
            if cmd.startswith("set server sglang/h1 state "):
                state["status"] = "DRAIN" if cmd.endswith("drain") else "UP"
                out = ""
            elif cmd.startswith("set server"):
                out = "No such server.\n"
            elif cmd == "show stat":
                rows = [f"sglang,h1,0,0,{state['scur']},5,,9,0,0,,0,,0,0,0,0,{state['status']}",
                        "sglang,BACKEND,0,0,0,5,,9,0,0,0,0,,0,0,0,0,UP"]  # fmt: skip
                if state["status"] == "DRAIN":
                    state["scur"] = max(0, state["scur"] - 1)
                out = HEADER + "\n" + "\n".join(rows) + "\n\n"
            else:
                out = "Unknown command.\n"
            self.wfile.write(out.encode())

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}", state
    server.shutdown()
    server.server_close()


def test_drain_sets_the_state_then_waits_for_the_sessions_to_end(lb, tmp_path, capsys):
    api, state = lb
    log = tmp_path / "hooks.jsonl"
    rc = haproxy.main(["--api", api, "--backend", "sglang", "--log", str(log), "drain", "h1"])
    assert rc == 0 and capsys.readouterr().out == "haproxy hook: sglang/h1 drained\n"
    assert state["commands"][0] == "set server sglang/h1 state drain"
    assert state["commands"][1:] == ["show stat"] * 3  # 2 sessions, then 1, then none
    (entry,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert (entry["host"], entry["action"], entry["sessions_left"]) == ("h1", "drain", 0)
    assert entry["started"] <= entry["time"]


def test_undrain_puts_it_back_without_waiting_and_reads_the_environment(lb, monkeypatch):
    api, state = lb
    monkeypatch.setenv("SGLANG_DEPLOY_HOOK", "undrain")
    monkeypatch.setenv("SGLANG_DEPLOY_HOST", "inv-h1")
    assert haproxy.main(["--api", api, "--backend", "sglang", "--server-name", "inv-h1=h1,x=y"]) == 0
    assert state["commands"] == ["set server sglang/h1 state ready", "show stat"] and state["status"] == "UP"


def test_a_drain_that_cannot_be_confirmed_fails_the_hook(lb, tmp_path, capsys):
    api, state = lb
    state["scur"] = 10**6  # sessions that do not end within --wait-s
    rc = haproxy.main(
        ["--api", api, "--backend", "sglang", "--wait-s", "0.5", "--log", str(tmp_path / "l"), "drain", "h1"]
    )
    assert rc == 1 and "still has" in capsys.readouterr().err
    assert haproxy.main(["--api", api, "--backend", "sglang", "drain", "h9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"haproxy hook: drain sglang/h9 via {api} failed: No such server.")
    assert haproxy.main(["--api", "127.0.0.1:9", "--backend", "sglang", "drain", "h1"]) == 1
    with pytest.raises(SystemExit) as exc:
        haproxy.main(["--api", api, "--backend", "sglang", "restart", "h1"])
    assert exc.value.code == 2


def test_server_rows_come_from_the_runtime_apis_csv(lb):
    api, _ = lb
    row = haproxy.server_stat(api, "sglang", "h1")
    assert (row["pxname"], row["svname"], row["scur"], row["status"]) == ("sglang", "h1", "2", "UP")
    with pytest.raises(KeyError, match="no server sglang/h2"):
        haproxy.server_stat(api, "sglang", "h2")
