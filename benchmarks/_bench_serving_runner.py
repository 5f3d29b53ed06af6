"""Run ``sglang.bench_serving``'s own ``benchmark()`` (unmodified) on given prompts; print JSON.

Runs inside the bench-serving venv (see _bench_serving_env.py), as its own process
pinned to one core. Only the import path is adjusted: ``sglang/__init__.py`` and
``sglang.srt.disaggregation.utils`` would import torch, so the packages are
registered without running their __init__ and FAKE_BOOTSTRAP_HOST is supplied. The
request function (``async_request_sglang_generate``), the scheduling and
``calculate_metrics`` are bench_serving's code as released. Its tokenizer is used
only to re-count generated text ("retokenized" figures, not compared here), so a
whitespace splitter stands in for the model's tokenizer, which CI cannot download.

usage: python _bench_serving_runner.py SPEC.json OUT.json
"""

import asyncio
import json
import os
import sys
import time
import types


def _import_bench_serving():
    site = next(p for p in sys.path if p.endswith("site-packages"))
    for name in ("sglang", "sglang.srt", "sglang.srt.utils", "sglang.srt.disaggregation"):
        mod = types.ModuleType(name)
        mod.__path__ = [os.path.join(site, *name.split("."))]
        sys.modules[name] = mod
    stub = types.ModuleType("sglang.srt.disaggregation.utils")
    stub.FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # the value SGLang defines; unused by this workload
    sys.modules[stub.__name__] = stub
    import sglang.benchmark.serving as serving

    return serving


class _SplitTokenizer:
    vocab_size = 32000

    def encode(self, text, add_special_tokens=False):
        return text.split()


def main() -> int:
    spec_path, out_path = sys.argv[1], sys.argv[2]  # sys.argv is reused for bench_serving's CLI below
    with open(spec_path) as f:
        spec = json.load(f)
    if spec.get("cpu") is not None:
        os.sched_setaffinity(0, {spec["cpu"]})
    serving = _import_bench_serving()
    from sglang.benchmark.datasets.common import DatasetRow

    captured = []
    serving.run_benchmark = captured.append  # take the CLI's fully defaulted args, run nothing
    sys.argv = [
        "bench_serving",
        "--backend",
        "sglang",
        "--base-url",
        spec["url"],
        "--dataset-name",
        "random-ids",
        "--num-prompts",
        str(len(spec["prompts"])),
        "--random-input-len",
        str(spec["input_len"]),
        "--random-output-len",
        str(spec["output_len"]),
        "--random-range-ratio",
        "1.0",
        "--request-rate",
        "inf",
        "--disable-tqdm",
        "--warmup-requests",
        "1",
        "--output-file",
        spec["jsonl"],
    ] + (["--max-concurrency", str(spec["max_concurrency"])] if spec.get("max_concurrency") else [])
    serving.cli_main()
    args = captured[0]
    serving.set_global_args(args)
    # Keep bench_serving's own per-request records so the gate's metric code can be run
    # on exactly the data bench_serving's calculate_metrics saw (a definitions check).
    records = []
    original = serving.ASYNC_REQUEST_FUNCS["sglang"]

    async def recording(request_func_input, pbar=None):
        out = await original(request_func_input=request_func_input, pbar=pbar)
        records.append(out)
        return out

    serving.ASYNC_REQUEST_FUNCS["sglang"] = recording
    rows = [DatasetRow(prompt=ids, prompt_len=len(ids), output_len=spec["output_len"]) for ids in spec["prompts"]]
    t0 = time.perf_counter()
    result = asyncio.run(
        serving.benchmark(
            backend="sglang",
            api_url=spec["url"] + "/generate",
            base_url=spec["url"],
            model_id="test-engine",
            tokenizer=_SplitTokenizer(),
            input_requests=rows,
            request_rate=float("inf"),
            max_concurrency=spec.get("max_concurrency"),
            disable_tqdm=True,
            lora_names=[],
            lora_request_distribution=None,
            lora_zipf_alpha=None,
            extra_request_body={},
            profile=False,
            warmup_requests=1,
        )
    )
    wall = time.perf_counter() - t0
    keep = {k: v for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    keep["wall_s_including_warmup"] = wall
    measured = records[1:]  # the first is the warmup request
    keep["records"] = [
        {
            "success": r.success,
            "prompt_len": r.prompt_len,
            "output_len": r.output_len,
            "start_time": r.start_time,
            "latency": r.latency,
            "ttft": r.ttft,
            "itl": r.itl,
            "error": r.error[:200],
        }
        for r in measured
    ]
    with open(out_path, "w") as f:
        json.dump(keep, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
