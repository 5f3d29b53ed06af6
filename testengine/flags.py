"""Refuse unknown flags and invalid values the way the claimed SGLang release's launch_server does.

The test engine poses as one SGLang release (its image sets TEST_ENGINE_SGLANG_VERSION from
the release it claims). Accepting any flag would let a wrong flag pass molecule silently, so
the argv is checked against that release's table (images/flags/tables/, read from the real
wheel) and a refusal exits 2 with argparse's own wording, as launch_server would. Without a
claimed version (tests that start the engine directly) nothing is checked.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

VERSION_ENV = "TEST_ENGINE_SGLANG_VERSION"
TABLES_ENV = "TEST_ENGINE_FLAG_TABLES"
_DEFAULT_TABLES = Path(__file__).resolve().parents[1] / "images" / "flags" / "tables"


def _key(text: str) -> tuple[int, ...]:
    m = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?post(\d+))?", text)
    return tuple(int(g) for g in m.groups(default="0")) if m else ()


def load_table(version: str, tables: Path) -> dict[str, Any] | None:
    """The release's own table, else the newest older one; None when none fits."""
    found = {p.name[len("sglang-") : -len(".json")]: p for p in tables.glob("sglang-*.json")}
    if version in found:
        return json.loads(found[version].read_text())
    older = sorted((v for v in found if _key(v) <= _key(version)), key=_key)
    return json.loads(found[older[-1]].read_text()) if older and _key(version) else None


def refusal(argv: list[str], table: dict[str, Any]) -> str | None:
    """argparse's message for the first flag or value the release refuses, else None."""
    flags = table["flags"]
    unknown: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--") or token.startswith("--engine-"):
            continue
        flag, eq, inline = token.partition("=")
        entry = flags.get(flag)
        if entry is None:
            unknown.append(token)
            continue
        value = inline if eq else None
        if entry.get("value") and value is None and i < len(argv):
            value = argv[i]
            i += 1
        choices = entry.get("choices")
        if value is not None and isinstance(choices, list) and choices and value not in [str(c) for c in choices]:
            shown = ", ".join(repr(str(c)) for c in choices)
            return f"argument {flag}: invalid choice: {value!r} (choose from {shown})"
    if unknown:
        return "unrecognized arguments: " + " ".join(unknown)
    return None


def check(argv: list[str]) -> str | None:
    """The launch_server-style error for ``argv`` under the claimed release, or None."""
    version = os.environ.get(VERSION_ENV, "").strip()
    if not version:
        return None
    tables = Path(os.environ.get(TABLES_ENV) or _DEFAULT_TABLES)
    table = load_table(version, tables)
    if table is None:
        return f"{VERSION_ENV}={version}: no flag table in {tables}"
    msg = refusal(argv, table)
    return f"launch_server.py: error: {msg} (test engine posing as SGLang {table['sglang_version']})" if msg else None
