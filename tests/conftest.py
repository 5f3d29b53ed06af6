"""Fixtures shared by every test folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families


@pytest.fixture(scope="session")
def promtool_bin() -> str:
    """Prometheus' own linter and PromQL parser. scripts/setup.sh puts Debian's promtool into the
    virtualenv; a machine without it fails here, naming the fix, rather than skipping the check."""
    found = Path(sys.executable).parent / "promtool"
    tool = str(found) if found.is_file() else shutil.which("promtool")
    if not tool:
        pytest.fail("promtool not found: run scripts/setup.sh (it puts Debian's promtool into .venv/bin)")
    return tool


@pytest.fixture(scope="session")
def promtool(promtool_bin: str) -> Callable[[str], subprocess.CompletedProcess[str]]:
    """``promtool check metrics`` on a text exposition (names, units, HELP/TYPE)."""

    def check(text: str) -> subprocess.CompletedProcess[str]:
        cmd = [promtool_bin, "check", "metrics"]
        return subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=60)

    return check


@pytest.fixture(scope="session")
def prom_samples() -> Callable[[str], dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    """A text exposition parsed by prometheus_client: (sample name, its labels) -> value."""

    def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    return parse
