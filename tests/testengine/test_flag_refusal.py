"""The test engine refuses what the SGLang release it poses as refuses, with launch_server's exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testengine import flags

REPO = Path(__file__).resolve().parents[2]


def _run(version: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, flags.VERSION_ENV: version}
    return subprocess.run(
        [sys.executable, "-m", "testengine", *argv], capture_output=True, text=True, timeout=60, cwd=REPO, env=env
    )


@pytest.mark.parametrize(
    ("version", "argv", "needle"),
    [
        ("0.5.12.post1", ["--attention-backend", "dsa"], "argument --attention-backend: invalid choice: 'dsa'"),
        ("0.5.20", ["--attention-backend=cutlass_mla"], "argument --attention-backend: invalid choice: 'cutlass_mla'"),
        ("0.5.20", ["--nsa-prefill-backend", "flashmla_sparse"], "unrecognized arguments: --nsa-prefill-backend"),
        ("0.5.24", ["--enable-warp-drive"], "unrecognized arguments: --enable-warp-drive"),
    ],
)
def test_refused_like_launch_server(version: str, argv: list[str], needle: str) -> None:
    proc = _run(version, *argv)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "launch_server.py: error:" in proc.stderr


def test_accepted_argv_passes_and_no_claimed_version_checks_nothing(monkeypatch) -> None:
    argv = [
        "--model-path",
        "m",
        "--tp-size",
        "8",
        "--attention-backend",
        "dsa",
        "--dsa-prefill-backend",
        "flashmla_sparse",
        "--disable-chunked-prefix-cache",
        "--engine-fault",
        "nan",
        "--tool-call-parser",
        "glm47",
    ]
    monkeypatch.setenv(flags.VERSION_ENV, "0.5.17")
    assert flags.check(argv) is None
    monkeypatch.delenv(flags.VERSION_ENV)
    assert flags.check(["--anything-goes"]) is None
