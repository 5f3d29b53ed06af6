"""Fixtures: test engines started as subprocesses on 127.0.0.1, stopped after each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testengine.harness import EngineSet


@pytest.fixture
def engine_factory(tmp_path: Path) -> Iterator[EngineSet]:
    engines = EngineSet(tmp_path)
    yield engines
    engines.stop_all()
