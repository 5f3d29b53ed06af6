"""validate/cli.py without a server: its surface (commands, flags, help, defaults), how a finished report is
written and recorded (_finish), finalize on a report folder, wait and gate against nothing, main's exits.
Exact values: the CLI is what an operator types at 3 a.m."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from _gate_helpers import stub_docker

from validate import cli
from validate.config import ConfigError

DEAD = "http://127.0.0.1:9"


def _options(sub: argparse.ArgumentParser) -> dict[str, tuple[str | None, object]]:
    return {a.option_strings[0] if a.option_strings else a.dest: (a.help, a.default) for a in sub._actions[1:]}


def test_the_commands_flags_help_and_defaults():
    p = cli.build_parser()
    assert p.prog == "python -m validate" and p.description == "Post-deploy gate for SGLang servers."
    subs = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    assert list(subs.choices) == ["gate", "finalize", "wait", "check-config", "textfile"]
    assert subs.metavar == "{gate,finalize,wait,check-config,textfile}"
    helps = {c.dest: c.help for c in subs._choices_actions}
    assert helps == {
        "gate": "measure the server and pass/fail it against gate.yml",
        "finalize": "add the server's log of the gate window to a finished report and judge it again",
        "wait": "wait until /health and /health_generate answer 200",
        "check-config": "parse gate configs as the gate will (preflight: before any host changes)",
        "textfile": "write a gate report's verdict and figures as node_exporter textfile metrics",
    }
    baseline = {
        "--baseline": ("the host group's baseline file (compared when it exists)", None),
        "--update-baseline": (
            "on pass, write this report as the group's reference if the group has none yet (first passing gate)",
            False,
        ),
        "--promote-baseline": (
            "make this report the group's reference on purpose (the old one moves to its history): comparisons the "
            "old reference cannot make (settings, engine, workload changed; unreadable) are accepted, every other "
            "check must pass",
            False,
        ),
    }
    assert _options(subs.choices["gate"]) == {
        "--url": ("server base URL, e.g. http://127.0.0.1:30000", None),
        "--config": ("gate config YAML (see validate/README.md)", None),
        "--report": ("folder for report.json, summary.md, sweep.png", None),
        "--log": (
            "server log to scan: a file, or docker:CONTAINER (its docker logs since the gate started; repeatable)",
            [],
        ),
        **baseline,
        "--patch-record": ("the image's patches.json, copied into the report", None),
        "--label": ("free label (repeatable)", []),
        "--api-key-file": ("read the server's API key from this file (one line)", None),
        "--model": ("the served model name the gate expects (overrides the config's `model`)", None),
    }
    assert _options(subs.choices["finalize"]) == {
        "--report": ("the gate's report folder (holds report.json)", None),
        "--log": ("log file or docker:CONTAINER", []),
        **baseline,
    }
    assert _options(subs.choices["wait"]) == {
        "--url": (None, None),
        "--timeout": ("seconds (default 900)", 900.0),
        "--interval": ("seconds between progress lines (default 5)", 5.0),
        "--api-key-file": ("read the server's API key from this file (one line)", None),
    }
    assert _options(subs.choices["check-config"]) == {"configs": ("gate config YAML or JSON files", None)}
    gate = subs.choices["gate"]
    assert [a.required for a in gate._actions if a.option_strings[:1] in (["--url"], ["--config"], ["--report"])] == [
        True,
        True,
        True,
    ]
    with pytest.raises(SystemExit):  # the two baseline writes exclude each other
        p.parse_args(["finalize", "--report", "r", "--update-baseline", "--promote-baseline"])
    args = p.parse_args(["gate", "--url", "u", "--config", "c", "--report", "r", "--log", "a", "--log", "b"])
    assert args.log == ["a", "b"] and args.label == [] and not args.update_baseline and not args.promote_baseline


def _report(verdict: str, *checks: dict) -> dict:
    return {
        "schema_version": 3,
        "verdict": verdict,
        "engine": "test-engine",
        "config": {},
        "key_metrics": {},
        "checks": list(checks),
        "failed_checks": [c["name"] for c in checks if not c["passed"]],
        "baseline": {},
    }


NOT_COMPARED = {
    "name": "accuracy.reference",
    "passed": False,
    "measured": "not compared",
    "required": "compared",
    "unit": "",
    "message": "FAILED the accuracy was not compared with the group's reference: x",
    "op": "",
}


def _args(tmp_path: Path, **kw) -> argparse.Namespace:
    base = {"update_baseline": False, "promote_baseline": False, "baseline": None, "report": str(tmp_path / "r")}
    return argparse.Namespace(**(base | kw))


def test_finish_writes_the_report_with_its_exit_code_and_says_the_verdict(tmp_path, capsys):
    ok = {"name": "readiness", "passed": True, "measured": 1.0, "required": 5, "unit": "s", "message": "ok", "op": "<="}
    assert cli._finish(_args(tmp_path), _report("pass", ok)) == 0
    written = json.loads((tmp_path / "r" / "report.json").read_text())
    assert written["exit_code"] == 0 and written["verdict"] == "pass" and "updated" not in written["baseline"]
    out = capsys.readouterr().out
    assert "# SGLang post-deploy gate: PASS" in out
    assert out.rstrip().endswith(f"[gate] PASS (1 checks). Report: {tmp_path / 'r' / 'report.json'}")
    assert cli._finish(_args(tmp_path), _report("fail", NOT_COMPARED)) == 1
    assert (
        capsys.readouterr()
        .out.rstrip()
        .endswith("[gate] FAIL: accuracy.reference. Report: " + str(tmp_path / "r" / "report.json"))
    )
    assert cli._finish(_args(tmp_path), _report("fail")) == 1
    assert "[gate] FAIL: no checks ran." in capsys.readouterr().out


def test_finish_promotes_what_could_not_be_compared_and_records_the_reference(tmp_path, capsys):
    base = tmp_path / "b.json"
    args = _args(tmp_path, promote_baseline=True, baseline=str(base))
    assert cli._finish(args, _report("fail", NOT_COMPARED)) == 0
    written = json.loads((tmp_path / "r" / "report.json").read_text())
    assert written["verdict"] == "pass" and written["failed_checks"] == [] and written["exit_code"] == 0
    assert written["checks"][0]["message"].startswith("accepted on purpose (--promote-baseline")
    assert written["baseline"] == {
        "updated": True,
        "update_note": f"baseline written (promoted (--promote-baseline)): {base}",
    }
    assert json.loads(base.read_text())["reference"]["how"] == "promoted (--promote-baseline)"
    assert f"[gate] baseline written (promoted (--promote-baseline)): {base}" in capsys.readouterr().out
    # an ordinary update writes nothing for a failed gate; no flag, no write at all
    again = _args(tmp_path, update_baseline=True, baseline=str(tmp_path / "c.json"))
    assert cli._finish(again, _report("fail", NOT_COMPARED)) == 1 and not (tmp_path / "c.json").exists()
    assert json.loads((tmp_path / "r" / "report.json").read_text())["baseline"]["update_note"] == (
        "baseline not written: the gate failed"
    )


def test_finalize_needs_a_gate_report_and_judges_the_window_log(tmp_path, capsys):
    rep = tmp_path / "r"
    rep.mkdir()
    args = argparse.Namespace(report=str(rep), log=[], update_baseline=False, promote_baseline=False, baseline=None)
    with pytest.raises(ConfigError) as exc:
        cli.cmd_finalize(args)
    assert str(exc.value) == f"--report: report not found: {rep / 'report.json'}"
    (rep / "report.json").write_text('{"verdict": "pass"}')
    with pytest.raises(ConfigError) as exc:
        cli.cmd_finalize(args)
    assert str(exc.value) == f"--report: {rep / 'report.json'} is not a gate report (no checks/config)"
    (rep / "report.json").write_text(json.dumps(_report("pass")))
    window = tmp_path / "w.log"
    window.write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    args.log = [str(window)]
    assert cli.cmd_finalize(args) == 1
    out = capsys.readouterr().out
    assert f"[gate] logs of the gate window: FAILED crash signature 'cuda_error' in {window}:1: " in out
    final = json.loads((rep / "report.json").read_text())
    assert final["failed_checks"] == ["logs.crash_signatures"] and final["exit_code"] == 1


def test_gate_and_wait_against_nothing_end_in_their_deadline(tmp_path, capsys):
    cfg = tmp_path / "gate.yml"
    cfg.write_text(json.dumps({"readiness": {"timeout_s": 0.3, "interval_s": 0.1, "request_timeout_s": 0.1}}))
    base = tmp_path / "b.json"
    argv = ["gate", "--url", DEAD, "--config", str(cfg), "--report", str(tmp_path / "r"), "--baseline", str(base)]
    assert cli.main([*argv, "--update-baseline", "--label", "host=h1", "--model", "m"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"[gate] gate: {DEAD} with {cfg}\n") and "[gate] baseline not written: the gate failed" in out
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["labels"] == {"host": "h1"} and set(rep["gate_process"]) == {"cpu_s", "max_rss_mb"}
    assert rep["gate_process"]["cpu_s"] > 0 and rep["gate_process"]["max_rss_mb"] > 10 and not base.exists()
    assert cli.main(["wait", "--url", DEAD, "--timeout", "0.3", "--interval", "0.1"]) == 1
    out = capsys.readouterr().out
    assert "[gate] not ready within 0.3s; last: /health: cannot connect: " in out
    assert cli.main(["wait", "--url", DEAD, "--timeout", "inf"]) == 2
    assert capsys.readouterr().err == "--timeout/--interval: must be finite numbers > 0\n"
    assert cli.main(["wait", "--url", DEAD, "--interval", "0"]) == 2


def test_main_turns_every_error_into_an_exit_code_and_one_line(tmp_path, capsys, monkeypatch):
    assert cli.main(["gate", "--url", "nope", "--config", "c", "--report", "r"]) == 2
    assert capsys.readouterr().err == "--url: must look like http://HOST:PORT (got 'nope')\n"

    def boom(args):
        raise RuntimeError("bug")

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_wait", boom)
    assert cli.main(["wait", "--url", DEAD]) == 1
    assert capsys.readouterr().err == "gate: internal error: RuntimeError: bug (set GATE_DEBUG=1 for a traceback)\n"
    monkeypatch.setenv("GATE_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli.main(["wait", "--url", DEAD])
    monkeypatch.setattr(cli, "cmd_wait", interrupted)
    assert cli.main(["wait", "--url", DEAD]) == 130
    assert capsys.readouterr().err == "gate: interrupted\n"
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    # set through monkeypatch, so the key --api-key-file puts there is taken away after this test (a
    # delenv of an unset variable records nothing to restore, and the key leaked into later tests)
    monkeypatch.setenv("SGLANG_API_KEY", "")
    monkeypatch.setattr(cli, "cmd_wait", lambda args: 0)
    assert cli.main(["wait", "--url", DEAD, "--api-key-file", str(key)]) == 0
    import os

    assert os.environ["SGLANG_API_KEY"] == "s3cret"
    key.write_text("two\nlines\n")
    assert cli.main(["wait", "--url", DEAD, "--api-key-file", str(key)]) == 2
    assert capsys.readouterr().err == f"--api-key-file: {key} must hold the key on one line\n"
    assert cli.main(["wait", "--url", DEAD, "--api-key-file", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err == f"--api-key-file: cannot read {tmp_path / 'none'}: FileNotFoundError\n"


def test_a_docker_log_needs_the_cli_and_a_container_that_docker_knows(tmp_path, monkeypatch):
    argv = stub_docker(tmp_path, monkeypatch, 'echo "running"')
    cli._check_logs(["docker:sglang"])  # known: no error
    assert argv.read_text().split("\n")[:4] == ["inspect", "--format", "{{.State.Status}}", "sglang"]
    with pytest.raises(ConfigError) as exc:
        cli._check_logs(["docker:  "])
    assert str(exc.value) == "--log: docker:NAME needs a container name (got 'docker:')"
    stub_docker(tmp_path, monkeypatch, 'echo "Error: No such object: x" >&2; exit 1')
    with pytest.raises(ConfigError) as exc:
        cli._check_logs(["docker:x"])
    assert str(exc.value) == "--log docker:x: no such container (Error: No such object: x)"
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError) as exc:
        cli._check_logs(["docker:x"])
    assert str(exc.value) == "--log docker:x: the docker CLI is not installed here"
