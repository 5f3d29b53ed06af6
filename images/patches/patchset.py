"""Version-keyed source patches for an installed (or unpacked) SGLang release.

Stdlib only (Python 3.11+: ``tomllib``), because it runs inside image builds on
whatever ``python3`` the base provides, before any of our own dependencies exist.

A patch is a folder with ``manifest.toml``: which releases it applies to, how to
tell that a release already carries the fix (``[upstream]`` regex), and one or more
anchored search/replace changes. Exact anchors (not fuzzy diffs) are deliberate:
when upstream moves the code, the build must stop and say so instead of patching
the wrong place.
"""

from __future__ import annotations

import json
import os
import py_compile
import re
import tempfile
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

RECORD_SCHEMA_VERSION = 1
STATUSES = ("applied", "upstream", "absent")
MARKER_PREFIX = "sglang-deploy patch"

_VERSION_RE = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[.-]?(?P<pre>a|b|rc)(?P<pre_n>\d+))?"
    r"(?:[.-]?post(?P<post>\d+))?"
    r"(?:[.-]?dev(?P<dev>\d+))?"
    r"(?:\+[\w.]+)?$"
)
_PRE_ORDER = {"a": 0, "b": 1, "rc": 2}


class PatchError(Exception):
    """A manifest, a target tree or a version that the tool cannot work with."""


class DriftError(PatchError):
    """A release is inside a patch's range, lacks the fix, and the anchor is gone."""


def version_key(text: str) -> tuple[tuple[int, ...], int, int, int, int]:
    """Sortable key for the PEP 440 subset SGLang and FlashInfer actually publish.

    Hand-written because ``packaging`` is not in the stdlib and this runs before
    anything is installed; dev < pre < final < post, like PEP 440.
    """
    m = _VERSION_RE.match(text.strip())
    if not m:
        raise PatchError(f"cannot parse version {text!r} (expected e.g. 0.5.9, 0.5.13.post1, 0.6.0rc1)")
    release = tuple(int(p) for p in m["release"].split("."))
    release = release + (0,) * (4 - len(release)) if len(release) < 4 else release
    pre = _PRE_ORDER[m["pre"]] * 1000 + int(m["pre_n"]) if m["pre"] else 10_000
    post = int(m["post"]) if m["post"] is not None else -1
    dev = int(m["dev"]) if m["dev"] is not None else 1_000_000
    if m["dev"] is not None and m["pre"] is None and m["post"] is None:
        pre = -1  # 0.5.9.dev1 sorts before 0.5.9a1
    return release, pre, post, dev, 0


@dataclass(frozen=True)
class Change:
    """One anchored replacement in one file, valid for an inclusive version range."""

    name: str
    file: str
    min_version: str
    max_version: str
    old: str
    new: str

    def covers(self, version: str) -> bool:
        return version_key(self.min_version) <= version_key(version) <= version_key(self.max_version)


@dataclass(frozen=True)
class Patch:
    """A fix: its manifest metadata, its upstream predicate and its changes."""

    id: str
    title: str
    directory: Path
    upstream_files: tuple[str, ...]
    upstream_pattern: re.Pattern[str]
    changes: tuple[Change, ...]
    newest_needing: str
    first_fixed: str

    @property
    def marker(self) -> str:
        return f"{MARKER_PREFIX} {self.id}"

    def changes_for(self, version: str) -> list[Change]:
        return [c for c in self.changes if c.covers(version)]


@dataclass
class FixResult:
    """What happened to one patch on one tree; ``status`` is one of STATUSES."""

    id: str
    status: str
    files: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    message: str = ""


@dataclass
class PatchReport:
    """The outcome of a run over all patches (the record is built from it)."""

    sglang_version: str
    flashinfer_version: str
    results: list[FixResult]

    def label(self) -> str:
        """The ``io.sglang-deploy.patches`` label value: ``id=status`` joined by commas."""
        return ",".join(f"{r.id}={r.status}" for r in self.results)

    def record(self, engine: str, cuda_version: str) -> dict:
        return make_record(
            engine=engine,
            sglang_version=self.sglang_version,
            flashinfer_version=self.flashinfer_version,
            cuda_version=cuda_version,
            fixes={r.id: (r.status, r.files) for r in self.results},
        )


def make_record(
    *,
    engine: str,
    sglang_version: str,
    flashinfer_version: str,
    cuda_version: str,
    fixes: dict[str, tuple[str, list[str]]],
) -> dict:
    """The ``/etc/sglang-deploy/patches.json`` document (docs/architecture.md)."""
    if engine not in ("sglang", "test-engine"):
        raise PatchError(f"engine must be 'sglang' or 'test-engine', got {engine!r}")
    for fix_id, (status, _files) in fixes.items():
        if status not in STATUSES:
            raise PatchError(f"fix {fix_id}: status must be one of {', '.join(STATUSES)}; got {status!r}")
    return {
        "schema_version": RECORD_SCHEMA_VERSION,
        "engine": engine,
        "sglang_version": sglang_version,
        "flashinfer_version": flashinfer_version,
        "cuda_version": cuda_version,
        "fixes": {k: {"status": s, "files": sorted(f)} for k, (s, f) in sorted(fixes.items())},
    }


def write_record(record: dict, path: Path) -> None:
    """Write atomically so a reader never sees half a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, json.dumps(record, indent=2, sort_keys=False) + "\n")


def load_patches(patches_dir: Path) -> list[Patch]:
    """Every ``*/manifest.toml`` under ``patches_dir``, sorted by id, validated."""
    manifests = sorted(patches_dir.glob("*/manifest.toml"))
    if not manifests:
        raise PatchError(f"no */manifest.toml under {patches_dir}")
    return [_load_manifest(m) for m in manifests]


def _load_manifest(path: Path) -> Patch:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise PatchError(f"{path}: not valid TOML: {exc}") from exc

    def need(table: dict, key: str, where: str) -> object:
        if key not in table:
            raise PatchError(f"{path}: missing field {where}{key}")
        return table[key]

    patch_id = str(need(data, "id", ""))
    if patch_id != path.parent.name:
        raise PatchError(f"{path}: id {patch_id!r} must equal the folder name {path.parent.name!r}")
    upstream = need(data, "upstream", "")
    ranges = need(data, "range", "")
    try:
        pattern = re.compile(str(need(upstream, "pattern", "upstream.")), re.MULTILINE)
    except re.error as exc:
        raise PatchError(f"{path}: upstream.pattern is not a valid regex: {exc}") from exc
    changes = []
    for i, raw in enumerate(need(data, "change", "")):
        where = f"change[{i}]."
        change = Change(
            name=str(need(raw, "name", where)),
            file=str(need(raw, "file", where)),
            min_version=str(need(raw, "min_version", where)),
            max_version=str(need(raw, "max_version", where)),
            old=str(need(raw, "old", where)),
            new=str(need(raw, "new", where)),
        )
        version_key(change.min_version), version_key(change.max_version)  # validate early
        marker = f"{MARKER_PREFIX} {patch_id}"
        if marker not in change.new:
            raise PatchError(f"{path}: {where}new must contain the marker comment {marker!r}")
        if change.old in change.new:
            raise PatchError(f"{path}: {where}new must not contain old (the run would not be idempotent)")
        changes.append(change)
    return Patch(
        id=patch_id,
        title=str(need(data, "title", "")),
        directory=path.parent,
        upstream_files=tuple(str(f) for f in need(upstream, "files", "upstream.")),
        upstream_pattern=pattern,
        changes=tuple(changes),
        newest_needing=str(need(ranges, "newest_needing", "range.")),
        first_fixed=str(need(ranges, "first_fixed", "range.")),
    )


def detect_version(root: Path, dist: str) -> str | None:
    """Version of distribution ``dist`` from its ``*.dist-info/METADATA`` under ``root``.

    Works both for a site-packages folder and for an unpacked wheel, without importing
    the package (importing sglang needs torch and a GPU stack).
    """
    norm = re.sub(r"[-_.]+", "_", dist).lower()
    for info in sorted(root.glob("*.dist-info")):
        name, _, version = info.name[: -len(".dist-info")].rpartition("-")
        if re.sub(r"[-_.]+", "_", name).lower() == norm and version:
            return version
    return None


def _upstream_hit(patch: Patch, root: Path) -> str | None:
    for rel in patch.upstream_files:
        target = root / rel
        if target.is_file() and patch.upstream_pattern.search(target.read_text(encoding="utf-8")):
            return rel
    return None


def evaluate(patch: Patch, root: Path, version: str) -> tuple[FixResult, dict[str, str]]:
    """Decide one patch's status; return it with the new file texts to write (if any).

    Order matters: our marker first (a second run reports ``applied`` and changes
    nothing), then the upstream predicate, then the anchors; a release inside the
    range that matches none of them is drift and raises.
    """
    changes = patch.changes_for(version)
    if not changes:
        hit = _upstream_hit(patch, root)
        if hit:
            return FixResult(patch.id, "upstream", message=f"fix found upstream in {hit}"), {}
        hint = ""
        if any(
            (root / c.file).is_file() and c.old in (root / c.file).read_text(encoding="utf-8") for c in patch.changes
        ):
            hint = (
                " (the unpatched code is still there: review the patch on this release and widen"
                f" max_version in {patch.directory.name}/manifest.toml)"
            )
        return FixResult(patch.id, "absent", message=f"sglang {version} is outside every range{hint}"), {}

    texts: dict[str, str] = {}
    for c in changes:
        target = root / c.file
        if not target.is_file():
            raise DriftError(
                f"patch {patch.id}: sglang {version}: file {c.file} does not exist under {root}; "
                f"change {c.name!r} ({c.min_version}..{c.max_version}) expects it. Version drift: "
                f"review {patch.directory.name}/manifest.toml against this release."
            )
        texts.setdefault(c.file, target.read_text(encoding="utf-8"))

    files = sorted({c.file for c in changes})
    if all(c.new in texts[c.file] for c in changes):
        return FixResult(patch.id, "applied", files=files, message="already applied (marker found), no change"), {}
    hit = _upstream_hit(patch, root)
    if hit:
        return FixResult(patch.id, "upstream", message=f"fix found upstream in {hit}"), {}

    new_texts = dict(texts)
    for c in changes:
        current = new_texts[c.file]
        if c.new in current:
            continue
        count = current.count(c.old)
        if count != 1:
            first = next((ln.strip() for ln in c.old.splitlines() if ln.strip()), "")
            why = "not found" if count == 0 else f"found {count} times (must be exactly once)"
            raise DriftError(
                f"patch {patch.id}: sglang {version}: file {c.file}: the anchor of change {c.name!r} "
                f"({c.min_version}..{c.max_version}, first line {first!r}) was {why}, the fix marker "
                f"{patch.marker!r} is absent and the upstream pattern does not match. Version drift: "
                f"the release changed the code this patch was written against; review "
                f"{patch.directory.name}/manifest.toml against sglang {version}."
            )
        new_texts[c.file] = current.replace(c.old, c.new, 1)
    changed = {f: t for f, t in new_texts.items() if t != texts[f]}
    return FixResult(
        patch.id,
        "applied",
        files=files,
        changed=sorted(changed),
        message=f"patched {', '.join(sorted(changed))}",
    ), changed


def run(
    patches: Iterable[Patch],
    root: Path,
    sglang_version: str,
    flashinfer_version: str,
    *,
    dry_run: bool = False,
) -> PatchReport:
    """Evaluate every patch first, then write all changes or none (never half-applied)."""
    results: list[FixResult] = []
    pending: dict[str, str] = {}
    for patch in patches:
        result, changed = evaluate(patch, root, sglang_version)
        overlap = set(changed) & set(pending)
        if overlap:
            raise PatchError(f"patch {patch.id}: touches {sorted(overlap)} that another patch also changes")
        pending.update(changed)
        results.append(result)
    for rel, text in pending.items():
        try:
            compile(text, str(root / rel), "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise PatchError(f"{rel}: patched source does not compile: {exc}") from exc
    if not dry_run:
        for rel, text in pending.items():
            _atomic_write(root / rel, text)
        for rel in pending:
            py_compile.compile(str(root / rel), doraise=True)
    return PatchReport(sglang_version, flashinfer_version, results)


def _atomic_write(path: Path, text: str) -> None:
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
