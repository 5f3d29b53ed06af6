"""The release check of the production GPU image: build it here, test it inside itself, write the result.

    bash scripts/test.sh gpu-image                  # what a person runs before a release
    python benchmarks/gpu_image.py [--cold] [--skip-rebuild-probe]

Not part of the README's test command (a cold build takes longer than CI's whole budget). Steps:
1. refuses a tree whose image sources have uncommitted changes (the result names the commit built);
2. builds the local CUDA base and the image (`images/build.py sglang --local-cuda-base`), timing
   every Dockerfile step (``--cold``: both with docker's cache off, as on a fresh machine);
3. reads the image's size per layer (`docker history`);
4. measures what a change to validate/ alone rebuilds: the same build from a scratch worktree of
   this commit whose validate/ has one more comment line (docker's cache decides; nothing else changes);
5. runs the in-image tests (tests/images/test_gpu_image.py, marker gpu_image): none may fail or skip;
6. writes benchmarks/results/gpu-image-<date>.json (+ .log, the whole output): CI's
   tests/images/test_gpu_image_result.py fails once images/sglang, images/patches or the base's
   sources change after the commit it names.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TAG = "local/sglang-glm5:0.5.23-cu130-local"
PROBE_TAG = "local/sglang-glm5:rebuild-probe"
# what the result vouches for: CI compares these paths between the result's commit and HEAD
WATCHED = ("images/sglang", "images/patches", "images/cuda-base", "images/cuda_base.py", "images/wheelhouse.py")
STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")


@dataclass
class StepTime:
    """One Dockerfile instruction of a build: how long until the next one started, and whether
    docker's cache served it."""

    image: str
    step: int
    instruction: str
    seconds: float
    cached: bool = False


@dataclass
class Result:
    commit: str
    date: str
    image: str
    image_id: str = ""
    cold: bool = False
    build_seconds: dict[str, float] = field(default_factory=dict)
    steps: list[StepTime] = field(default_factory=list)
    layers: list[dict[str, object]] = field(default_factory=list)
    size_bytes: int = 0
    smoke: str = ""
    rebuild_probe: dict[str, object] = field(default_factory=dict)
    tests: dict[str, object] = field(default_factory=dict)
    passed: bool = False


def log(msg: str, out: list[str]) -> None:
    line = f"[gpu-image] {msg}"
    print(line, flush=True)
    out.append(line)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def timed_build(cmd: list[str], label: str, cwd: Path, out: list[str]) -> tuple[float, list[StepTime]]:
    """Run an images/build.py command, streaming its output, and time each Dockerfile step."""
    started = time.monotonic()
    steps: list[StepTime] = []
    current: StepTime | None = None
    mark = started
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        print(line, flush=True)
        out.append(line)
        m = STEP.match(line)
        now = time.monotonic()
        if m:
            if current is not None:
                current.seconds = round(now - mark, 1)
            current = StepTime(label, int(m.group(1)), m.group(3)[:160], 0.0)
            steps.append(current)
            mark = now
        elif current is not None and "Using cache" in line:
            current.cached = True
    rc = proc.wait()
    if current is not None:
        current.seconds = round(time.monotonic() - mark, 1)
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd[1:4])} failed (exit {rc}); the output is above")
    return round(time.monotonic() - started, 1), steps


def layers(image: str) -> list[dict[str, object]]:
    proc = subprocess.run(["docker", "history", "--no-trunc", "--format", "{{json .}}", image],
                          capture_output=True, text=True, check=True)  # fmt: skip
    out = []
    for line in proc.stdout.splitlines():
        entry = json.loads(line)
        size = _bytes(entry["Size"])
        if size:
            out.append({"size_bytes": size, "created_by": re.sub(r"\s+", " ", entry["CreatedBy"])[:200]})
    return out


def _bytes(text: str) -> int:
    m = re.match(r"([\d.]+)\s*([kMG]?B)", text)
    if not m:
        return 0
    return int(float(m.group(1)) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[m.group(2)])


def rebuild_probe(commit: str, out: list[str]) -> dict[str, object]:
    """The build from a scratch worktree of ``commit`` with one comment line added to validate/:
    which steps docker re-ran, and how long it took (the wheelhouse is shared, not re-downloaded)."""
    with tempfile.TemporaryDirectory(prefix="gpu-image-probe-") as tmp:
        tree = Path(tmp) / "tree"
        git("worktree", "add", "--detach", str(tree), commit)
        try:
            (tree / ".cache").symlink_to(REPO / ".cache")
            init = tree / "validate" / "__init__.py"
            init.write_text(init.read_text() + "# rebuild probe: a change to validate/ alone\n")
            cmd = [sys.executable, "images/build.py", "sglang", "--local-cuda-base", "--tag", PROBE_TAG]
            seconds, steps = timed_build(cmd, "rebuild-probe", tree, out)
        finally:
            git("worktree", "remove", "--force", str(tree))
            subprocess.run(["docker", "image", "rm", PROBE_TAG], capture_output=True, check=False)
    rerun = [s for s in steps if not s.cached and not s.instruction.startswith(("ARG", "FROM", "LABEL", "ENV"))]
    return {"seconds": seconds, "steps": len(steps), "rerun": [f"{s.step}: {s.instruction[:90]}" for s in rerun]}


def run_tests(out: list[str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-m", "gpu_image", "-p", "no:cacheprovider", "-q",
               f"--junitxml={junit}", "tests/images/test_gpu_image.py"]  # fmt: skip
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
        out.extend(proc.stdout.splitlines())
        print(proc.stdout[-6000:], flush=True)
        suite = ET.parse(junit).getroot()
        suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
        counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
        cases = {
            f"{c.get('name')}": ("failed" if c.find("failure") is not None or c.find("error") is not None
                                 else "skipped" if c.find("skipped") is not None else "passed")
            for c in suite.iter("testcase")
        }  # fmt: skip
        return {**counts, "exit": proc.returncode, "cases": cases}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cold", action="store_true", help="build both images with docker's cache off")
    ap.add_argument("--skip-rebuild-probe", action="store_true")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    out: list[str] = []
    dirty = git("status", "--porcelain", "--", *WATCHED)
    if dirty:
        raise SystemExit(
            f"uncommitted changes to the image's sources (commit first: the result names a commit):\n{dirty}"
        )
    commit = git("rev-parse", "HEAD")
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    result = Result(commit=commit, date=today, image=TAG, cold=args.cold)
    nocache = ["--no-cache"] if args.cold else []
    for label, cmd in (
        ("cuda-base", [sys.executable, "images/build.py", "cuda-base", "--force", *nocache]),
        ("sglang", [sys.executable, "images/build.py", "sglang", "--local-cuda-base", "--tag", TAG, "--force",
                    *nocache]),
    ):  # fmt: skip
        log(f"building {label}: {' '.join(cmd[1:])}", out)
        seconds, steps = timed_build(cmd, label, REPO, out)
        result.build_seconds[label] = seconds
        result.steps += steps
    result.smoke = next((ln.strip() for ln in out if ln.strip().startswith("image smoke:")), "")
    inspect = json.loads(subprocess.run(["docker", "image", "inspect", TAG], capture_output=True, text=True,
                                        check=True).stdout)[0]  # fmt: skip
    result.image_id, result.size_bytes = inspect["Id"], inspect["Size"]
    result.layers = layers(TAG)
    if not args.skip_rebuild_probe:
        log("rebuild probe: the same build with a change to validate/ alone", out)
        result.rebuild_probe = rebuild_probe(commit, out)
    log("in-image tests (pytest -m gpu_image tests/images/test_gpu_image.py)", out)
    result.tests = run_tests(out)
    t = result.tests
    result.passed = bool(result.smoke.startswith("image smoke: ok") and t["exit"] == 0 and t["tests"] > 0
                         and not t["failures"] and not t["errors"] and not t["skipped"])  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"gpu-image-{today}"
    stem.with_suffix(".json").write_text(json.dumps(asdict(result), indent=1) + "\n")
    stem.with_suffix(".log").write_text("\n".join(out) + "\n")
    verdict = "PASSED" if result.passed else "FAILED"
    log(f"{verdict}: {stem}.json (commit {commit[:12]}, {result.size_bytes / 1e9:.1f} GB, "
        f"tests {t['tests']} / failed {t['failures']} / skipped {t['skipped']})", out)  # fmt: skip
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
