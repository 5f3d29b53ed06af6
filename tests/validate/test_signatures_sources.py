"""The crash signatures match what every release we deploy (0.5.9-0.5.23) really prints.

For each supported release the wheel's own source is read (the cached PyPI wheel, as the
flag tables are) and every NaN warning/assert text, the page_table_1_flattened assert and
the scheduler's crash line it contains are fed, formatted as the caller formats them, to the
log scan. A release that rewords one of them fails here before it fails a rollout.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import zipfile
from pathlib import Path

import pytest

from validate.logscan import scan_logs

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("flags_extract_sig", REPO / "images" / "flags" / "extract.py")
extract = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = extract
_spec.loader.exec_module(extract)


def _wheel(version: str) -> Path:
    from build import BuildError, ensure_wheel  # images/build.py (extract.py put images/ on sys.path)

    try:
        return ensure_wheel("sglang", version)
    except BuildError as exc:
        pytest.skip(f"PyPI unreachable: {exc}")


def _strings(zf: zipfile.ZipFile, suffixes: tuple[str, ...], needle: str) -> list[str]:
    """String constants (f-string parts joined with a sample value) containing ``needle``."""
    out = []
    for name in zf.namelist():
        if not name.endswith(suffixes):
            continue
        for node in ast.walk(ast.parse(zf.read(name))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and needle in node.value:
                out.append(node.value)
            elif isinstance(node, ast.JoinedStr):
                text = "".join(
                    v.value if isinstance(v, ast.Constant) else "sampler: next_token_logits" for v in node.values
                )
                if needle in text:
                    out.append(text)
    return [re.sub(r"%s", "sampler: next_token_logits", s) for s in out]


def _scan(tmp_path: Path, line: str) -> str | None:
    log = tmp_path / "server.log"
    log.write_text(f"[2026-12-03 08:00:00 TP0] {line}\n")
    first = scan_logs([str(log)]).first
    return first.signature if first else None


@pytest.mark.network
@pytest.mark.parametrize("version", extract.SUPPORTED)
def test_every_crash_text_of_the_release_is_a_signature(version: str, tmp_path: Path) -> None:
    with zipfile.ZipFile(_wheel(version)) as zf:
        nan = [s for s in _strings(zf, ("layers/sampler.py", "utils/async_probe.py"), "NaN") if "NaN" in s[:40]]
        nan = [s for s in nan if re.search(r"Detected errors during sampling|NaN detected", s)]
        page = _strings(zf, ("attention_forward_methods/forward_mha.py",), "page_table_1_flattened should")
        crash = _strings(zf, ("managers/scheduler.py",), "hit an exception")
    assert nan, f"{version}: no NaN warning found in the source (moved? read the release)"
    assert page and crash
    for text in nan:
        assert _scan(tmp_path, text) == "nan_in_decode", (version, text)
    for text in page:
        assert _scan(tmp_path, f"AssertionError: {text}") == "page_table_1_flattened", (version, text)
    for text in crash:
        assert _scan(tmp_path, text + "Traceback (most recent call last):") == "scheduler_exception", (version, text)
