"""Command line: ``python -m validate gate ...`` and ``python -m validate wait ...``.

Exit codes: 0 pass (or ready), 1 gate failed (or not ready in time), 2 bad config or
usage (the message names the field or flag). Bad input never shows a traceback.
The API key comes only from the SGLANG_API_KEY environment variable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .config import ConfigError, GateConfig, ReadinessConfig, load_config

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def say(msg: str) -> None:
    """Progress line on stdout (Ansible captures it), flushed at once."""
    print(f"[gate] {msg}", flush=True)


def _url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--url: must look like http://HOST:PORT (got {raw!r})")
    if parts.username or parts.password:
        raise ConfigError("--url: must not carry credentials; put the API key in SGLANG_API_KEY")
    try:
        parts.port  # noqa: B018  (raises on a bad port)
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m validate", description="Post-deploy gate for SGLang servers.")
    sub = p.add_subparsers(dest="command", required=True, metavar="{gate,wait}")
    g = sub.add_parser("gate", help="measure the server and pass/fail it against gate.yml")
    g.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    g.add_argument("--config", required=True, help="gate config YAML (see validate/README.md)")
    g.add_argument("--report", required=True, help="folder for report.json, summary.md, sweep.png")
    g.add_argument(
        "--log",
        action="append",
        default=[],
        metavar="FILE",
        help="server log to scan: a file, or docker:CONTAINER for its docker logs (repeatable)",
    )
    g.add_argument("--baseline", help="last passing report.json of this host group")
    g.add_argument("--update-baseline", action="store_true", help="on pass, write this report to --baseline")
    g.add_argument("--patch-record", help="the image's patches.json, copied into the report")
    g.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="free label (repeatable)")
    w = sub.add_parser("wait", help="wait until /health and /health_generate answer 200")
    w.add_argument("--url", required=True)
    w.add_argument("--timeout", type=float, default=900.0, help="seconds (default 900)")
    w.add_argument("--interval", type=float, default=5.0, help="seconds between progress lines (default 5)")
    return p


def _gate_options(args: argparse.Namespace) -> Any:
    from .gate import GateOptions

    url = _url(args.url)
    cfg = load_config(args.config)
    labels = _labels(args.label)
    for log in args.log:
        if log.startswith("docker:"):
            if not log[len("docker:") :].strip():
                raise ConfigError("--log: docker:NAME needs a container name (got 'docker:')")
            if not shutil.which("docker"):
                raise ConfigError(f"--log {log}: the docker CLI is not installed here")
        elif not Path(log).is_file():
            raise ConfigError(f"--log: file not found: {log} (or use docker:CONTAINER)")
    patch = _json_file(args.patch_record, "patch record", "--patch-record") if args.patch_record else None
    if args.update_baseline and not args.baseline:
        raise ConfigError("--update-baseline: needs --baseline FILE (where to write it)")
    baseline, note = None, ""
    if args.baseline:
        if Path(args.baseline).is_file():
            baseline = _json_file(args.baseline, "baseline", "--baseline")
            if baseline.get("verdict") != "pass":
                verdict = baseline.get("verdict")
                note = f"baseline {args.baseline} is not a passing report (verdict {verdict!r}): ignored"
                baseline = None
            else:
                note = f"compared with {args.baseline} ({baseline.get('started_at', 'unknown time')})"
        else:
            note = f"no baseline yet at {args.baseline}: no regression check this run"
    try:
        Path(args.report).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--report: cannot create {args.report}: {exc.strerror or exc}") from None
    return GateOptions(
        url=url,
        config=cfg,
        config_path=args.config,
        logs=list(args.log),
        baseline=baseline,
        baseline_path=args.baseline,
        baseline_note=note,
        patch_record=patch,
        labels=labels,
        report_dir=args.report,
    )


def cmd_gate(args: argparse.Namespace) -> int:
    from .gate import Gate
    from .report import write_all, write_json_atomic

    opts = _gate_options(args)
    say(
        f"gate: {opts.url} with {args.config}"
        + (" (API key from SGLANG_API_KEY)" if os.environ.get("SGLANG_API_KEY") else "")
    )
    report = asyncio.run(Gate(opts, say).run())
    code = EXIT_PASS if report["verdict"] == "pass" else EXIT_FAIL
    report["exit_code"] = code
    if args.update_baseline:
        if code == EXIT_PASS:
            write_json_atomic(args.baseline, report)
            report["baseline"]["updated"] = True
            say(f"baseline updated: {args.baseline}")
        else:
            report["baseline"]["updated"] = False
            say("baseline NOT updated: the gate failed")
    text = write_all(report, args.report)
    print(text, flush=True)
    if code == EXIT_PASS:
        say(f"PASS ({len(report['checks'])} checks). Report: {Path(args.report) / 'report.json'}")
    else:
        say(
            f"FAIL: {', '.join(report['failed_checks']) or 'no checks ran'}. Report: "
            f"{Path(args.report) / 'report.json'}"
        )
    return code


def cmd_wait(args: argparse.Namespace) -> int:
    from .client import make_session
    from .gate import Gate, GateOptions

    url = _url(args.url)
    if args.timeout <= 0 or args.interval <= 0:
        raise ConfigError("--timeout/--interval: must be numbers > 0")
    cfg = GateConfig(
        readiness=ReadinessConfig(
            timeout_s=args.timeout, interval_s=args.interval, request_timeout_s=min(30.0, args.timeout)
        )
    )
    gate = Gate(GateOptions(url=url, config=cfg, config_path="(wait)"), say)

    async def run() -> bool:
        async with make_session() as session:
            return await gate.readiness(session)

    return EXIT_PASS if asyncio.run(run()) else EXIT_FAIL


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return cmd_gate(args) if args.command == "gate" else cmd_wait(args)
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
