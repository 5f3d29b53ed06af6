#!/usr/bin/env python3
"""The fleet scenario's client: a steady, bounded stream of requests through the load balancer for
as long as the rollouts run, and HAProxy's view of each server sampled beside it.

Each of --workers sends one small /generate request at a time (with the fleet's API key), pausing
--pause-s between them, until --stop-file appears. Written to --out:
- requests.jsonl: one line per request (start, seconds, HTTP status, served by, error);
- states.jsonl: every --sample-s, each server's ``show stat`` status (UP, DRAIN, DOWN, MAINT ...);
- summary.json: requests sent, failed, served per host.
(The fleet scenario's test that judged them against the hooks' log is not in the scenario yet.)
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hooks"))
from haproxy import stat_rows  # the production hook's own runtime API reader


def worker(url: str, key: str, pause_s: float, stop: threading.Event, out: list[dict]) -> None:
    body = json.dumps({"text": "Count from 1 to 10", "sampling_params": {"max_new_tokens": 8}}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    while not stop.is_set():
        t0 = time.time()
        row = {"start": t0, "status": None, "served_by": "", "error": ""}
        try:
            req = urllib.request.Request(url + "/generate", data=body, headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=60) as resp:
                payload = json.loads(resp.read())
                row["status"] = resp.status
                row["served_by"] = resp.headers.get("X-Served-By", "")
                if not payload.get("text"):
                    row["error"] = "empty answer"
        except urllib.error.HTTPError as exc:
            row["status"], row["error"] = exc.code, exc.read()[:200].decode(errors="replace")
        except (OSError, ValueError) as exc:
            row["error"] = f"{exc.__class__.__name__}: {exc}"[:200]
        row["seconds"] = round(time.time() - t0, 3)
        out.append(row)
        stop.wait(pause_s)


def sampler(api: str, backend: str, every_s: float, stop: threading.Event, out: list[dict]) -> None:
    while not stop.is_set():
        row: dict = {"time": time.time()}
        try:
            for stat in stat_rows(api):
                if stat.get("pxname") == backend and stat.get("svname") not in ("FRONTEND", "BACKEND"):
                    row[stat["svname"]] = stat.get("status", "")
        except OSError as exc:
            row["error"] = str(exc)
        out.append(row)
        stop.wait(every_s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--api", required=True)
    ap.add_argument("--backend", default="sglang")
    ap.add_argument("--key", default="")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pause-s", type=float, default=0.05)
    ap.add_argument("--sample-s", type=float, default=0.25)
    ap.add_argument("--stop-file", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-s", type=float, default=3600.0, help="bounded: stops by itself after this")
    args = ap.parse_args()
    stop = threading.Event()
    requests: list[dict] = []
    states: list[dict] = []
    threads = [
        threading.Thread(target=worker, args=(args.url, args.key, args.pause_s, stop, requests))
        for _ in range(args.workers)
    ]
    threads.append(threading.Thread(target=sampler, args=(args.api, args.backend, args.sample_s, stop, states)))
    for t in threads:
        t.start()
    t0 = time.monotonic()
    while not args.stop_file.exists() and time.monotonic() - t0 < args.max_s:
        time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    (args.out / "states.jsonl").write_text("".join(json.dumps(s) + "\n" for s in states))
    failed = [r for r in requests if r["status"] != 200 or r["error"]]
    summary = {
        "requests": len(requests),
        "failed": len(failed),
        "first_failures": failed[:5],
        "served_by": dict(Counter(r["served_by"] for r in requests if not r["error"])),
        "seconds": round(time.monotonic() - t0, 1),
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
