"""CI's guard of the GPU image's release check: the committed result must still describe this tree.

The production image is too large to build in CI (benchmarks/gpu_image.py, run by
`bash scripts/test.sh gpu-image` before a release). Its newest result names the commit it built;
once images/sglang, images/patches or the local base's sources change after that commit, the
result no longer vouches for what a fleet would build, and this fails, naming the files.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_image  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"


def newest_result(results: Path = RESULTS) -> tuple[Path, dict]:
    found = sorted(results.glob("gpu-image-*.json"))
    if not found:
        pytest.fail(f"no gpu-image-*.json in {results}: run `bash scripts/test.sh gpu-image` and commit its result")
    return found[-1], json.loads(found[-1].read_text())


def changed_since(commit: str, repo: Path = REPO) -> list[str]:
    """The watched paths that differ between ``commit`` and the working tree (committed or not)."""
    known = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"], check=False)
    if known.returncode != 0:
        pytest.fail(f"the GPU image result names commit {commit}, which this repository does not have")
    proc = subprocess.run(
        ["git", "-C", str(repo), "diff", "--name-only", commit, "--", *gpu_image.WATCHED],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.split()


def test_the_newest_gpu_image_result_passed() -> None:
    path, result = newest_result()
    assert result["passed"] is True, f"{path.name}: the release check failed; see its .log"
    assert result["tests"]["tests"] > 0 and result["tests"]["skipped"] == 0
    assert result["smoke"].startswith("image smoke: ok")


def test_the_image_sources_have_not_changed_since_the_result() -> None:
    path, result = newest_result()
    changed = changed_since(result["commit"])
    assert not changed, (
        f"{path.name} vouches for commit {result['commit'][:12]}, but these image sources changed since: "
        f"{', '.join(changed)}. Rebuild and retest: `bash scripts/test.sh gpu-image`, then commit the new result."
    )


def test_the_guard_sees_a_changed_image_source(tmp_path: Path) -> None:
    """The guard itself: in a scratch clone, a commit touching images/sglang is reported."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True)
    base = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    assert changed_since(base, clone) == []
    (clone / "images" / "sglang" / "smoke.py").write_text("# changed\n")
    (clone / "validate" / "__init__.py").write_text("# a gate change is not an image-source change\n")
    assert changed_since(base, clone) == ["images/sglang/smoke.py"]
