"""Command line: ``python -m validate gate|finalize|wait|check-config|textfile ...``.

``gate`` measures and judges a server; ``finalize`` adds the server's log of the gate
window to a finished report (the rollout fetches it from the host after the gate) and
judges again; ``wait`` is readiness alone.

Exit codes: 0 pass (or ready), 1 gate failed (or not ready in time), 2 bad config or
usage (the message names the field or flag). Bad input never shows a traceback.
The API key comes from ``--api-key-file`` (a file, e.g. mounted read-only from a tmpfs into
the gate's container, so the key is in no environment ``docker inspect`` shows and on no
command line) or from the SGLANG_API_KEY environment variable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from . import baseline as baseline_store
from . import textfile
from .client import API_KEY_ENV
from .config import ConfigError, GateConfig, ReadinessConfig, load_config, parse_config
from .files import LockTimeout

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def say(msg: str) -> None:
    """Progress line on stdout (Ansible captures it), flushed at once."""
    print(f"[gate] {msg}", flush=True)


def _url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--url: must look like http://HOST:PORT (got {raw!r})")
    if parts.query or parts.fragment or any(ch.isspace() for ch in raw):
        raise ConfigError(f"--url: must be a plain http://HOST:PORT with no query, fragment or spaces (got {raw!r})")
    if parts.username or parts.password:
        raise ConfigError("--url: must not carry credentials; put the API key in SGLANG_API_KEY")
    try:
        if parts.port == 0:
            raise ValueError("port 0")
    except ValueError:
        raise ConfigError(f"--url: bad port in {raw!r}") from None
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _labels(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--label: must be key=value (got {item!r})")
        out[key.strip()] = value
    return out


def _json_file(path: str, what: str, flag: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{flag}: {what} not found: {p}")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{flag}: {what} {p} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{flag}: {what} {p} must be a JSON object")
    return data


def _patch_record(path: str) -> dict[str, Any]:
    """The image's /etc/sglang-deploy/patches.json: an object whose ``fixes`` map names to ``{status}``."""
    data = _json_file(path, "patch record", "--patch-record")
    fixes = data.get("fixes", {})
    if not isinstance(fixes, dict):
        raise ConfigError(f"--patch-record: {path}: fixes: must be an object of fix name -> {{status: ...}}")
    for name, fix in fixes.items():
        if not isinstance(fix, dict) or not isinstance(fix.get("status"), str):
            raise ConfigError(f"--patch-record: {path}: fixes.{name}.status: must be a string (got {fix!r})"[:300])
    return data


def _add_baseline_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline", help="the host group's baseline file (compared when it exists)")
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--update-baseline",
        action="store_true",
        help="on pass, write this report as the group's reference if the group has none yet (first passing gate)",
    )
    g.add_argument(
        "--promote-baseline",
        action="store_true",
        help="make this report the group's reference on purpose (the old one moves to its history): comparisons "
        "the old reference cannot make (settings, engine, workload changed; unreadable) are accepted, every other "
        "check must pass",
    )


def _load_api_key(path: str | None) -> None:
    """``--api-key-file``: the key for this process only (it is never printed, logged or stored)."""
    if not path:
        return
    try:
        key = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--api-key-file: cannot read {path}: {exc.__class__.__name__}") from None
    if not key or "\n" in key:
        raise ConfigError(f"--api-key-file: {path} must hold the key on one line")
    os.environ[API_KEY_ENV] = key


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m validate", description="Post-deploy gate for SGLang servers.")
    sub = p.add_subparsers(dest="command", required=True, metavar="{gate,finalize,wait,check-config,textfile}")
    g = sub.add_parser("gate", help="measure the server and pass/fail it against gate.yml")
    g.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    g.add_argument("--config", required=True, help="gate config YAML (see validate/README.md)")
    g.add_argument("--report", required=True, help="folder for report.json, summary.md, sweep.png")
    g.add_argument(
        "--log",
        action="append",
        default=[],
        metavar="FILE",
        help="server log to scan: a file, or docker:CONTAINER (its docker logs since the gate started; repeatable)",
    )
    _add_baseline_flags(g)
    g.add_argument("--patch-record", help="the image's patches.json, copied into the report")
    g.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="free label (repeatable)")
    g.add_argument("--api-key-file", metavar="FILE", help="read the server's API key from this file (one line)")
    g.add_argument("--model", help="the served model name the gate expects (overrides the config's `model`)")
    f = sub.add_parser(
        "finalize", help="add the server's log of the gate window to a finished report and judge it again"
    )
    f.add_argument("--report", required=True, help="the gate's report folder (holds report.json)")
    f.add_argument("--log", action="append", default=[], metavar="FILE", help="log file or docker:CONTAINER")
    _add_baseline_flags(f)
    w = sub.add_parser("wait", help="wait until /health and /health_generate answer 200")
    w.add_argument("--url", required=True)
    w.add_argument("--timeout", type=float, default=900.0, help="seconds (default 900)")
    w.add_argument("--interval", type=float, default=5.0, help="seconds between progress lines (default 5)")
    w.add_argument("--api-key-file", metavar="FILE", help="read the server's API key from this file (one line)")
    c = sub.add_parser("check-config", help="parse gate configs as the gate will (preflight: before any host changes)")
    c.add_argument("configs", nargs="+", metavar="FILE", help="gate config YAML or JSON files")
    textfile.add_parser(sub)  # node_exporter metrics of a finished gate (validate/textfile.py)
    return p


def cmd_check_config(args: argparse.Namespace) -> int:
    """Every config must load: the rollout's preflight runs this, so a bad setting stops the run
    before the canary's server is replaced, not after (exit 2 with each file's refusal)."""
    bad = 0
    for path in args.configs:
        try:
            cfg = load_config(path)
        except ConfigError as exc:
            bad += 1
            print(f"{path}: {exc}", file=sys.stderr, flush=True)
            continue
        say(f"{path}: ok (deadline {cfg.deadline_s:g} s)")
    return EXIT_USAGE if bad else EXIT_PASS


def _check_logs(logs: list[str]) -> None:
    """Every log must be readable now, before any load: a missing container is a usage error, not a
    failed scan after an hour of measuring."""
    for log in logs:
        if log.startswith("docker:"):
            name = log[len("docker:") :].strip()
            if not name:
                raise ConfigError("--log: docker:NAME needs a container name (got 'docker:')")
            if not shutil.which("docker"):
                raise ConfigError(f"--log {log}: the docker CLI is not installed here")
            try:
                proc = subprocess.run(
                    ["docker", "inspect", "--format", "{{.State.Status}}", name],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ConfigError(f"--log {log}: docker inspect failed: {exc}") from None
            if proc.returncode != 0:
                raise ConfigError(f"--log {log}: no such container ({(proc.stdout + proc.stderr).strip()[:200]})")
            continue
        try:
            with open(log, "rb") as f:
                f.read(1)
        except IsADirectoryError:
            raise ConfigError(f"--log: {log} is a folder, not a file (or use docker:CONTAINER)") from None
        except FileNotFoundError:
            raise ConfigError(f"--log: file not found: {log} (or use docker:CONTAINER)") from None
        except OSError as exc:
            raise ConfigError(f"--log: cannot read {log}: {exc.strerror or exc}") from None


def _check_report_dir(path: str) -> None:
    """The report folder must take a file now: an unwritable one found after the load loses the report."""
    d = Path(path)
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / f".gate-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--report: cannot write into {path}: {exc.strerror or exc}") from None


def _check_host(url: str) -> None:
    """The URL's host must resolve (a refused connection is fine: the server may still be starting)."""
    host = urlsplit(url).hostname or ""
    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"--url: cannot resolve host {host!r}: {exc}") from None


def _check_baseline_flags(args: argparse.Namespace) -> None:
    if (args.update_baseline or args.promote_baseline) and not args.baseline:
        flag = "--update-baseline" if args.update_baseline else "--promote-baseline"
        raise ConfigError(f"{flag}: needs --baseline FILE (where to write it)")


def _gate_options(args: argparse.Namespace) -> Any:
    from .gate import GateOptions

    url = _url(args.url)
    cfg = load_config(args.config)
    labels = _labels(args.label)
    _check_logs(args.log)
    patch = _patch_record(args.patch_record) if args.patch_record else None
    _check_baseline_flags(args)
    _check_report_dir(args.report)
    _check_host(url)
    if args.model is not None and not args.model.strip():
        raise ConfigError("--model: must not be empty")
    return GateOptions(
        url=url,
        config=cfg,
        config_path=args.config,
        logs=list(args.log),
        baseline_path=args.baseline,
        patch_record=patch,
        labels=labels,
        report_dir=args.report,
        model=args.model,
    )


LOCK_WAIT_S = 60.0  # the most the baseline's lock is waited for (less when the gate's deadline is nearer)


def _record_baseline(args: argparse.Namespace, report: dict[str, Any], left_s: float) -> None:
    """On pass, write the group's reference if asked (first passing gate, or --promote-baseline),
    waiting for its lock no longer than ``left_s`` (what the gate's deadline leaves)."""
    if not (args.update_baseline or args.promote_baseline):
        return
    wait = min(LOCK_WAIT_S, left_s)
    try:
        if wait <= 0:
            raise LockTimeout("no time left before the gate's deadline_s to wait for the baseline's lock")
        written, note = baseline_store.record(args.baseline, report, promote=args.promote_baseline, lock_timeout_s=wait)
    except (OSError, LockTimeout) as exc:
        written, note = False, f"baseline not written: {exc}"
    report["baseline"]["updated"] = written
    report["baseline"]["update_note"] = note
    say(note)


def _finish(args: argparse.Namespace, report: dict[str, Any], left_s: float = LOCK_WAIT_S) -> int:
    from .gate import promote
    from .report import write_all

    if args.promote_baseline:
        report = promote(report)
    code = EXIT_PASS if report["verdict"] == "pass" else EXIT_FAIL
    report["exit_code"] = code
    _record_baseline(args, report, left_s)
    text = write_all(report, args.report)
    print(text, flush=True)
    where = Path(args.report) / "report.json"
    if code == EXIT_PASS:
        say(f"PASS ({len(report['checks'])} checks). Report: {where}")
    else:
        say(f"FAIL: {', '.join(report['failed_checks']) or 'no checks ran'}. Report: {where}")
    return code


def cmd_gate(args: argparse.Namespace) -> int:
    from .gate import Gate

    opts = _gate_options(args)
    say(
        f"gate: {opts.url} with {args.config}"
        + (" (API key from --api-key-file)" if args.api_key_file else "")
        + (" (API key from SGLANG_API_KEY)" if os.environ.get(API_KEY_ENV) and not args.api_key_file else "")
    )

    def finish(report: dict[str, Any], left_s: float) -> int:
        report["gate_process"] = _process_usage()
        return _finish(args, report, left_s)

    return asyncio.run(Gate(opts, say).run_then(finish))


def _process_usage() -> dict[str, float]:
    """The gate's own CPU seconds and peak memory: what it costs the machine it runs on (the
    controller, or the GPU host next to the server; benchmarks/rollout.py compares the two)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": round(ru.ru_utime + ru.ru_stime, 3), "max_rss_mb": round(ru.ru_maxrss / 1024, 1)}


def cmd_finalize(args: argparse.Namespace) -> int:
    from .gate import rejudge_logs

    report_file = Path(args.report) / "report.json"
    report = _json_file(str(report_file), "report", "--report")
    if not isinstance(report.get("checks"), list) or not isinstance(report.get("config"), dict):
        raise ConfigError(f"--report: {report_file} is not a gate report (no checks/config)")
    cfg = parse_config(report["config"], f"{report_file}: config")
    _check_logs(args.log)
    _check_baseline_flags(args)
    report = rejudge_logs(report, cfg, list(args.log), args.report)
    say(f"logs of the gate window: {report['checks'][-1]['message']}")
    return _finish(args, report)


def cmd_wait(args: argparse.Namespace) -> int:
    from .client import make_session
    from .phases import Measurer

    url = _url(args.url)
    if not (0 < args.timeout < float("inf")) or not (0 < args.interval < float("inf")):
        raise ConfigError("--timeout/--interval: must be finite numbers > 0")
    cfg = GateConfig(
        readiness=ReadinessConfig(
            timeout_s=args.timeout, interval_s=args.interval, request_timeout_s=min(30.0, args.timeout)
        )
    )

    async def run() -> bool:
        async with make_session() as session:
            r = await Measurer(session, url, cfg, say).readiness()
            if not r.ready:
                say(f"not ready within {args.timeout:g}s; last: {r.last_error}")
            return r.ready

    return EXIT_PASS if asyncio.run(run()) else EXIT_FAIL


def cmd_textfile(args: argparse.Namespace) -> int:
    try:
        return textfile.command(args, sys.stdin.read)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"textfile: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"gate": cmd_gate, "finalize": cmd_finalize, "wait": cmd_wait, "check-config": cmd_check_config,
                "textfile": cmd_textfile}  # fmt: skip
    try:
        _load_api_key(getattr(args, "api_key_file", None))
        return commands[args.command](args)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr, flush=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("gate: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a gate bug must still stop the rollout, readably
        if os.environ.get("GATE_DEBUG"):
            raise
        print(
            f"gate: internal error: {exc.__class__.__name__}: {exc} (set GATE_DEBUG=1 for a traceback)",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_FAIL
