"""sglang_image tasks_from prune on the real Docker engine: the current and the last good stay.

Three small images of one repository (distinct ids) and three staged archives with their
checksum and manifest files; prune keeps the current image, the last good one and any other
repository's image, and in the staging folder the current archive and the most recent other.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from roles_testlib import BIN, docker_ok, run_role_tasks

pytestmark = [pytest.mark.docker, pytest.mark.skipif(not docker_ok(), reason="needs a running Docker engine")]

REPO_NAME = "local/prune-test"
BASE = "local/debian:bookworm"


def _build(tmp_path, tag: str) -> str:
    ctx = tmp_path / f"ctx-{tag.replace(':', '-').replace('/', '-')}"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {BASE}\nLABEL io.sglang-deploy.test={tag}\n")
    subprocess.run(["docker", "build", "-q", "-t", tag, str(ctx)], check=True, capture_output=True)
    return subprocess.check_output(["docker", "image", "inspect", "-f", "{{.Id}}", tag], text=True).strip()


def _exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False).returncode == 0


def test_prune_keeps_current_and_last_good(tmp_path):
    ids = {name: _build(tmp_path, f"{REPO_NAME}:{name}") for name in ("old", "last-good", "current")}
    other = _build(tmp_path, "local/prune-test-other:old")
    staging = tmp_path / "staging"
    staging.mkdir()
    now = time.time()
    for age, name in ((300, "old"), (200, "last-good"), (100, "current")):
        for suffix in (".tar", ".tar.sha256", ".json"):
            path = staging / f"local_prune-test_{name}{suffix}"
            path.write_text(name)
            os.utime(path, (now - age, now - age))
    try:
        prune_vars = {
            "sglang_image_name": f"{REPO_NAME}:current", "sglang_image_staging_dir": str(staging),
            "sglang_image_archive_path": "/controller/build/local_prune-test_current.tar",
            "sglang_image_keep_ids": [ids["current"], ids["last-good"]],
            "ansible_python_interpreter": str(BIN / "python"),
        }  # fmt: skip
        run = run_role_tasks(tmp_path, "sglang_image", "prune", prune_vars)
        assert run.rc == 0, run.out
        assert not _exists(f"{REPO_NAME}:old")
        assert _exists(f"{REPO_NAME}:last-good") and _exists(f"{REPO_NAME}:current")
        assert _exists("local/prune-test-other:old") and other  # another repository is not ours
        kept = [f"local_prune-test_{n}{s}" for n in ("current", "last-good") for s in (".json", ".tar", ".tar.sha256")]
        assert sorted(p.name for p in staging.iterdir()) == sorted(kept)
        again = run_role_tasks(tmp_path, "sglang_image", "prune", prune_vars)
        assert again.rc == 0 and again.changed() == 0, again.out  # idempotent
    finally:
        for tag in (f"{REPO_NAME}:old", f"{REPO_NAME}:last-good", f"{REPO_NAME}:current", "local/prune-test-other:old"):
            subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, check=False)
