"""Run the gate's load client (validate.load.run_load) on given prompts; print JSON.

The same spec file as _bench_serving_runner.py, so both clients send identical
requests; pinned to one core like it.

usage: python _gate_runner.py SPEC.json OUT.json
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from validate.client import make_session
from validate.load import run_load


async def _run(spec: dict) -> dict:
    prompts = spec["prompts"]
    async with make_session() as session:
        # Same shape as bench_serving: one warmup request, a 1 s pause, then the timed run.
        url = spec["url"] + "/generate"
        await run_load(session, url, prompts[:1], min(32, spec["output_len"]), label="warmup", deadline_s=600)
        await asyncio.sleep(1.0)
        lr = await run_load(
            session,
            url,
            prompts,
            spec["output_len"],
            label="bench",
            deadline_s=600,
            max_concurrency=spec.get("max_concurrency"),
            prewarm_url=spec["url"] + "/v1/models",
        )
    m = lr.metrics.to_dict()
    starts = [r.start_time for r in lr.results]
    m["start_spread_s"] = max(starts) - min(starts)
    m["duration"] = m.pop("duration_s")
    m["total_input_tokens"] = m.pop("total_input")
    m["total_output_tokens"] = m.pop("total_output")
    return {k: v for k, v in m.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    if spec.get("cpu") is not None:
        os.sched_setaffinity(0, {spec["cpu"]})
    t0 = time.perf_counter()
    out = asyncio.run(_run(spec))
    out["wall_s_including_warmup"] = time.perf_counter() - t0
    Path(sys.argv[2]).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
