"""validate/cli.py without a server: its surface (commands, flags, help, defaults), how a finished report is
written and recorded (_finish), finalize on a report folder, wait and gate against nothing, main's exits.
Exact values: the CLI is what an operator types at 3 a.m."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from _gate_helpers import app_in_thread, stub_docker
from aiohttp import web

from validate import cli
from validate.config import ConfigError

DEAD = "http://127.0.0.1:9"
# what SGLang 0.5.17 answered on an H200 (benchmarks/gpu/real_sglang.py recorded it)
RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.17-h200-2026-12-03"
SERVED = "random-llama-0.9b"
OFF = {"enabled": False}
# readiness, server info and model only: every load phase and the log scan off
QUICK = {"answers": OFF, "accuracy": OFF, "throughput": OFF, "single_stream": OFF, "stability": OFF, "logs": OFF}


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


# ---- the command line as typed: argv in, values or exit 2 out ----


def _exit2(capsys, argv: list[str]) -> str:
    """Parse ``argv`` with the real parser; it must refuse with exit 2; returns its last stderr line."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        ([], "error: the following arguments are required: {gate,finalize,wait,check-config,textfile}"),
        (["gate"], "error: the following arguments are required: --url, --config, --report"),
        (["gate", "--url", "u", "--config", "c"], "error: the following arguments are required: --report"),
        (["finalize"], "error: the following arguments are required: --report"),
        (["wait"], "error: the following arguments are required: --url"),
        (["check-config"], "error: the following arguments are required: FILE"),
        (["wait", "--url", "u", "--timeout", "soon"], "error: argument --timeout: invalid float value: 'soon'"),
        (["wait", "--url", "u", "--interval", "1s"], "error: argument --interval: invalid float value: '1s'"),
        (
            [
                "gate",
                "--url",
                "u",
                "--config",
                "c",
                "--report",
                "r",
                "--baseline",
                "b",
                "--update-baseline",
                "--promote-baseline",
            ],
            "error: argument --promote-baseline: not allowed with argument --update-baseline",
        ),
    ],
)
def test_the_parser_refuses_missing_and_malformed_arguments_with_exit_2(capsys, argv, error):
    got = _exit2(capsys, argv)
    assert got.startswith("python -m validate") and got.endswith(error)


def test_an_unknown_command_is_refused_naming_every_command(capsys):
    """argparse's own wording of the choices changed between 3.12 patch releases (quoted or not):
    what must hold is the refusal, the word typed and each command offered."""
    got = _exit2(capsys, ["nap"])
    assert got.startswith("python -m validate") and "invalid choice: 'nap' (choose from " in got
    offered = got.split("(choose from ", 1)[1].rstrip(")").replace("'", "").split(", ")
    assert offered == ["gate", "finalize", "wait", "check-config", "textfile"]


def test_each_commands_synopsis_names_its_required_flags_and_their_values():
    """The usage line argparse prints with every refusal: what an operator reads to retype the command."""
    p = cli.build_parser()
    subs = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    usage = {name: " ".join(s.format_usage().split()) for name, s in subs.choices.items()}
    assert usage["gate"] == (
        "usage: python -m validate gate [-h] --url URL --config CONFIG --report REPORT [--log FILE] "
        "[--baseline BASELINE] [--update-baseline | --promote-baseline] [--patch-record PATCH_RECORD] "
        "[--label KEY=VALUE] [--api-key-file FILE] [--model MODEL]"
    )
    assert usage["finalize"] == (
        "usage: python -m validate finalize [-h] --report REPORT [--log FILE] [--baseline BASELINE] "
        "[--update-baseline | --promote-baseline]"
    )
    assert usage["wait"] == (
        "usage: python -m validate wait [-h] --url URL [--timeout TIMEOUT] [--interval INTERVAL] [--api-key-file FILE]"
    )
    assert usage["check-config"] == "usage: python -m validate check-config [-h] FILE [FILE ...]"


def test_repeatable_flags_collect_every_value_and_numbers_are_floats():
    p = cli.build_parser()
    required = ["gate", "--url", "u", "--config", "c", "--report", "r"]
    optional = ["--label", "a=1", "--label", "b=2", "--patch-record", "p.json", "--api-key-file", "k", "--model", "m"]
    g = p.parse_args([*required, *optional, "--baseline", "b.json", "--promote-baseline"])
    assert (g.command, g.url, g.config, g.report, g.log, g.label) == ("gate", "u", "c", "r", [], ["a=1", "b=2"])
    assert (g.patch_record, g.api_key_file, g.model, g.baseline) == ("p.json", "k", "m", "b.json")
    assert (g.update_baseline, g.promote_baseline) == (False, True)
    bare = p.parse_args(["gate", "--url", "u", "--config", "c", "--report", "r"])
    assert (bare.patch_record, bare.api_key_file, bare.model, bare.baseline) == (None, None, None, None)
    f = p.parse_args(["finalize", "--report", "r", "--log", "a.log", "--log", "docker:x", "--update-baseline"])
    assert (f.command, f.report, f.log, f.update_baseline, f.promote_baseline) == (
        "finalize",
        "r",
        ["a.log", "docker:x"],
        True,
        False,
    )
    w = p.parse_args(["wait", "--url", "u", "--timeout", "1.5", "--interval", "2"])
    assert (w.command, w.url, w.timeout, w.interval, w.api_key_file) == ("wait", "u", 1.5, 2.0, None)
    assert p.parse_args(["check-config", "a.yml", "b.yml"]).configs == ["a.yml", "b.yml"]


# ---- what each flag's value must be ----


@pytest.mark.parametrize(
    ("raw", "base"),
    [
        ("http://127.0.0.1:30000", "http://127.0.0.1:30000"),
        ("https://gate.example:443/", "https://gate.example:443"),
        ("http://h:1/v1//", "http://h:1/v1"),  # trailing slashes only: the routes are appended
        ("http://h:1/proxy/X/", "http://h:1/proxy/X"),
        ("HTTP://h:1", "http://h:1"),
    ],
)
def test_url_keeps_scheme_host_port_and_path_without_trailing_slash(raw, base):
    assert cli._url(raw) == base


PLAIN = "--url: must be a plain http://HOST:PORT with no query, fragment or spaces"


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("ftp://h:1", "--url: must look like http://HOST:PORT (got 'ftp://h:1')"),
        ("http://:1", "--url: must look like http://HOST:PORT (got 'http://:1')"),
        ("http://h:1/?x=1", f"{PLAIN} (got 'http://h:1/?x=1')"),
        ("http://h:1/#top", f"{PLAIN} (got 'http://h:1/#top')"),
        ("http://h:1/a b", f"{PLAIN} (got 'http://h:1/a b')"),
        ("http://admin@h:1", "--url: must not carry credentials; put the API key in SGLANG_API_KEY"),
        ("http://:pw@h:1", "--url: must not carry credentials; put the API key in SGLANG_API_KEY"),
        ("http://h:0", "--url: bad port in 'http://h:0'"),
        ("http://h:65536", "--url: bad port in 'http://h:65536'"),
        ("http://h:port", "--url: bad port in 'http://h:port'"),
    ],
)
def test_url_refusals_name_the_flag_and_the_value(raw, error):
    with pytest.raises(ConfigError) as exc:
        cli._url(raw)
    assert str(exc.value) == error


def test_labels_split_at_the_first_equals_sign():
    assert cli._labels(["host=h1", " rack =a=b", "empty="]) == {"host": "h1", "rack": "a=b", "empty": ""}
    for bad in ("novalue", "=x", " =x"):
        with pytest.raises(ConfigError) as exc:
            cli._labels(["ok=1", bad])
        assert str(exc.value) == f"--label: must be key=value (got {bad!r})"


def test_patch_record_is_an_object_whose_fixes_each_have_a_status(tmp_path):
    p = tmp_path / "patches.json"
    p.write_text(json.dumps({"image": "i", "fixes": {"a": {"status": "applied"}, "b": {"status": "upstream"}}}))
    assert cli._patch_record(str(p)) == {
        "image": "i",
        "fixes": {"a": {"status": "applied"}, "b": {"status": "upstream"}},
    }
    p.write_text('{"image": "no fixes yet"}')
    assert cli._patch_record(str(p)) == {"image": "no fixes yet"}
    refusals = [
        ([1], f"--patch-record: {p}: fixes: must be an object of fix name -> {{status: ...}}"),
        ({"a": "applied"}, f"--patch-record: {p}: fixes.a.status: must be a string (got 'applied')"),
        ({"a": {"status": 1}}, f"--patch-record: {p}: fixes.a.status: must be a string (got {{'status': 1}})"),
    ]
    for fixes, error in refusals:
        p.write_text(json.dumps({"fixes": fixes}))
        with pytest.raises(ConfigError) as exc:
            cli._patch_record(str(p))
        assert str(exc.value) == error
    p.write_text(json.dumps({"fixes": {"a": {"note": "x" * 400}}}))
    with pytest.raises(ConfigError) as exc:
        cli._patch_record(str(p))
    assert len(str(exc.value)) == 300 and str(exc.value).startswith(f"--patch-record: {p}: fixes.a.status: must be")


def test_json_files_must_exist_parse_and_be_objects(tmp_path):
    p = tmp_path / "p.json"
    with pytest.raises(ConfigError) as exc:
        cli._patch_record(str(p))
    assert str(exc.value) == f"--patch-record: patch record not found: {p}"
    p.write_text("{")
    with pytest.raises(ConfigError) as exc:
        cli._patch_record(str(p))
    assert str(exc.value) == (
        f"--patch-record: patch record {p} is not valid JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)"
    )
    p.write_text("[]")
    with pytest.raises(ConfigError) as exc:
        cli._patch_record(str(p))
    assert str(exc.value) == f"--patch-record: patch record {p} must be a JSON object"
    p.write_text('{"note": "ü"}', encoding="utf-8")
    assert cli._patch_record(str(p)) == {"note": "ü"}


def test_a_log_file_must_be_readable_now_whatever_its_bytes(tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b"\xff\xfe binary garbage \x00")  # a log is read as bytes: no encoding can refuse it
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    cli._check_logs([str(log), str(empty)])
    cases = [
        (str(tmp_path), f"--log: {tmp_path} is a folder, not a file (or use docker:CONTAINER)"),
        (str(tmp_path / "none.log"), f"--log: file not found: {tmp_path / 'none.log'} (or use docker:CONTAINER)"),
        (str(log / "x"), f"--log: cannot read {log / 'x'}: Not a directory"),
    ]
    for bad, error in cases:
        with pytest.raises(ConfigError) as exc:
            cli._check_logs([str(log), bad])
        assert str(exc.value) == error


def test_every_log_is_checked_after_a_docker_one(tmp_path, monkeypatch):
    stub_docker(tmp_path, monkeypatch, 'echo "running"')
    with pytest.raises(ConfigError) as exc:
        cli._check_logs(["docker:sglang", str(tmp_path / "none.log")])
    assert str(exc.value) == f"--log: file not found: {tmp_path / 'none.log'} (or use docker:CONTAINER)"


def test_docker_inspect_is_bounded_and_its_refusal_kept_short(tmp_path, monkeypatch):
    stub_docker(tmp_path, monkeypatch, "head -c 300 /dev/zero | tr '\\0' e >&2; exit 1")
    with pytest.raises(ConfigError) as exc:
        cli._check_logs(["docker:x"])
    assert str(exc.value) == "--log docker:x: no such container (" + "e" * 200 + ")"
    # a docker that does not answer: the check gives up after 30 s (here: the subprocess says it timed out)
    waited = []

    def hung(argv, **kw):
        waited.append(kw["timeout"])
        raise subprocess.TimeoutExpired(argv, kw["timeout"])

    monkeypatch.setattr(cli.subprocess, "run", hung)
    with pytest.raises(ConfigError) as exc:
        cli._check_logs(["docker:x"])
    assert waited == [30]
    assert str(exc.value) == (
        "--log docker:x: docker inspect failed: Command '['docker', 'inspect', '--format', '{{.State.Status}}', 'x']' "
        "timed out after 30 seconds"
    )


@pytest.fixture
def sglang_stub():
    """A server that is ready and answers the info routes with the recorded SGLang documents (no load routes)."""

    async def ok(request):
        return web.Response(text="")

    def recorded(name):
        async def answer(request):
            return web.json_response(json.loads((RECORDED / name).read_text()))

        return answer

    app = web.Application()
    app.router.add_get("/health", ok)
    app.router.add_get("/health_generate", ok)
    app.router.add_get("/get_server_info", recorded("get_server_info.json"))
    app.router.add_get("/get_model_info", recorded("get_model_info.json"))
    app.router.add_get("/v1/models", recorded("v1_models.json"))
    with app_in_thread(app) as base:
        yield base


def _quick_config(tmp_path: Path, **over) -> Path:
    cfg = tmp_path / "gate.json"
    cfg.write_text(json.dumps({"readiness": {"timeout_s": 5, "interval_s": 0.1}, **QUICK, **over}))
    return cfg


def test_gate_hands_every_option_to_the_report(tmp_path, capsys, monkeypatch, sglang_stub):
    """--model, --patch-record, --label, --log, the config's path and the report folder reach the gate; an
    unneeded --model is not one: the config's model is then checked."""
    monkeypatch.delenv("SGLANG_API_KEY", raising=False)
    stub_docker(tmp_path, monkeypatch, 'if [ "$1" = logs ]; then echo "server up"; else echo running; fi')
    cfg = _quick_config(tmp_path, model="the-config-model", logs={"enabled": True})
    patch = tmp_path / "patches.json"
    patch.write_text('{"fixes": {"mtp": {"status": "applied"}}}')
    rep = tmp_path / "deep" / "r"  # made, parents and all
    argv = ["gate", "--url", sglang_stub + "/", "--config", str(cfg), "--report", str(rep)]
    flags = ["--model", SERVED, "--patch-record", str(patch), "--label", "host=h1", "--log", "docker:sglang"]
    code = cli.main([*argv, *flags])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith(f"[gate] gate: {sglang_stub} with {cfg}\n")
    report = json.loads((rep / "report.json").read_text())
    assert (report["verdict"], report["exit_code"], report["url"]) == ("pass", 0, sglang_stub)
    assert report["config_file"] == str(cfg) and report["labels"] == {"host": "h1"}
    assert report["patch_record"] == {"fixes": {"mtp": {"status": "applied"}}}
    model = next(c for c in report["checks"] if c["name"] == "server.model")
    assert model["required"] == SERVED and model["passed"]
    # the container's log of the gate window, fetched into the report folder and scanned
    assert (rep / "container-sglang.log").read_text() == "server up\n"
    assert report["phases"]["logs"]["files"] == [str(rep / "container-sglang.log")]
    assert report["baseline"]["note"] == "no --baseline given: no regression check"
    assert cli.main(argv) == 1  # without --model the config's model is expected, and not served
    report = json.loads((rep / "report.json").read_text())
    assert report["failed_checks"] == ["server.model"] and report["patch_record"] is None and report["labels"] == {}
    assert "logs: no --log file given" in report["skipped"]
    assert f"[gate] FAIL: server.model. Report: {rep / 'report.json'}" in capsys.readouterr().out


def test_gate_says_where_the_api_key_came_from_never_the_key(tmp_path, capsys, monkeypatch, sglang_stub):
    cfg = _quick_config(tmp_path)
    argv = ["gate", "--url", sglang_stub, "--config", str(cfg), "--report", str(tmp_path / "r")]
    key = tmp_path / "key"
    key.write_text("sk-file\n")
    monkeypatch.setenv("SGLANG_API_KEY", "")
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"[gate] gate: {sglang_stub} with {cfg}"
    assert cli.main([*argv, "--api-key-file", str(key)]) == 0  # the file's key is now in the environment too
    assert (
        capsys.readouterr().out.splitlines()[0]
        == f"[gate] gate: {sglang_stub} with {cfg} (API key from --api-key-file)"
    )
    monkeypatch.setenv("SGLANG_API_KEY", "sk-env")
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"[gate] gate: {sglang_stub} with {cfg} (API key from SGLANG_API_KEY)"
    assert "sk-env" not in out


def test_the_baseline_lock_is_waited_for_no_longer_than_the_deadline_leaves(tmp_path, capsys, sglang_stub):
    from filelock import FileLock

    base = tmp_path / "b.json"
    cfg = _quick_config(tmp_path, deadline_s=4)  # measuring must end inside it even on a busy machine
    argv = [
        "gate",
        "--url",
        sglang_stub,
        "--config",
        str(cfg),
        "--report",
        str(tmp_path / "r"),
        "--baseline",
        str(base),
    ]
    with FileLock(str(base) + ".lock"):  # another host's gate is writing the group's reference
        assert cli.main([*argv, "--update-baseline"]) == 0
    note = json.loads((tmp_path / "r" / "report.json").read_text())["baseline"]["update_note"]
    prefix = f"baseline not written: {base}.lock is held by another process (waited "
    assert note.startswith(prefix) and note.endswith("s)") and 0 < float(note[len(prefix) : -2]) < 4, note
    assert json.loads((tmp_path / "r" / "report.json").read_text())["baseline"]["path"] == str(base)
    assert not base.exists()


@pytest.mark.parametrize(
    ("flag", "value", "error"),
    [
        ("--model", " ", "--model: must not be empty"),
        ("--label", "nokey", "--label: must be key=value (got 'nokey')"),
        ("--log", "docker:", "--log: docker:NAME needs a container name (got 'docker:')"),
        ("--url", "http://" + "a" * 64 + ".example:1", "--url: cannot resolve host '" + "a" * 64 + ".example': "),
    ],
)
def test_gate_refuses_a_bad_flag_before_any_load(tmp_path, capsys, flag, value, error):
    cfg = _quick_config(tmp_path)
    argv = ["gate", "--url", DEAD, "--config", str(cfg), "--report", str(tmp_path / "r"), flag, value]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.startswith(error)
    assert not (tmp_path / "r" / "report.json").exists()


def test_the_report_folder_must_take_a_file_now(tmp_path):
    made = tmp_path / "a" / "b"
    cli._check_report_dir(str(made))
    cli._check_report_dir(str(made))  # an existing folder is fine
    assert made.is_dir() and list(made.iterdir()) == []  # the probe file is gone
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError) as exc:
        cli._check_report_dir(str(blocker / "r"))
    assert str(exc.value) == f"--report: cannot write into {blocker / 'r'}: Not a directory"


def test_check_config_reports_every_file_and_fails_if_any_is_bad(tmp_path, capsys):
    good = _quick_config(tmp_path, deadline_s=120)
    other = tmp_path / "other.yml"
    other.write_text("deadline_s: 90.5\n")
    bad = tmp_path / "bad.yml"
    bad.write_text("deadline_s: -1\n")
    assert cli.main(["check-config", str(good), str(other)]) == 0
    assert capsys.readouterr().out == f"[gate] {good}: ok (deadline 120 s)\n[gate] {other}: ok (deadline 90.5 s)\n"
    assert cli.main(["check-config", str(bad), str(good), str(tmp_path / "none.yml"), str(other)]) == 2
    cap = capsys.readouterr()
    assert cap.out == f"[gate] {good}: ok (deadline 120 s)\n[gate] {other}: ok (deadline 90.5 s)\n"
    assert cap.err.splitlines()[0].startswith(f"{bad}: ")
    assert f"{tmp_path / 'none.yml'}: gate config: file not found: {tmp_path / 'none.yml'}" in cap.err.splitlines()


def _pipe(monkeypatch, name: str) -> io.BytesIO:
    """``sys.<name>`` as a pipe's block-buffered writer: a line reaches the bytes only when flushed."""
    raw = io.BytesIO()
    monkeypatch.setattr(sys, name, io.TextIOWrapper(raw, encoding="utf-8", line_buffering=False))
    return raw


def test_progress_lines_and_refusals_are_flushed_at_once(tmp_path, monkeypatch):
    """Ansible streams the gate's output: nothing may sit in a buffer until the process ends."""
    out = _pipe(monkeypatch, "stdout")
    cli.say("readiness: waiting")
    assert out.getvalue() == b"[gate] readiness: waiting\n"
    good = _quick_config(tmp_path)
    bad = tmp_path / "bad.yml"
    bad.write_text("[]\n")
    err = _pipe(monkeypatch, "stderr")
    assert cli.main(["check-config", str(bad), str(good)]) == 2
    assert err.getvalue().decode() == f"{bad}: gate config: {bad}: the top level must be a mapping of sections\n"
    err = _pipe(monkeypatch, "stderr")
    assert cli.main(["wait", "--url", "nope"]) == 2
    assert err.getvalue() == b"--url: must look like http://HOST:PORT (got 'nope')\n"

    def boom(args):
        raise RuntimeError("bug")

    monkeypatch.setattr(cli, "cmd_wait", boom)
    monkeypatch.delenv("GATE_DEBUG", raising=False)
    err = _pipe(monkeypatch, "stderr")
    assert cli.main(["wait", "--url", DEAD]) == 1
    assert err.getvalue() == b"gate: internal error: RuntimeError: bug (set GATE_DEBUG=1 for a traceback)\n"


def test_process_usage_is_user_plus_system_seconds_and_peak_rss_in_mb(monkeypatch):
    import resource

    class Usage:
        ru_utime, ru_stime, ru_maxrss = 1.23456, 0.5, 123456  # Linux: ru_maxrss in KiB

    monkeypatch.setattr(resource, "getrusage", lambda who: Usage if who == resource.RUSAGE_SELF else None)
    assert cli._process_usage() == {"cpu_s": 1.735, "max_rss_mb": 120.6}


def test_finish_names_every_failed_check(tmp_path, capsys):
    a, b = dict(NOT_COMPARED), dict(NOT_COMPARED, name="server.model")
    assert cli._finish(_args(tmp_path), _report("fail", a, b)) == 1
    assert f"[gate] FAIL: accuracy.reference, server.model. Report: {tmp_path / 'r' / 'report.json'}" in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize(
    "flags", [["--timeout", "0"], ["--timeout", "-1"], ["--interval", "inf"], ["--interval", "0"], ["--timeout", "nan"]]
)
def test_wait_needs_a_finite_positive_timeout_and_interval(capsys, flags):
    assert cli.main(["wait", "--url", DEAD, *flags]) == 2
    assert capsys.readouterr().err == "--timeout/--interval: must be finite numbers > 0\n"


def test_wait_is_ready_when_both_health_routes_answer(capsys, sglang_stub):
    assert cli.main(["wait", "--url", sglang_stub, "--timeout", "5"]) == 0
    assert "[gate] ready after " in capsys.readouterr().out


def test_wait_says_progress_every_interval(capsys):
    assert cli.main(["wait", "--url", DEAD, "--timeout", "2", "--interval", "0.25"]) == 1
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[gate] waiting for ")]
    # one per 0.25 s of a 2 s wait: 8 or 9, 6 or more when a busy machine wakes the loop late; a note every
    # other interval would make 4 or 5
    assert 6 <= len(notes) <= 9, notes


def test_wait_asks_no_longer_than_its_timeout(capsys):
    """A server that takes the connection and never answers: each ask is bounded by --timeout."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        assert cli.main(["wait", "--url", f"http://127.0.0.1:{port}", "--timeout", "0.3", "--interval", "1"]) == 1
    assert (
        capsys.readouterr().out.splitlines()[-1] == "[gate] not ready within 0.3s; last: /health: no answer within 0.3s"
    )


def test_textfile_writes_the_metrics_of_a_report_file_or_stdin(tmp_path, capsys, monkeypatch):
    import io

    rep = tmp_path / "report.json"
    rep.write_text(json.dumps(_report("fail", NOT_COMPARED)))
    out = tmp_path / "gate.prom"
    assert cli.main(["textfile", "--report", str(rep), "--out", str(out), "--label", "image=i"]) == 0
    assert capsys.readouterr().out == f"[gate] metrics: {out}: fail (accuracy.reference), 0 figures\n"
    assert 'sglang_gate_passed{engine="test-engine",image="i",model="",profile=""} 0.0' in out.read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(_report("pass"))))
    assert cli.main(["textfile", "--report", "-", "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"[gate] metrics: {out}: pass, 0 figures\n"
    rep.write_text("[1]")
    assert cli.main(["textfile", "--report", str(rep), "--out", str(out)]) == 2
    assert capsys.readouterr().err == "textfile: --report: must be a JSON object (a gate report)\n"
    assert cli.main(["textfile", "--report", str(tmp_path / "none.json"), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"textfile: [Errno 2] No such file or directory: '{tmp_path / 'none.json'}'\n")


def test_finalize_refuses_a_report_without_checks_or_config(tmp_path, capsys):
    rep = tmp_path / "r"
    rep.mkdir()
    for doc in ({"checks": []}, {"config": {}}, {"checks": {}, "config": {}}):
        (rep / "report.json").write_text(json.dumps(doc))
        assert cli.main(["finalize", "--report", str(rep)]) == 2
        assert capsys.readouterr().err == f"--report: {rep / 'report.json'} is not a gate report (no checks/config)\n"


def test_finalize_keeps_a_containers_window_log_in_the_report_folder(tmp_path, capsys, monkeypatch):
    stub_docker(tmp_path, monkeypatch, 'if [ "$1" = inspect ]; then echo running; else echo "server started"; fi')
    rep = tmp_path / "r"
    rep.mkdir()
    (rep / "report.json").write_text(json.dumps(_report("pass")))
    assert cli.main(["finalize", "--report", str(rep), "--log", "docker:sglang"]) == 0
    assert (rep / "container-sglang.log").read_text() == "server started\n"
    final = json.loads((rep / "report.json").read_text())
    assert final["verdict"] == "pass" and final["exit_code"] == 0
    assert final["checks"][-1]["name"] == "logs.crash_signatures" and final["checks"][-1]["passed"]
