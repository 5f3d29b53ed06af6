"""All-reduce bus bandwidth of this host's GPUs, as nccl-tests defines it (shipped in the serving image).

Why: on PCIe-linked cards (8x RTX PRO 6000) P2P off, a wrong NCCL_P2P_LEVEL, a card on the
wrong root complex or a flaky link show up as slow or hung tensor-parallel serving that the
gate then blames on SGLang. The rollout runs this in a container from the serving image with
the server's NCCL variables, before the server starts, and compares the bus bandwidth of the
largest size with the GPU profile's floor.

One process per GPU (torch.multiprocessing, NCCL), sizes 8 MB to 1 GB (doubling), a bounded
number of iterations per size and a deadline for the whole run. Bus bandwidth as nccl-tests:
algbw = bytes / time, busbw = algbw * 2 (n - 1) / n. The last stdout line is one JSON object
(``result`` ok / skipped / failed, per-size figures) for the role; the lines before it are a
table for people. With fewer than two GPUs there is no all-reduce: it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

MB = 1024 * 1024


def sizes(min_mb: int, max_mb: int) -> list[int]:
    """Byte sizes from min_mb to max_mb MiB, doubling (8 MB .. 1 GB by default)."""
    out, s = [], min_mb * MB
    while s <= max_mb * MB:
        out.append(s)
        s *= 2
    return out


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one all-reduce of ``nbytes`` over ``world`` ranks (nccl-tests)."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world - 1) / world


def _worker(rank: int, world: int, args: argparse.Namespace, port: int, out: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=__import__("datetime").timedelta(seconds=args.timeout_s),
    )
    deadline = time.monotonic() + args.timeout_s
    rows = []
    for nbytes in sizes(args.min_mb, args.max_mb):
        if time.monotonic() > deadline:
            break
        x = torch.ones(nbytes // 2, dtype=torch.bfloat16, device="cuda")
        for _ in range(args.warmup):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1000 / args.iters
        algbw, busbw = bus_bandwidth(nbytes, seconds, world)
        rows.append(
            {
                "bytes": nbytes,
                "time_us": round(seconds * 1e6, 1),
                "algbw_gbps": round(algbw, 2),
                "busbw_gbps": round(busbw, 2),
            }
        )
        del x
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torch.multiprocessing as mp

    world = torch.cuda.device_count() if torch.cuda.is_available() else 0
    env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    if world < 2:
        return {
            "result": "skipped",
            "gpus": world,
            "reason": f"{world} GPU(s): no all-reduce to measure",
            "nccl_env": env,
        }
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=_worker, args=(r, world, args, port, queue)) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + args.timeout_s + 60
    for p in procs:
        p.join(max(1.0, deadline - time.monotonic()))
    hung = [i for i, p in enumerate(procs) if p.is_alive()]
    for i in hung:
        procs[i].kill()
    if hung or any(p.exitcode for p in procs):
        codes = {i: p.exitcode for i, p in enumerate(procs)}
        return {"result": "failed", "gpus": world, "reason": f"ranks hung {hung} or failed {codes}", "nccl_env": env}
    rows = queue.get(timeout=10)
    return {
        "result": "ok",
        "gpus": world,
        "sizes": rows,
        "max_busbw_gbps": max(r["busbw_gbps"] for r in rows),
        "largest": rows[-1],
        "nccl_env": env,
    }


def table(report: dict[str, Any]) -> str:
    """nccl-tests-like lines for people."""
    if report["result"] != "ok":
        return f"# all-reduce: {report['result']}: {report.get('reason', '')}"
    lines = [
        f"# all-reduce over {report['gpus']} GPUs (bf16, sum)",
        "#       size   time(us)  algbw(GB/s)  busbw(GB/s)",
    ]
    lines += [
        f"{r['bytes']:>12} {r['time_us']:>10} {r['algbw_gbps']:>12} {r['busbw_gbps']:>12}" for r in report["sizes"]
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-mb", type=int, default=8)
    ap.add_argument("--max-mb", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--timeout-s", type=float, default=300.0, help="deadline of the whole measurement")
    args = ap.parse_args(argv)
    report = run(args)
    print(table(report))
    print(json.dumps(report), flush=True)
    return 0 if report["result"] in ("ok", "skipped") else 1


if __name__ == "__main__":
    sys.exit(main())
