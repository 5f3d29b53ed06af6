"""Helpers: gate configs derived from validate/configs/test-engine.yml, and running the CLI."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from validate.cli import main

REPO = Path(__file__).resolve().parents[2]
TEST_ENGINE_YML = REPO / "validate" / "configs" / "test-engine.yml"

# Phase switches for fast tests: each test turns on only what it needs.
ONLY_READINESS = {
    "single_stream": {"enabled": False},
    "throughput": {"enabled": False},
    "stability": {"enabled": False},
}


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def write_config(tmp: Path, overrides: dict[str, Any] | None = None, name: str = "gate.yml") -> Path:
    data = yaml.safe_load(TEST_ENGINE_YML.read_text())
    path = tmp / name
    path.write_text(yaml.safe_dump(merge(data, overrides or {})))
    return path


def run_gate(capsys: Any, *args: str) -> tuple[int, str, str]:
    """Run the real CLI in-process; returns (exit code, stdout, stderr)."""
    code = main(list(args))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def load_report(report_dir: Path) -> dict[str, Any]:
    return json.loads((report_dir / "report.json").read_text())


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    """The report's one check of that name (none, or two, is a failure: a check is judged once)."""
    found = [c for c in report["checks"] if c["name"] == name]
    assert len(found) == 1, f"{len(found)} checks {name!r}; checks: {[c['name'] for c in report['checks']]}"
    return found[0]


def stub_docker(tmp_path: Path, monkeypatch: Any, body: str) -> Path:
    """A `docker` on PATH that records its argv (one per line, returned file) and answers as the
    shell ``body`` says. The thing under test is how the gate calls docker and keeps its output,
    not docker."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    argv_file = tmp_path / "argv"
    stub = bin_dir / "docker"
    stub.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv_file}\n{body}\n')
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return argv_file


def gate_in_process(
    url: str, tmp: Path, config: dict[str, Any], name: str, **opts: Any
) -> tuple[dict[str, Any], list[str]]:
    """``Gate.run`` in this process on ``config`` (a dict); returns (report, every line it said)."""
    import asyncio

    from validate.config import parse_config
    from validate.gate import Gate, GateOptions

    said: list[str] = []
    o = GateOptions(url=url, config=parse_config(config), config_path=name, report_dir=str(tmp), **opts)
    return asyncio.run(Gate(o, said.append).run()), said


def serve_app(loop: Any, app: Any) -> tuple[Any, str]:
    """Start an aiohttp ``app`` on a free loopback port with ``loop``; returns (runner, base URL).
    The stub servers of the client tests: the code under test is the client, never the server."""
    from aiohttp import web

    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


@contextmanager
def app_in_thread(app: Any) -> Iterator[str]:
    """A stub aiohttp ``app`` served from its own event loop in a daemon thread, for tests whose client
    runs ``asyncio.run`` in the test's thread; yields the base URL and stops the loop after."""
    import asyncio
    import threading

    loop = asyncio.new_event_loop()
    _, base = serve_app(loop, app)
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        yield base
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
