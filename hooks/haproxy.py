#!/usr/bin/env python3
"""Traffic hook for HAProxy: take a host out of rotation (drain) or put it back (undrain).

Wired as ``sglang_server_drain_command`` / ``sglang_server_undrain_command`` (the rollout runs it
on the controller with ``SGLANG_DEPLOY_HOOK`` = drain | undrain and ``SGLANG_DEPLOY_HOST`` = the
inventory name; roles/sglang_server/README.md). It speaks HAProxy's runtime API (``stats socket``
with ``level admin``, over TCP or a Unix socket) and needs nothing but Python's standard library:

    argv: [python3, hooks/haproxy.py, --api, lb1:9999, --backend, sglang]

- drain: ``set server <backend>/<host> state drain`` (no new requests; those in flight go on),
  then wait until the server has no session left (``show stat``'s ``scur``), at most --wait-s.
  A drain that cannot be confirmed fails the hook, and with it the host: the rollout never
  replaces a server that may still carry requests.
- undrain: ``set server <backend>/<host> state ready``; HAProxy's own health check still decides
  when it takes requests again.

The HAProxy server name is the inventory name unless --server-name maps it (``host=name,...``).
``--log FILE`` appends one JSON line per call (started, time done, host, action, sessions left): the record a
load-balancer test checks a client's traffic against (molecule/resources/lb/client.py).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import socket
import sys
import time
from pathlib import Path


def runtime_api(address: str, command: str, timeout_s: float = 5.0) -> str:
    """Send one command to the runtime API (``host:port`` or a socket path) and return its answer."""
    if "/" in address:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target: str | tuple[str, int] = address
    else:
        host, _, port = address.rpartition(":")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        target = (host or "127.0.0.1", int(port))
    with sock:
        sock.settimeout(timeout_s)
        sock.connect(target)
        sock.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def stat_rows(address: str) -> list[dict[str, str]]:
    """``show stat`` as rows keyed by HAProxy's column names (pxname, svname, status, scur ...)."""
    return list(csv.DictReader(io.StringIO(runtime_api(address, "show stat").lstrip("# "))))


def server_stat(address: str, backend: str, server: str) -> dict[str, str]:
    """The ``show stat`` row of one server; KeyError when HAProxy has none of that name."""
    for row in stat_rows(address):
        if row.get("pxname") == backend and row.get("svname") == server:
            return row
    raise KeyError(f"HAProxy has no server {backend}/{server}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--api", required=True, help="runtime API: host:port or the stats socket's path")
    ap.add_argument("--backend", required=True, help="the HAProxy backend of the SGLang servers")
    ap.add_argument("--server-name", default="", help="host=haproxy-server-name,... when the names differ")
    ap.add_argument("--wait-s", type=float, default=60.0, help="drain: longest wait for sessions to end")
    ap.add_argument("--log", type=Path, help="append one JSON line per call here")
    ap.add_argument("action", nargs="?", default=os.environ.get("SGLANG_DEPLOY_HOOK", ""))
    ap.add_argument("host", nargs="?", default=os.environ.get("SGLANG_DEPLOY_HOST", ""))
    args = ap.parse_args(argv)
    if args.action not in ("drain", "undrain") or not args.host:
        ap.error("action must be drain or undrain, and the host named (or SGLANG_DEPLOY_HOOK / SGLANG_DEPLOY_HOST)")
    names = dict(pair.split("=", 1) for pair in args.server_name.split(",") if "=" in pair)
    server = names.get(args.host, args.host)
    target = f"{args.backend}/{server}"
    state = "drain" if args.action == "drain" else "ready"
    started = time.time()
    try:
        answer = runtime_api(args.api, f"set server {target} state {state}").strip()
        if answer:  # HAProxy answers nothing on success, a reason otherwise
            raise RuntimeError(answer)
        left = int(server_stat(args.api, args.backend, server).get("scur") or 0)
        deadline = time.monotonic() + args.wait_s
        while args.action == "drain" and left > 0 and time.monotonic() < deadline:
            time.sleep(0.2)
            left = int(server_stat(args.api, args.backend, server).get("scur") or 0)
    except (OSError, RuntimeError, KeyError, ValueError) as exc:
        print(f"haproxy hook: {args.action} {target} via {args.api} failed: {exc}", file=sys.stderr)
        return 1
    if args.log:
        done = time.time()
        entry = {"started": started, "time": done, "host": args.host, "action": args.action, "sessions_left": left}
        with args.log.open("a") as f:
            f.write(json.dumps(entry) + "\n")
    if args.action == "drain" and left > 0:
        print(f"haproxy hook: {target} still has {left} session(s) after {args.wait_s:g}s", file=sys.stderr)
        return 1
    print(f"haproxy hook: {target} {'drained' if args.action == 'drain' else 'back in rotation'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
