#!/usr/bin/env python3
"""Docker HEALTHCHECK: GET /health on the port the server was actually started with.

The roles pass --host/--port on the command line, so a fixed port in the Dockerfile would
lie; read them from PID 1's argv (stdlib only, runs in both the SGLang and the test-engine
image). /health bypasses --api-key in SGLang, so no secret is needed here.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

DEFAULT_PORT = 30000


def server_address(argv: list[str]) -> tuple[str, int]:
    host, port = "127.0.0.1", DEFAULT_PORT
    for i, arg in enumerate(argv):
        for flag in ("--port", "--host"):
            value = None
            if arg == flag and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
            if value is None:
                continue
            if flag == "--port":
                port = int(value)
            elif value not in ("0.0.0.0", "::", ""):
                host = value
    return host, port


def main() -> int:
    try:
        argv = Path("/proc/1/cmdline").read_bytes().decode().split("\0")
    except OSError:
        argv = []
    host, port = server_address(argv)
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/health"
    try:
        with urllib.request.urlopen(url, timeout=8) as resp:
            return 0 if resp.status == 200 else 1
    except Exception as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
