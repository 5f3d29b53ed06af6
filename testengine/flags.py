"""Refuse unknown flags and invalid values the way the claimed SGLang release's launch_server does.

The test engine poses as one SGLang release (its image sets TEST_ENGINE_SGLANG_VERSION from
the release it claims). Accepting any flag would let a wrong flag pass molecule silently, so
the argv is checked against that release's table (the sglangflags package, read from the real
wheel) and a refusal exits 2 with argparse's own wording, as launch_server would. Without a
claimed version (tests that start the engine directly) nothing is checked.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import sglangflags

VERSION_ENV = "TEST_ENGINE_SGLANG_VERSION"
TABLES_ENV = "TEST_ENGINE_FLAG_TABLES"


def refusal(argv: list[str], table: dict[str, Any]) -> str | None:
    """argparse's message for the first value the release refuses, else for its unknown flags, else None."""
    problems = sglangflags.check(argv, table, skip_prefix="--engine-")
    choice = next((p for p in problems if p.kind == "choice"), None)
    if choice is not None:
        shown = ", ".join(repr(c) for c in choice.detail.split(", "))
        return f"argument {choice.flag}: invalid choice: {choice.value!r} (choose from {shown})"
    unknown = [p.flag for p in problems if p.kind == "unknown"]
    return "unrecognized arguments: " + " ".join(unknown) if unknown else None


def posed_version() -> str:
    """The SGLang release the engine poses as ("" when started without one)."""
    return os.environ.get(VERSION_ENV, "").strip()


def check(argv: list[str]) -> str | None:
    """The launch_server-style error for ``argv`` under the claimed release, or None."""
    version = posed_version()
    if not version:
        return None
    tables = Path(os.environ.get(TABLES_ENV) or sglangflags.TABLES)
    table, note = sglangflags.load(version, tables)
    if table is None:
        return f"{VERSION_ENV}={version}: {note}"
    msg = refusal(argv, table)
    return f"launch_server.py: error: {msg} (test engine posing as SGLang {table['sglang_version']})" if msg else None
