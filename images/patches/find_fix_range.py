#!/usr/bin/env python3
"""Scan released sglang wheels and say, per patch, which releases need it and which have it.

Run once by a maintainer when a new SGLang release appears (not by the tests: it downloads
about 40 MB per release). It uses the patch tool's own decision (``patchset.evaluate``, dry
run), so the table is exactly what an image build would do with each release:

    .venv/bin/python images/patches/find_fix_range.py 0.5.6 0.5.9 0.5.13 0.5.23
    .venv/bin/python images/patches/find_fix_range.py --all-since 0.5.1

Only the files the manifests name are kept, under ``.cache/sglang-src/<version>/``; the wheel
itself is deleted after extraction unless it is one the tests use (``.cache/wheels``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from patchset import DriftError, Patch, load_patches, version_key

REPO = Path(__file__).resolve().parents[2]
SRC_CACHE = REPO / ".cache" / "sglang-src"
WHEEL_CACHE = REPO / ".cache" / "wheels"


def released_versions(since: str) -> list[str]:
    """Releases listed by ``pip index versions sglang`` (one request), oldest first."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("Available versions:"))
    versions = [v.strip() for v in line.split(":", 1)[1].split(",")]
    return sorted((v for v in versions if version_key(v) >= version_key(since)), key=version_key)


def tree_for(version: str, wanted: set[str]) -> Path:
    """The manifest-named files of one release, extracted once and cached."""
    dest = SRC_CACHE / version
    if (dest / ".complete").exists():
        return dest
    wheels = list(WHEEL_CACHE.glob(f"sglang-{version}-*.whl"))
    with tempfile.TemporaryDirectory() as tmp:
        if not wheels:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"sglang=={version}", "-d", tmp],
                check=True,
            )
            wheels = list(Path(tmp).glob("sglang-*.whl"))
        with zipfile.ZipFile(wheels[0]) as zf:
            names = [n for n in zf.namelist() if n in wanted]
            zf.extractall(dest, names)
    (dest / "sglang").mkdir(parents=True, exist_ok=True)
    (dest / ".complete").write_text(version + "\n")
    return dest


def decide(patch: Patch, root: Path, version: str) -> str:
    from patchset import evaluate

    try:
        result, changed = evaluate(patch, root, version)
    except DriftError:
        return "DRIFT"
    return "needs (patch applies)" if changed else result.status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("versions", nargs="*", help="sglang versions to scan")
    ap.add_argument("--all-since", help="scan every release from this version on (pip index versions)")
    args = ap.parse_args(argv)
    patches = load_patches(Path(__file__).resolve().parent)
    versions = sorted(
        set(args.versions) | set(released_versions(args.all_since) if args.all_since else []), key=version_key
    )
    if not versions:
        ap.error("give versions or --all-since")
    wanted = {c.file for p in patches for c in p.changes} | {f for p in patches for f in p.upstream_files}
    table: dict[str, dict[str, str]] = {}
    for v in versions:
        root = tree_for(v, wanted)
        table[v] = {p.id: decide(p, root, v) for p in patches}
        print(f"{v:14} " + "  ".join(f"{p.id}={table[v][p.id]}" for p in patches), flush=True)
    print()
    for p in patches:
        needing = [v for v in versions if table[v][p.id].startswith("needs")]
        fixed = [v for i, v in enumerate(versions) if all(table[w][p.id] == "upstream" for w in versions[i:])]
        drift = [v for v in versions if table[v][p.id] == "DRIFT"]
        print(
            f"{p.id}: newest needing = {needing[-1] if needing else 'none'}; "
            f"first fixed = {fixed[0] if fixed else 'none'}; drift = {', '.join(drift) or 'none'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
