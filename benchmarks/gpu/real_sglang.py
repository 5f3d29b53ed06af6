"""Real SGLang 0.5.17 on the lent GPU (H200 or H100): the cache role's layout, the gate and bench_serving.

Runs on the device machine (``real_sglang.sh`` installs the carry set first). The server is
started with exactly the argv and cache environment that roles/ render for an sm_90 host
(``render.yml`` -> ``.device/carry/rendered-{serve,overflow}.json``); the cache volume is a
directory behind the mount path, as Docker would bind it. Stages, each usable alone:

``cache``
    Cold start on an empty volume, then a warm start with only the volume kept (what a new
    container sees): start times, the first greedy and first sampled request, and which cache
    folders each start wrote, inside the volume and outside it (outside = rebuilt on every
    container start). Records the SSE transcripts and the cold start log as fixtures.
``compare``
    The gate (gate-h200.yml: reference shape, 3 repeats) and ``sglang.bench_serving --backend
    sglang --tokenize-prompt`` (random-ids, range ratio 1.0, same shape), alternated on one
    server; per metric the median ratio gate/bench_serving and both spreads.
``overflow``
    The server restarted with the ``overflow`` rendering (4 queued, 8 running): the gate must
    fail it naming aborted requests; the abort transcripts are recorded as fixtures.
``seed``
    A start on a cache volume seeded from another start's archive (roles/flashinfer_cache).
``trust-accuracy``
    The accuracy check on real SGLang (docs/real-sglang-h200.md, "Accuracy"): the random-weight
    model gated with GLM-5's floor (inventory/example) must fail it, its true negative; with the
    kit's own floor (gate-h200.yml) the group's first gate records, the next compares; then one
    whole gate-h200.yml gate (every phase, the single stream on /generate). Records one question's
    request and answer as a fixture.
``trust-healthy`` / ``trust-faults`` / ``trust-pair`` / ``trust-answers``
    What a PASS means (docs/real-sglang-h200.md, sections 5 and 6): ``--gates N`` gates in a row
    on one healthy server against the group baseline (the first passing one writes it), then on
    the ``slow`` rendering (``--max-running-requests 192``) and on other weights; ``trust-pair``
    runs the healthy and the slow series on one card in one call, so the baseline and the
    regression are measured on the same machine. The model is the one the roles rendered:
    ``render.yml -e rs_model_size={0.9b,8b}`` (the 8 B is GPU-bound, the 0.9 B CPU-bound).

Everything lands in ``$WORK`` (default /tmp/rs); ``results.json`` and ``fixtures.tar.gz`` are
copied to ``$OUT`` for the device tool to bring back.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import requests

from validate.metrics import Spread  # the gate's own definition: (max - min) / median

ROOT = Path(__file__).resolve().parents[2]
CARRY = ROOT / ".device" / "carry"
WORK = Path(os.environ.get("RS_WORK", "/tmp/rs"))
OUT = Path(os.environ.get("OUT", "/tmp/out"))
URL = "http://127.0.0.1:30000"


def _rendered_model() -> tuple[Path, str]:
    """The model path and served name the roles rendered (render.yml, ``-e rs_model_size=...``)."""
    try:
        cmd = json.loads((CARRY / "rendered-serve.json").read_text())["command"]
    except (OSError, ValueError, KeyError):
        return Path("/models/random-llama-0.9b"), "random-llama-0.9b"
    return Path(cmd[cmd.index("--model-path") + 1]), cmd[cmd.index("--served-model-name") + 1]


MODEL_DIR, SERVED = _rendered_model()
GATE_CONFIG = ROOT / "benchmarks" / "gpu" / "gate-h200.yml"
# Metrics compared between the gate and bench_serving (same names in both reports).
COMPARED = [
    "total_throughput",
    "output_throughput",
    "request_throughput",
    "max_output_tokens_per_s",
    "concurrency",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "mean_e2e_latency_ms",
    "median_e2e_latency_ms",
    "p99_e2e_latency_ms",
]
# launch_server and the processes it forks ("sglang::scheduler", ...), never this script.
SERVER_PATTERN = "sglang.launch_server|sglang::"
RESULTS: dict[str, Any] = {}
STARTED: list[Server] = []  # stopped on any failure, so no server outlives the run


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def save_results() -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "results.json").write_text(json.dumps(RESULTS, indent=2, default=str) + "\n")


# --------------------------------------------------------------------------- the server
class Server:
    """launch_server from one rendering, its log in a file, the volume behind the mount path."""

    def __init__(self, rendering: str, log_name: str, model: Path | None = None) -> None:
        self.spec = json.loads((CARRY / f"rendered-{rendering}.json").read_text())
        if model is not None:  # the same rendering serving other weights (the reference-answers check)
            cmd = self.spec["command"]
            cmd[cmd.index("--model-path") + 1] = str(model)
        self.log_path = WORK / log_name
        self.proc: subprocess.Popen[bytes] | None = None
        mount = self.spec["mounts"][0]
        self.volume = WORK / "volumes" / mount["source"]
        self.target = Path(mount["target"])

    def mount(self) -> None:
        """Bind the volume at the mount path (a symlink: no Docker here)."""
        self.volume.mkdir(parents=True, exist_ok=True)
        if self.target.is_symlink():
            self.target.unlink()
        elif self.target.exists():
            self.target.rename(self.target.with_name(self.target.name + f".moved-{int(time.time())}"))
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.target.symlink_to(self.volume)

    def start(self) -> None:
        self.mount()
        env = dict(os.environ)
        env.update(self.spec["env"])
        env["HOME"] = "/root"
        argv = [
            sys.executable if self.spec["command"][0] == "python3" else self.spec["command"][0],
            *self.spec["command"][1:],
        ]
        if os.environ.get("RS_SERVER_PREFIX"):  # a CPU check of this script runs the test engine instead
            argv = os.environ["RS_SERVER_PREFIX"].split() + self.spec["command"][3:]
        log(f"start: {' '.join(argv)}")
        self.log_file = self.log_path.open("ab")
        self.started = time.monotonic()
        STARTED.append(self)
        self.proc = subprocess.Popen(
            argv, stdout=self.log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def wait_ready(self, timeout_s: float = 480) -> float:
        """Seconds from start to the first 200 on /health (a 1-token generation on SGLang)."""
        assert self.proc is not None
        last = 0.0
        while True:
            waited = time.monotonic() - self.started
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {tail(self.log_path)}")
            if waited > timeout_s:
                raise RuntimeError(f"server not ready after {timeout_s} s: {tail(self.log_path)}")
            try:
                if requests.get(URL + "/health", timeout=5).status_code == 200:
                    return round(waited, 1)
            except requests.RequestException:
                pass
            if waited - last >= 15:
                last = waited
                log(f"  waiting for /health: {waited:.0f} s; log: {tail(self.log_path, 1)[:160]}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        # launch_server's scheduler and detokenizer are children; make sure nothing holds the GPU.
        subprocess.run(["pkill", "-9", "-f", SERVER_PATTERN], check=False)
        time.sleep(2)
        self.log_file.close()


def tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# --------------------------------------------------------------------------- caches
SKIP_DIRS = ("/tmp/site", "/proc", "/sys")


def files_under(roots: list[Path], skip: list[Path]) -> dict[str, int]:
    """path -> size for every file under roots (symlinks not followed), skipping some trees."""
    out: dict[str, int] = {}
    skipped = [str(s) for s in skip] + list(SKIP_DIRS)
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            if any(dirpath == s or dirpath.startswith(s + "/") for s in skipped):
                dirnames[:] = []
                continue
            for name in filenames:
                p = os.path.join(dirpath, name)
                with contextlib.suppress(OSError):
                    out[p] = os.lstat(p).st_size
    return out


def outside_roots() -> list[Path]:
    """Where a start could write outside the volume: a container's own layer would lose these."""
    return [Path("/root"), Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")]


def group(paths: dict[str, int], base: Path, depth: int) -> dict[str, dict[str, int]]:
    """Files and bytes per folder, ``depth`` levels below base."""
    out: dict[str, dict[str, int]] = {}
    for p, size in paths.items():
        rel = Path(p).relative_to(base).parts if Path(p).is_relative_to(base) else Path(p).parts[1:]
        key = "/".join(rel[:depth]) if len(rel) > depth else "/".join(rel[:-1]) or "."
        slot = out.setdefault(key, {"files": 0, "bytes": 0})
        slot["files"] += 1
        slot["bytes"] += size
    return dict(sorted(out.items()))


def snapshot(server: Server) -> tuple[dict[str, int], dict[str, int]]:
    inside = files_under([server.volume], [])
    outside = files_under(outside_roots(), [WORK, server.target, ROOT, OUT])
    return inside, outside


def first_requests() -> dict[str, float]:
    """The first greedy and the first sampled request (sampling builds FlashInfer's module)."""
    times = {}
    for name, params in (("greedy", {"temperature": 0.0}), ("sampled", {"temperature": 0.8, "top_p": 0.9})):
        body = {"text": "Count from 1 to 100", "sampling_params": {"max_new_tokens": 8, **params}}
        start = time.monotonic()
        r = requests.post(URL + "/generate", json=body, timeout=600)
        times[f"first_{name}_s"] = round(time.monotonic() - start, 3)
        times[f"first_{name}_status"] = r.status_code
    return times


def record_fixtures(dest: Path, served: str) -> dict[str, Any]:
    """Byte-for-byte answers of the endpoints the gate and the test engine speak."""
    dest.mkdir(parents=True, exist_ok=True)
    prompt = "Count from 1 to 100"
    streams = {
        "generate_text.sse": (
            "/generate",
            {"text": prompt, "stream": True, "sampling_params": {"max_new_tokens": 12, "temperature": 0.0}},
        ),
        "generate_input_ids.sse": (
            "/generate",
            {
                "input_ids": list(range(100, 132)),
                "stream": True,
                "sampling_params": {"max_new_tokens": 12, "temperature": 0.0, "ignore_eos": True},
            },
        ),
        "completions.sse": (
            "/v1/completions",
            {
                "model": served,
                "prompt": prompt,
                "max_tokens": 12,
                "temperature": 0.0,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ),
        "chat_completions.sse": (
            "/v1/chat/completions",
            {
                "model": served,
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 12,
                "temperature": 0.0,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ),
    }
    meta: dict[str, Any] = {}
    for name, (path, body) in streams.items():
        r = requests.post(URL + path, json=body, stream=True, timeout=120)
        data = b"".join(r.iter_content(chunk_size=None))
        (dest / name).write_bytes(data)
        meta[name] = {
            "path": path,
            "request": body,
            "status": r.status_code,
            "content_type": r.headers.get("content-type", ""),
        }
    for name, path in (
        ("get_server_info.json", "/get_server_info"),
        ("get_model_info.json", "/get_model_info"),
        ("v1_models.json", "/v1/models"),
        ("metrics.txt", "/metrics"),
    ):
        r = requests.get(URL + path, timeout=30)
        (dest / name).write_bytes(r.content)
        meta[name] = {"path": path, "status": r.status_code}
    (dest / "requests.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def stage_cache() -> None:
    res: dict[str, Any] = {}
    RESULTS["cache"] = res
    server = Server("serve", "server-cold.log")
    if server.volume.exists():
        shutil.rmtree(server.volume)
    server.mount()
    _in0, out0 = snapshot(server)
    server.start()
    res["cold_ready_s"] = server.wait_ready()
    log(f"cold start ready in {res['cold_ready_s']} s")
    res["cold"] = first_requests()
    log(f"cold first requests: {res['cold']}")
    res["fixtures"] = record_fixtures(
        WORK / "fixtures", server.spec["command"][server.spec["command"].index("--served-model-name") + 1]
    )
    server.stop()
    in1, out1 = snapshot(server)
    new_out = {p: s for p, s in out1.items() if p not in out0}
    res["cold_written_inside_volume"] = group(in1, server.volume, 2)
    res["cold_written_outside_volume"] = group(new_out, Path("/"), 3)
    # A new container keeps only the volume: drop what the cold start wrote anywhere else.
    for p in new_out:
        Path(p).unlink(missing_ok=True)
    shutil.copy(server.log_path, WORK / "fixtures" / "server_cold_start.log")

    server = Server("serve", "server-warm.log")
    server.start()
    res["warm_ready_s"] = server.wait_ready()
    log(f"warm start ready in {res['warm_ready_s']} s")
    res["warm"] = first_requests()
    log(f"warm first requests: {res['warm']}")
    server.stop()
    in2, out2 = snapshot(server)
    res["warm_new_inside_volume"] = group({p: s for p, s in in2.items() if p not in in1}, server.volume, 2)
    res["warm_rewritten_outside_volume"] = group({p: s for p, s in out2.items() if p not in out0}, Path("/"), 3)
    res["volume_files"] = len(in2)
    res["volume_bytes"] = sum(in2.values())
    shutil.copy(server.log_path, WORK / "fixtures" / "server_warm_start.log")
    save_results()


def not_regular_files(root: Path) -> list[dict[str, str]]:
    """Symlinks and empty folders under ``root`` (what a regular-files archive does not carry)."""
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out.append({"path": str(p.relative_to(root)), "kind": "symlink", "to": os.readlink(p)})
        elif p.is_dir() and not any(p.iterdir()):
            out.append({"path": str(p.relative_to(root)), "kind": "empty dir", "to": ""})
    return out[:200]


def files_added(root: Path, archived: dict[str, int]) -> list[dict[str, Any]]:
    """Files under ``root`` now that the archive did not hold, or whose mtime moved since (rebuilt in
    place): what a start on a seeded volume compiled or wrote anew."""
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            rel = str(p.relative_to(root))
            if rel not in archived or p.stat().st_mtime_ns != archived[rel]:
                out.append({"path": rel, "size": p.stat().st_size, "new": rel not in archived})
    return out[:300]


def stage_seed(starts: int = 3) -> None:
    """One cold start per fleet: the volume the cache stage warmed is archived with the roles' own tool
    (images/sglang/cache_archive.py), seeded into an empty volume, and the server started on that
    one: its start should take what a warm start takes, not what a cold one does.

    ``starts`` pairs, interleaved (warm, then seeded, then warm again ...), so both kinds see the same
    machine state and their spread is visible; each start's first greedy and first sampled request are
    timed (a sampler module rebuilt at the first sampled request would show there, not in readiness).
    Each seeded volume is a fresh extraction at the mount path; the warm one is put back after it."""
    sys.path.insert(0, str(ROOT / "images" / "sglang"))
    import cache_archive

    res: dict[str, Any] = RESULTS.setdefault("seed", {})
    probe_server = Server("serve", "server-seeded.log")
    warm_volume, key = probe_server.volume, probe_server.spec.get("cache_key") or probe_server.volume.name
    archive = WORK / "archives" / f"{key}.tar.gz"
    t0 = time.monotonic()
    res["archive"] = cache_archive.create(warm_volume, key, archive)
    res["archive_s"] = round(time.monotonic() - t0, 2)
    # What the archive leaves out (it takes regular files only): a seeded start that is slower than
    # a warm one rebuilds something, and these two lists say what (issue 23).
    res["warm_not_archived"] = not_regular_files(warm_volume)
    archived = {
        str(p.relative_to(warm_volume)): p.stat().st_mtime_ns
        for p in warm_volume.rglob("*")
        if p.is_file() and not p.is_symlink()
    }
    # Another host's volume sits at the same path (Docker mounts it at the mount path, no symlink): the
    # warm one is moved aside and the archive extracted into an empty folder where it was. FlashInfer's
    # ninja builds record absolute (resolved) paths, so a copy at another path is rebuilt (seen: a
    # seeded copy next to it took as long as a cold start for the first sampled request).
    aside = warm_volume.with_name(warm_volume.name + ".warm-aside")
    res["starts"] = []
    for i in range(1, starts + 1):
        for kind in ("warm", "seeded"):
            row: dict[str, Any] = {"n": i, "kind": kind}
            if kind == "seeded":
                if aside.exists():
                    shutil.rmtree(aside)
                warm_volume.rename(aside)
                t0 = time.monotonic()
                row["seed"] = cache_archive.seed(archive, key, warm_volume)
                row["seed_s"] = round(time.monotonic() - t0, 2)
                row["warm_check"] = cache_archive.warm(warm_volume, key)
            server = Server("serve", f"server-{kind}-{i}.log")
            server.start()
            row["ready_s"] = server.wait_ready()
            row.update(first_requests())
            server.stop()
            log(
                f"{kind} start {i}/{starts}: ready in {row['ready_s']} s, first greedy {row['first_greedy_s']} s, "
                f"first sampled {row['first_sampled_s']} s"
                + (f" (seeded in {row['seed_s']} s)" if "seed_s" in row else "")
            )
            row["added_by_start"] = files_added(warm_volume, archived)  # since the archive was made
            if kind == "seeded":
                shutil.copy(server.log_path, WORK / "fixtures" / f"server_seeded_start_{i}.log")
                shutil.rmtree(warm_volume)
                aside.rename(warm_volume)
            res["starts"].append(row)
            save_results()
    for kind in ("warm", "seeded"):
        rows = [r for r in res["starts"] if r["kind"] == kind]
        for field in ("ready_s", "first_sampled_s"):
            vals = sorted(r[field] for r in rows)
            res[f"{kind}_{field}"] = {"min": vals[0], "median": vals[len(vals) // 2], "max": vals[-1]}
    log(f"warm vs seeded: {json.dumps({k: v for k, v in res.items() if k.endswith(('_ready_s', '_first_sampled_s'))})}")
    save_results()


# --------------------------------------------------------------------------- gate vs bench_serving
def run_gate(
    report: Path, server_log: Path, tag: str, config: Path = GATE_CONFIG, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "validate",
        "gate",
        "--url",
        URL,
        "--config",
        str(config),
        "--report",
        str(report),
        "--log",
        str(server_log),
        "--label",
        f"run={tag}",
        *extra,
    ]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    data = json.loads((report / "report.json").read_text())
    tp = data["phases"].get("throughput") or {}
    log(
        f"gate {tag}: {data['verdict']} rc={proc.returncode} in {took:.0f} s; failed checks {data['failed_checks']}; "
        f"failure reasons {tp.get('failure_reasons', {})}"
    )
    return {
        "rc": proc.returncode,
        "seconds": round(took, 1),
        "verdict": data["verdict"],
        "failed_checks": data["failed_checks"],
        "runs": tp.get("runs", []),
        "spread": tp.get("spread", {}),
        "failure_reasons": tp.get("failure_reasons", {}),
        "single_stream": data["phases"].get("single_stream"),
        "reference": data["phases"].get("reference"),
        "key_metrics": data.get("key_metrics"),
        "checks": {
            c["name"]: c["message"]
            for c in data["checks"]
            if not c["passed"] or c["name"].startswith(("baseline.", "answers.", "throughput.spread"))
        },
        "stderr_tail": proc.stderr[-2000:],
    }


def bench_argv(out_file: Path, seed: int, num_prompts: int, input_len: int = 256, output_len: int = 128) -> list[str]:
    """``sglang.bench_serving`` on the gate's workload: ``num_prompts`` random-id prompts of exactly
    ``input_len`` tokens (range ratio 1.0), ``output_len`` out, all at once."""
    return [
        sys.executable,
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang",
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
        "--model",
        str(MODEL_DIR),
        "--tokenizer",
        str(MODEL_DIR),
        "--dataset-name",
        "random-ids",
        "--tokenize-prompt",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--random-range-ratio",
        "1.0",
        "--num-prompts",
        str(num_prompts),
        "--request-rate",
        "inf",
        "--seed",
        str(seed),
        "--warmup-requests",
        "1",
        "--disable-tqdm",
        "--output-file",
        str(out_file),
    ]


def run_bench(out_file: Path, seed: int, num_prompts: int) -> dict[str, Any]:
    cmd = bench_argv(out_file, seed, num_prompts)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=WORK, capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError(f"bench_serving rc={proc.returncode}: {proc.stderr[-3000:]}")
    row = json.loads(out_file.read_text().splitlines()[-1])
    row.pop("server_info", None)
    log(
        f"bench_serving {seed}: {row['total_throughput']:.0f} total tok/s, {row['completed']} completed, "
        f"in {took:.0f} s"
    )
    return row


def stage_compare(rounds: int, num_prompts: int) -> None:
    res: dict[str, Any] = {"gates": [], "bench": [], "num_prompts": num_prompts}
    RESULTS[f"compare-{num_prompts}"] = res
    config = GATE_CONFIG
    if num_prompts != 256:  # the reference shape, longer: fewer seconds' noise per run
        import yaml

        data = yaml.safe_load(GATE_CONFIG.read_text())
        data["throughput"]["num_prompts"] = num_prompts
        config = WORK / f"gate-h200-{num_prompts}.yml"
        config.write_text(yaml.safe_dump(data))
    server = Server("serve", "server-compare.log")
    server.start()
    res["ready_s"] = server.wait_ready()
    first_requests()
    for i in range(1, rounds + 1):
        res["gates"].append(run_gate(WORK / f"gate-{num_prompts}-{i}", server.log_path, f"compare-{i}", config))
        res["bench"].append(run_bench(WORK / f"bench-{num_prompts}.jsonl", i, num_prompts))
        pack()
    server.stop()
    table = {}
    for metric in COMPARED:
        gate_runs = [r[metric] for g in res["gates"] for r in g["runs"] if r.get(metric) is not None]
        gate_meds = [statistics.median([r[metric] for r in g["runs"]]) for g in res["gates"] if g["runs"]]
        bench = [b[metric] for b in res["bench"] if b.get(metric) is not None]
        if not gate_meds or not bench:
            continue
        ratios = [g / b for g, b in zip(gate_meds, bench, strict=False) if b]
        table[metric] = {
            "gate_median": statistics.median(gate_runs),
            "bench_median": statistics.median(bench),
            "ratio_median": statistics.median(ratios) if ratios else None,
            "gate_spread": Spread.of(gate_runs).spread,
            "bench_spread": Spread.of(bench).spread,
        }
    res["table"] = table
    log(f"{'metric':24} {'gate':>10} {'bench':>10} {'ratio':>7} {'g.spread':>9} {'b.spread':>9}")
    for metric, row in table.items():
        log(
            f"{metric:24} {row['gate_median']:10.1f} {row['bench_median']:10.1f} {row['ratio_median']:7.3f} "
            f"{row['gate_spread']:9.3f} {row['bench_spread']:9.3f}"
        )
    save_results()


# --------------------------------------------------------------------------- the overflow fault
def capture_overflow(dest: Path, served: str, concurrency: int = 64) -> dict[str, Any]:
    """``concurrency`` streams at once at each endpoint: keep one aborted transcript of each."""
    dest.mkdir(parents=True, exist_ok=True)
    bodies = {
        "generate": (
            "/generate",
            {
                "input_ids": list(range(100, 356)),
                "stream": True,
                "sampling_params": {"max_new_tokens": 64, "temperature": 0.0, "ignore_eos": True},
            },
        ),
        "chat": (
            "/v1/chat/completions",
            {
                "model": served,
                "messages": [{"role": "user", "content": "Count"}],
                "max_tokens": 64,
                "temperature": 0.0,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ),
    }
    summary: dict[str, Any] = {}
    for name, (path, body) in bodies.items():
        answers: list[tuple[int, bytes]] = []
        lock = threading.Lock()

        def one(
            path: str = path,
            body: dict[str, Any] = body,
            answers: list[tuple[int, bytes]] = answers,
            lock: threading.Lock = lock,
        ) -> None:
            try:
                r = requests.post(URL + path, json=body, stream=True, timeout=300)
                data = b"".join(r.iter_content(chunk_size=None))
                with lock:
                    answers.append((r.status_code, data))
            except requests.RequestException as exc:
                with lock:
                    answers.append((-1, repr(exc).encode()))

        threads = [threading.Thread(target=one) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        aborted = [a for a in answers if b'"abort"' in a[1] or b'"error"' in a[1]]
        summary[name] = {
            "requests": len(answers),
            "aborted_or_error": len(aborted),
            "statuses": sorted({a[0] for a in answers}),
        }
        if aborted:
            (dest / f"overflow_{name}.sse").write_bytes(aborted[0][1])
        ok = [a for a in answers if a not in aborted]
        if ok:
            (dest / f"overflow_{name}_completed.sse").write_bytes(ok[0][1])
    return summary


def stage_overflow() -> None:
    res: dict[str, Any] = {}
    RESULTS["overflow"] = res
    server = Server("overflow", "server-overflow.log")
    server.start()
    res["ready_s"] = server.wait_ready()
    res["argv_tail"] = server.spec["command"][-8:]
    served = server.spec["command"][server.spec["command"].index("--served-model-name") + 1]
    res["capture"] = capture_overflow(WORK / "fixtures", served)
    log(f"overflow capture: {res['capture']}")
    res["gate"] = run_gate(WORK / "gate-overflow", server.log_path, "overflow")
    server.stop()
    shutil.copy(server.log_path, WORK / "fixtures" / "server_overflow.log")
    save_results()


# --------------------------------------------------------------------------- what a PASS means
OTHER_MODEL = MODEL_DIR.with_name(MODEL_DIR.name + "-seed1")  # same shape and tokenizer, other weights
BASELINE = WORK / "trust-baseline.json"
CALIBRATION_PROMPTS = [
    "The capital of France is",
    "Write a short story about a lighthouse keeper.",
    "Explain how a hash table works.",
    "def quicksort(items):",
    "List the planets of the solar system.",
    "Count from 1 to 100",
    "Translate to French: the weather is nice today.",
    "What is the meaning of life?",
]


def calibrate_answers(dest: Path) -> dict[str, Any]:
    """What the model honestly answers to plain prompts (greedy and sampled): distinct tokens and
    the longest back-to-back repeat, and the gate's own answer rule on each (validate/checks.py)."""
    from validate.checks import AnswerRule, degenerate, longest_run

    rule = AnswerRule()
    rows = []
    for prompt in CALIBRATION_PROMPTS:
        for name, params in (("greedy", {"temperature": 0.0}), ("sampled", {"temperature": 1.0, "top_p": 0.95})):
            body = {"text": prompt, "sampling_params": {"max_new_tokens": 64, "ignore_eos": True, **params}}
            d = requests.post(URL + "/generate", json=body, timeout=120).json()
            ids, text = d["output_ids"], d["text"]
            rows.append(
                {
                    "prompt": prompt,
                    "sampling": name,
                    "output_ids": ids,
                    "text": text,
                    "distinct": len(set(ids)),
                    "longest_run": longest_run(ids)[0],
                    "degenerate": degenerate(rule, len(ids), text, ids),
                }
            )
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "honest_answers.json").write_text(json.dumps(rows, indent=1) + "\n")
    return {
        "answers": len(rows),
        "distinct_min": min(r["distinct"] for r in rows),
        "distinct_max": max(r["distinct"] for r in rows),
        "longest_run_max": max(r["longest_run"] for r in rows),
        "judged_degenerate": sum(1 for r in rows if r["degenerate"]),
    }


def gate_series(res: dict[str, Any], key: str, server: Server, n: int, first_records: bool) -> None:
    """``n`` gates in a row on one server against the group baseline. ``first_records``: every gate
    passes ``--update-baseline``, as the sglang_gate role does, so the first passing gate of the group
    writes the reference (a failing gate writes nothing) and the later ones are compared with it."""
    gates = res.setdefault(key, [])
    for i in range(1, n + 1):
        extra = ("--baseline", str(BASELINE), "--model", SERVED)
        if first_records:
            extra += ("--update-baseline",)
        gates.append(run_gate(WORK / f"gate-{key}-{i}", server.log_path, f"{key}-{i}", GATE_CONFIG, extra))
        pack()  # what is measured comes back even if the call runs out of time
    res[f"{key}_verdicts"] = [g["verdict"] for g in gates]
    log(f"{key}: {res[f'{key}_verdicts']}")


def stage_trust_healthy(n: int) -> None:
    """Honest answers recorded; ``n`` gates on one healthy server (the first writes the group baseline)."""
    res = RESULTS.setdefault("trust", {})
    server = Server("serve", "server-trust.log")
    server.start()
    res["ready_s"] = server.wait_ready()
    first_requests()
    res["calibration"] = calibrate_answers(WORK / "fixtures")
    log(f"calibration: {res['calibration']}")
    if BASELINE.exists():
        BASELINE.unlink()
    gate_series(res, "healthy", server, n, first_records=True)
    server.stop()
    if BASELINE.exists():  # no gate passed: no reference, and the faults stage has nothing to compare with
        shutil.copy(BASELINE, WORK / "fixtures" / "trust-baseline.json")
    save_results()


def stage_trust_faults(n: int) -> None:
    """The same group baseline: ``n`` gates on a slower server, one on other weights."""
    res = RESULTS.setdefault("trust", {})
    carried = CARRY / "trust-baseline.json"
    if not BASELINE.exists() and carried.exists():
        shutil.copy(carried, BASELINE)
    server = Server("slow", "server-slow.log")
    server.start()
    res["slow_ready_s"] = server.wait_ready()
    first_requests()
    gate_series(res, "slow", server, n, first_records=False)
    server.stop()
    if not OTHER_MODEL.exists():  # real_sglang.sh builds it for trust-answers, or with RS_OTHER=1
        log(f"{OTHER_MODEL} absent: the other-weights gate is left out")
        save_results()
        return
    other = Server("serve", "server-other.log", model=OTHER_MODEL)
    other.start()
    res["other_ready_s"] = other.wait_ready()
    first_requests()
    gate_series(res, "other_weights", other, 1, first_records=False)
    other.stop()
    save_results()


def stage_trust_pair(n: int) -> None:
    """One call, one card: ``n`` gates on the healthy server (the first passing one writes the group
    baseline), then ``n`` on the same model behind the slower rendering, judged against it."""
    res = RESULTS.setdefault("trust", {})
    if BASELINE.exists():
        BASELINE.unlink()
    server = Server("serve", "server-trust.log")
    server.start()
    res["ready_s"] = server.wait_ready()
    gate_series(res, "healthy", server, n, first_records=True)
    server.stop()
    slow = Server("slow", "server-slow.log")
    slow.start()
    res["slow_ready_s"] = slow.wait_ready()
    gate_series(res, "slow", slow, n, first_records=False)
    slow.stop()
    save_results()


def stage_trust_answers() -> None:
    """The reference-answers check alone (no load phases, so no noise decides the verdict): the
    first gate of the group records the answers, the same server passes, other weights fail."""
    import yaml

    res = RESULTS.setdefault("trust", {})
    data = yaml.safe_load(GATE_CONFIG.read_text())
    data["throughput"]["enabled"] = False
    data["single_stream"]["enabled"] = False
    config = WORK / "gate-answers.yml"
    config.write_text(yaml.safe_dump(data))
    if BASELINE.exists():
        BASELINE.unlink()
    extra = ("--baseline", str(BASELINE), "--model", SERVED)
    server = Server("serve", "server-answers.log")
    server.start()
    res["answers_ready_s"] = server.wait_ready()
    first_requests()
    gates = res.setdefault("answers", [])
    for i in range(1, 3):
        more = ("--update-baseline",) if i == 1 else ()
        gates.append(run_gate(WORK / f"gate-answers-{i}", server.log_path, f"answers-{i}", config, extra + more))
        pack()
    server.stop()
    other = Server("serve", "server-other.log", model=OTHER_MODEL)
    other.start()
    res["other_ready_s"] = other.wait_ready()
    gates.append(run_gate(WORK / "gate-answers-other", other.log_path, "answers-other", config, extra))
    other.stop()
    res["answers_verdicts"] = [g["verdict"] for g in gates]
    log(f"answers: {res['answers_verdicts']}")
    save_results()


# --------------------------------------------------------------------------- accuracy on known answers
EXAMPLE = ROOT / "inventory" / "example" / "group_vars" / "all" / "main.yml"


def record_accuracy_answer(dest: Path) -> dict[str, Any]:
    """The gate's accuracy request for question 0, byte for byte, and what the server answered."""
    from validate import arithmetic

    prompt, expected = arithmetic.prompts(1, 1, 5)[0]
    body = {
        "text": prompt,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 256, "stop": list(arithmetic.STOP)},
    }
    r = requests.post(URL + "/generate", json=body, timeout=120)
    dest.mkdir(parents=True, exist_ok=True)
    doc = {"request": body, "expected": expected, "status": r.status_code, "response": r.json()}
    (dest / "accuracy_answer.json").write_text(json.dumps(doc, indent=1) + "\n")
    meta = doc["response"].get("meta_info", {})
    return {"finish_reason": meta.get("finish_reason"), "completion_tokens": meta.get("completion_tokens")}


def stage_trust_accuracy() -> None:
    import yaml

    res = RESULTS.setdefault("accuracy", {})
    data = yaml.safe_load(GATE_CONFIG.read_text())
    only = {
        **data,
        "throughput": {**data["throughput"], "enabled": False},
        "single_stream": {**data["single_stream"], "enabled": False},
    }
    glm5 = yaml.safe_load(EXAMPLE.read_text())["sglang_gate_config"]["accuracy"]
    kit_cfg, glm_cfg = WORK / "gate-accuracy-kit.yml", WORK / "gate-accuracy-glm5.yml"
    kit_cfg.write_text(yaml.safe_dump(only))
    glm_cfg.write_text(yaml.safe_dump({**only, "accuracy": glm5}))
    res["glm5_floor"] = {k: glm5[k] for k in ("min_accuracy", "max_invalid", "questions", "shots")}
    group = WORK / "accuracy-baseline.json"
    if group.exists():
        group.unlink()
    server = Server("serve", "server-accuracy.log")
    server.start()
    res["ready_s"] = server.wait_ready()
    res["answer"] = record_accuracy_answer(WORK / "fixtures")
    extra = ("--baseline", str(group), "--model", SERVED)
    gates = res.setdefault("gates", {})
    for name, cfg, more in (
        ("glm5_floor", glm_cfg, ("--update-baseline",)),  # must fail: nothing recorded
        ("kit_first", kit_cfg, ("--update-baseline",)),  # the group's first gate records
        ("kit_second", kit_cfg, ()),  # compared with it
    ):
        g = run_gate(WORK / f"gate-accuracy-{name}", server.log_path, name, cfg, extra + more)
        rep = json.loads((WORK / f"gate-accuracy-{name}" / "report.json").read_text())
        g["accuracy"] = {k: v for k, v in rep["phases"].get("accuracy", {}).items() if k != "wrong"}
        g["accuracy"]["wrong"] = rep["phases"].get("accuracy", {}).get("wrong", [])[:2]
        g["accuracy_checks"] = {c["name"]: c["message"] for c in rep["checks"] if c["name"].startswith("accuracy.")}
        gates[name] = g
        log(f"accuracy {name}: {g['verdict']} {g['accuracy'].get('accuracy')} in {g['accuracy'].get('seconds')} s")
        pack()
    full = run_gate(WORK / "gate-accuracy-full", server.log_path, "full", GATE_CONFIG, ("--model", SERVED))
    gates["full"] = full
    server.stop()
    res["verdicts"] = {k: v["verdict"] for k, v in gates.items()}
    log(f"accuracy: {res['verdicts']}")
    save_results()


# --------------------------------------------------------------------------- main
def pack() -> None:
    """results.json and one tar of fixtures, logs and gate reports into $OUT (8 files at most)."""
    OUT.mkdir(parents=True, exist_ok=True)
    save_results()
    shutil.copy(WORK / "results.json", OUT / "results.json")
    with tarfile.open(OUT / "fixtures.tar.gz", "w:gz") as tar:
        for name in [
            "fixtures",
            *sorted(p.name for p in WORK.glob("gate-*")),
            *sorted(p.name for p in WORK.glob("server-*.log")),
            *sorted(p.name for p in WORK.glob("bench*.jsonl")),
        ]:
            if (WORK / name).exists():
                tar.add(WORK / name, arcname=name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "stages",
        nargs="+",
        choices=[
            "cache",
            "seed",
            "compare",
            "overflow",
            "trust-healthy",
            "trust-faults",
            "trust-pair",
            "trust-answers",
            "trust-accuracy",
        ],
    )
    parser.add_argument("--gates", type=int, default=10, help="trust-*: gates in a row per server")
    parser.add_argument("--starts", type=int, default=3, help="seed: warm and seeded starts each (interleaved)")
    parser.add_argument("--rounds", type=int, default=3, help="gate / bench_serving alternations")
    parser.add_argument("--num-prompts", type=int, default=256, help="compare: prompts per run (reference: 256)")
    args = parser.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    if (WORK / "results.json").exists():
        RESULTS.update(json.loads((WORK / "results.json").read_text()))
    rc = 0
    try:
        for stage in args.stages:
            log(f"==== {stage}")
            start = time.monotonic()
            {
                "cache": stage_cache,
                "seed": lambda: stage_seed(args.starts),
                "compare": lambda: stage_compare(args.rounds, args.num_prompts),
                "overflow": stage_overflow,
                "trust-healthy": lambda: stage_trust_healthy(args.gates),
                "trust-faults": lambda: stage_trust_faults(args.gates),
                "trust-pair": lambda: stage_trust_pair(args.gates),
                "trust-answers": stage_trust_answers,
                "trust-accuracy": stage_trust_accuracy,
            }[stage]()
            RESULTS.setdefault("stage_seconds", {})[stage] = round(time.monotonic() - start, 1)
    except Exception as exc:  # the device call must still bring back what was measured
        log(f"FAILED: {type(exc).__name__}: {exc}")
        RESULTS.setdefault("errors", []).append(f"{type(exc).__name__}: {exc}")
        for server in STARTED:
            server.stop()
        subprocess.run(["pkill", "-9", "-f", SERVER_PATTERN], check=False)
        rc = 1
    pack()
    return rc


if __name__ == "__main__":
    sys.exit(main())
