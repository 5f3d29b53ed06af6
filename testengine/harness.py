"""Start the SGLang-compatible TEST ENGINE as a subprocess on 127.0.0.1 (tests, benchmarks).

Only the standard library, so tests and benchmarks of any part can use it; it binds
to loopback only and ``stop()`` ends exactly the process it started.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]  # the folder that holds testengine/


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Engine:
    """A running test engine: its URL, log file and process."""

    url: str
    port: int
    log: Path
    proc: subprocess.Popen[bytes]
    cache_dir: Path
    args: list[str] = field(default_factory=list)

    def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"test engine exited early:\n{self.log.read_text()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"test engine not ready in {timeout}s:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_engine(
    tmp: Path,
    *args: str,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    cache_dir: Path | None = None,
    wait: bool = True,
) -> Engine:
    port = free_port()
    cache = cache_dir or tmp / "fi-cache"
    log = tmp / f"engine-{port}.log"
    cmd = [
        python,
        "-m",
        "testengine",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--engine-cache-dir",
        str(cache),
        "--engine-cold-start-s",
        "0",
        *args,
    ]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env=full_env)
    eng = Engine(url=f"http://127.0.0.1:{port}", port=port, log=log, proc=proc, cache_dir=cache, args=list(args))
    if wait:
        try:
            eng.wait_ready()
        except Exception:
            eng.stop()
            raise
    return eng


class EngineSet:
    """Engines started in one folder, all stopped by ``stop_all`` (the body of a test fixture)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.started: list[Engine] = []

    def __call__(self, *args: str, **kw: Any) -> Engine:
        eng = start_engine(self.tmp, *args, **kw)
        self.started.append(eng)
        return eng

    def stop_all(self) -> None:
        for eng in self.started:
            eng.stop()
