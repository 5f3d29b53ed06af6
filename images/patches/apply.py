#!/usr/bin/env python3
"""The patch tool: apply the version-keyed fixes to an SGLang tree and record what was done.

Used by images/sglang/Dockerfile at build time (and by the tests on unpacked wheels):

    python3 apply.py apply --root SITE_PACKAGES [--record /etc/sglang-deploy/patches.json]
    python3 apply.py record --engine test-engine --sglang-version 0.5.9 ... \
        --fix dsa-fp8-page-table-guard=applied --record FILE

Exit status: 0 done, 1 version drift (a patch neither applies nor is upstream),
2 bad usage, manifest or tree. Nothing is written unless every patch is decided.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from patchset import (
    STATUSES,
    DriftError,
    PatchError,
    detect_version,
    load_patches,
    make_record,
    run,
    write_record,
)

DEFAULT_RECORD = "/etc/sglang-deploy/patches.json"
HERE = Path(__file__).resolve().parent


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="apply.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    a = sub.add_parser("apply", help="patch an installed or unpacked sglang tree")
    a.add_argument("--root", required=True, type=Path, help="folder holding sglang/ (site-packages or unpacked wheel)")
    a.add_argument(
        "--patches-dir", type=Path, default=HERE, help="folder of */manifest.toml (default: beside this tool)"
    )
    a.add_argument("--sglang-version", help="override the version read from sglang-*.dist-info")
    a.add_argument("--flashinfer-version", help="override the version read from flashinfer_python-*.dist-info")
    a.add_argument("--cuda-version", default="unknown", help="recorded as cuda_version (e.g. 13.0)")
    a.add_argument("--engine", default="sglang", choices=["sglang", "test-engine"])
    a.add_argument("--record", type=Path, help=f"write the patch record here (image builds: {DEFAULT_RECORD})")
    a.add_argument("--expect", default="", help="fail unless the result equals this label (id=status,...)")
    a.add_argument("--check", action="store_true", help="decide and report, write nothing")
    a.add_argument("--json", action="store_true", help="print the record as JSON on stdout")

    r = sub.add_parser("record", help="write a patch record from given statuses (test-engine images)")
    r.add_argument("--engine", default="test-engine", choices=["sglang", "test-engine"])
    r.add_argument("--sglang-version", required=True)
    r.add_argument("--flashinfer-version", required=True)
    r.add_argument("--cuda-version", required=True)
    r.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="ID=STATUS",
        help=f"repeatable; STATUS one of {', '.join(STATUSES)}; or one comma list",
    )
    r.add_argument("--record", type=Path, required=True)
    return p


def _parse_fixes(items: list[str]) -> dict[str, tuple[str, list[str]]]:
    fixes: dict[str, tuple[str, list[str]]] = {}
    for item in (part for raw in items for part in raw.split(",") if part.strip()):
        fix_id, sep, status = item.strip().partition("=")
        if not sep or not fix_id:
            raise PatchError(f"--fix {item!r}: expected ID=STATUS with STATUS one of {', '.join(STATUSES)}")
        fixes[fix_id] = (status, [])
    return fixes


def _cmd_apply(args: argparse.Namespace) -> int:
    root: Path = args.root
    if not (root / "sglang").is_dir():
        raise PatchError(f"--root {root}: no sglang/ package folder there")
    sglang_version = args.sglang_version or detect_version(root, "sglang")
    if not sglang_version:
        raise PatchError(f"--root {root}: no sglang-*.dist-info found; pass --sglang-version")
    flashinfer_version = args.flashinfer_version or detect_version(root, "flashinfer_python") or "unknown"
    patches = load_patches(args.patches_dir)
    # Decide everything first (drift raises here), so a mismatch with --expect writes nothing.
    report = run(patches, root, sglang_version, flashinfer_version, dry_run=True)
    if args.expect and args.expect != report.label():
        print(
            f"[patches] ERROR: result {report.label()!r} differs from the expected {args.expect!r} "
            "(the image label would lie: fix the PATCHES build argument)",
            file=sys.stderr,
        )
        return 1
    if not args.check:
        report = run(patches, root, sglang_version, flashinfer_version)
    verb = "would apply" if args.check else "applied"
    for res in report.results:
        shown = verb if res.status == "applied" and res.changed else res.status
        print(f"[patches] {res.id}: {shown} - {res.message}", file=sys.stderr)
    record = report.record(args.engine, args.cuda_version)
    if args.record and not args.check:
        write_record(record, args.record)
        print(f"[patches] record written to {args.record}", file=sys.stderr)
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        print(report.label())
    return 0


def _cmd_record(args: argparse.Namespace) -> int:
    record = make_record(
        engine=args.engine,
        sglang_version=args.sglang_version,
        flashinfer_version=args.flashinfer_version,
        cuda_version=args.cuda_version,
        fixes=_parse_fixes(args.fix),
    )
    write_record(record, args.record)
    print(f"[patches] record written to {args.record}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _cmd_apply(args) if args.cmd == "apply" else _cmd_record(args)
    except DriftError as exc:
        print(f"[patches] VERSION DRIFT: {exc}", file=sys.stderr)
        return 1
    except PatchError as exc:
        print(f"[patches] ERROR: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
