"""The client-overhead benchmark runs end to end and prints its ratios (not a timing assertion)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.network
@pytest.mark.slow
def test_client_overhead_quick_prints_ratios(tmp_path):
    out = tmp_path / "overhead.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/client_overhead.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "target: chunk ratio >= 2.00x" in proc.stdout
    data = json.loads(out.read_text())
    row = data["overhead"][0]
    assert row["gate"]["completed"] == [256] and row["bench_serving"]["completed"] == [256]
    assert row["chunk_ratio"] > 0
    # Same per-request records through both metric implementations: identical figures.
    assert all(abs(v["rel_diff"]) < 1e-9 for v in data["definitions"].values())
